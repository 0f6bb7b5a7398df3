"""The notebooks as people open them: a real JupyterLab server (from the project's environment, on
loopback, no token) in a temporary copy of the repository, each notebook opened in Debian's
Chromium through Playwright, Run All from the Run menu, every cell waited for. No error output, the
first screen's sentence there, a plotly figure drawn, and nothing new under notebooks/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forensics.lab.jupyterlab import REPOSITORY as ROOT
from forensics.lab.jupyterlab import run_all, serve

NOTEBOOKS = ["incident_report.ipynb", "logs.ipynb", "metrics.ipynb", "stacks.ipynb"]


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    copy = tmp_path_factory.mktemp("lab") / "repo"
    with serve(copy) as url:
        yield copy, url


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_run_all_in_jupyterlab(jupyterlab: tuple[Path, str], browser: Any, notebook: str, tmp_path: Path) -> None:
    copy, url = jupyterlab
    before = sorted(p.name for p in (copy / "notebooks").iterdir())
    page = run_all(browser, url, notebook)
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
    assert not [e for e in errors if "Traceback" in e or "Error" in e], errors
    assert page.locator(".jp-OutputArea-output .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']"
                        ).count() == 0
    text = page.inner_text(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
    assert "decode" in text and ("21:34:47" in text or notebook != "incident_report.ipynb")
    if notebook == "incident_report.ipynb":
        assert "decode froze at 21:34:47" in text
    assert page.locator(".jp-OutputArea .main-svg").count() >= 1  # a plotly figure drawn
    _tables_fit_and_long_ones_fold(page, notebook)
    page.screenshot(path=str(tmp_path / f"{notebook}.png"))
    page.context.close()
    new = sorted(set(p.name for p in (copy / "notebooks").iterdir()) - set(before) - {".ipynb_checkpoints"})
    assert new == []
    assert (copy / "exports" / "dsv4-pd-wedge-2026-06-18").is_dir()


VISIBLE = ".jp-NotebookPanel:not(.lm-mod-hidden)"
TABLE_WIDTHS = (f"() => [...document.querySelectorAll('{VISIBLE} .jp-OutputArea-output table')]"
                ".filter(t => t.checkVisibility())"  # drawn: not inside a closed <details>
                ".map(t => [t.getBoundingClientRect().width, t.closest('.jp-OutputArea-output').clientWidth,"
                " t.querySelector('th')?.textContent])")


def _tables_fit_and_long_ones_fold(page: Any, notebook: str) -> None:
    """Every table drawn is no wider than its output area (long cells wrap), and a table of more
    than FOLD_ROWS rows shows those, with all of them one click away."""
    from forensics.render.html import FOLD_ROWS

    widths = page.evaluate(TABLE_WIDTHS)
    assert widths, f"{notebook}: no table drawn"
    assert all(width <= room + 1 for width, room, _ in widths), (notebook, [w for w in widths if w[0] > w[1] + 1])
    if notebook != "stacks.ipynb":  # its every rank in every round: 2 groups x 4 ranks x 2 rounds
        return
    output = page.locator(f"{VISIBLE} .jp-OutputArea-output:has(details)").last
    drawn = "rs => rs.filter(r => r.checkVisibility()).length"
    assert output.locator("tbody tr").evaluate_all(drawn) == FOLD_ROWS
    output.locator("summary").click()
    # the bundle's two py-spy rounds dump 8 processes each: every one a row once unfolded
    dumps = sum(p.read_text().count("\nProcess ") + p.read_text().startswith("Process ")
                for p in (ROOT / "data/incidents/dsv4-pd-wedge-2026-06-18/stacks").glob("round-*.txt"))
    assert output.locator("tbody tr").evaluate_all(drawn) == FOLD_ROWS + dumps == FOLD_ROWS + 16
    assert all(width <= room + 1 for width, room, _ in page.evaluate(TABLE_WIDTHS))
