"""The notebooks as people open them: a real JupyterLab server (from the project's environment, on
loopback, no token) in a temporary copy of the repository, each notebook opened in Debian's
Chromium through Playwright, Run All from the Run menu, every cell waited for. No error output, the
first screen's sentence there, a plotly figure drawn, and nothing new under notebooks/."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ["incident_report.ipynb", "logs.ipynb", "metrics.ipynb", "stacks.ipynb"]
IGNORED = shutil.ignore_patterns(".venv", ".git", "exports", ".cache", "__pycache__", ".pytest_cache", "*.egg-info")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    copy = tmp_path_factory.mktemp("lab") / "repo"
    shutil.copytree(ROOT, copy, ignore=IGNORED)  # the package too (its built extensions), imported from here
    (copy / "exports").mkdir()
    port = _free_port()
    jupyter = Path(sys.executable).parent / "jupyter"
    server = subprocess.Popen(
        [str(jupyter), "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1", "--allow-root",
         "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
         f"--ServerApp.root_dir={copy}"],
        cwd=copy, env={**os.environ, "PYTHONPATH": str(copy), "JUPYTER_CONFIG_DIR": str(copy / ".jupyter-config")},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=2):
                break
        except OSError:
            time.sleep(0.2)
    try:
        yield copy, url
    finally:
        server.terminate()
        server.wait(timeout=30)


def _run_all(browser: Any, url: str, notebook: str) -> Any:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto(f"{url}/lab/tree/notebooks/{notebook}?reset")  # a fresh workspace: no tab of an earlier test
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_function("() => document.querySelector('.jp-Notebook-ExecutionIndicator')?.dataset.status === 'idle'",
                           timeout=120_000)
    page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=120_000)  # the kernel itself is up
    page.click("li.lm-MenuBar-item:has-text('Run')")
    page.click("li.lm-Menu-item:has-text('Run All Cells')")
    # every code cell run: a number in each prompt, none waiting ([*]), the kernel idle again
    prompts = ("() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')]"
               ".map(e => e.textContent.trim())")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        seen = page.evaluate(prompts)
        idle = page.evaluate("() => document.querySelector('.jp-Notebook-ExecutionIndicator')?.dataset.status")
        if seen and all(p[1:-2].isdigit() for p in seen) and idle == "idle":
            return page
        time.sleep(1)
    page.screenshot(path=f"/tmp/jupyterlab-{notebook}.png")
    raise AssertionError(f"{notebook}: cells not all run in 240 s: prompts {seen}, kernel {idle}")


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_run_all_in_jupyterlab(jupyterlab: tuple[Path, str], browser: Any, notebook: str, tmp_path: Path) -> None:
    copy, url = jupyterlab
    before = sorted(p.name for p in (copy / "notebooks").iterdir())
    page = _run_all(browser, url, notebook)
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
    assert not [e for e in errors if "Traceback" in e or "Error" in e], errors
    assert page.locator(".jp-OutputArea-output .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']"
                        ).count() == 0
    text = page.inner_text(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
    assert "decode" in text and ("21:34:47" in text or notebook != "incident_report.ipynb")
    if notebook == "incident_report.ipynb":
        assert "decode froze at 21:34:47" in text
    assert page.locator(".jp-OutputArea .main-svg").count() >= 1  # a plotly figure drawn
    page.screenshot(path=str(tmp_path / f"{notebook}.png"))
    page.context.close()
    new = sorted(set(p.name for p in (copy / "notebooks").iterdir()) - set(before) - {".ipynb_checkpoints"})
    assert new == []
    assert (copy / "exports" / "dsv4-pd-wedge-2026-06-18").is_dir()
