"""Run All works wherever a notebook is opened: JupyterLab starts a notebook's kernel in the
notebook's own folder, so the default `bundle` (relative to the repository) must be found from
notebooks/ too, and nothing may be left beside the notebooks. Executed with nbclient, as JupyterLab's
Run All executes them: from the repository root, from notebooks/, and from a folder holding a copy of
the notebook beside a bundle of one's own."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.test_report import REFERENCE

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def _run(notebook: Path, cwd: Path, bundle: str | None = None) -> nbformat.NotebookNode:
    nb = nbformat.read(notebook, as_version=4)
    if bundle is not None:  # what a person edits: the parameters cell
        (cell,) = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        cell.source = cell.source.replace('"data/incidents/dsv4-pd-wedge-2026-06-18"', repr(bundle))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def _text(nb: nbformat.NotebookNode) -> str:
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", output.get("evalue")
            data = output.get("data", {})
            parts.append(str(data.get("text/html", "")) + str(data.get("text/plain", "")) + str(output.get("text", "")))
    return "".join(parts)


@pytest.mark.parametrize("where", ["root", "notebooks"])
def test_run_all_from_the_root_and_from_notebooks(where: str) -> None:
    before = sorted(p.name for p in NOTEBOOKS.iterdir())
    nb = _run(NOTEBOOKS / "incident_report.ipynb", ROOT if where == "root" else NOTEBOOKS)
    assert "decode froze at 21:34:47" in _text(nb)
    assert sorted(p.name for p in NOTEBOOKS.iterdir()) == before  # no exports/ or case left beside them
    assert (ROOT / "exports" / REFERENCE.name / "case").is_dir()


def test_run_all_of_a_copy_beside_ones_own_bundle(tmp_path: Path) -> None:
    shutil.copy(NOTEBOOKS / "stacks.ipynb", tmp_path / "stacks.ipynb")
    shutil.copytree(REFERENCE, tmp_path / "my-incident")
    nb = _run(tmp_path / "stacks.ipynb", tmp_path, bundle="my-incident")
    text = _text(nb)
    assert "my-incident" in text and "TP_DESYNC" in text
    assert (tmp_path / "exports" / "my-incident").is_dir()


def test_a_bad_parameter_stops_at_the_first_cell_with_one_sentence(tmp_path: Path) -> None:
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(NOTEBOOKS / "incident_report.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    cell.source = cell.source.replace('"data/incidents/dsv4-pd-wedge-2026-06-18"', '"no-such-bundle"')
    with pytest.raises(CellExecutionError):
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    (error,) = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert error["ename"] == "ForensicsError" and "bundle 'no-such-bundle' not found" in error["evalue"]
    # the sentence (and IPython's pointer to %tb), no frames of the package
    assert len(error["traceback"]) <= 2 and not any("site-packages" in t or "forensics/" in t or "File " in t
                                                     for t in error["traceback"])
