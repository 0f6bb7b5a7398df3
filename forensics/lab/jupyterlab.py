"""A real JupyterLab server from the project's environment (loopback, no token) in a copy of the
repository, and Run All of a notebook in it through a browser page, as a person would: for the
browser tests of the notebooks and the docs' picture of the report notebook.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[2]
# what a copy of the repository leaves behind: environments, git, outputs, caches
NOT_COPIED = shutil.ignore_patterns(".venv", ".git", "exports", ".cache", "__pycache__", ".pytest_cache",
                                    "*.egg-info", ".jupyter-config")
RUN_ALL_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(copy: Path) -> Iterator[str]:
    """JupyterLab serving a fresh copy of the repository at `copy` (the package imported from
    there, outputs in its own `exports/`); yields the server's URL."""
    shutil.copytree(REPOSITORY, copy, ignore=NOT_COPIED)
    (copy / "exports").mkdir(exist_ok=True)
    # no "get notified about Jupyter news?" prompt over the notebook (and no request to ask)
    news = copy / ".jupyter-config" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True, exist_ok=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}\n')
    port = _free_port()
    jupyter = Path(sys.executable).parent / "jupyter"
    server = subprocess.Popen(
        [str(jupyter), "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1", "--allow-root",
         "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
         f"--ServerApp.root_dir={copy}"],
        cwd=copy, env={**os.environ, "PYTHONPATH": str(copy), "JUPYTER_CONFIG_DIR": str(copy / ".jupyter-config")},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2):
                    break
            except OSError:
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def run_all(browser: Any, url: str, notebook: str, size: tuple[int, int] = (1400, 900)) -> Any:
    """`notebooks/NOTEBOOK` opened in a fresh workspace, Run All from the Run menu, and every code
    cell waited for (a number in each prompt, the kernel idle again); returns the page."""
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = context.new_page()
    page.goto(f"{url}/lab/tree/notebooks/{notebook}?reset")  # a fresh workspace: no tab of an earlier run
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_function("() => document.querySelector('.jp-Notebook-ExecutionIndicator')?.dataset.status === 'idle'",
                           timeout=120_000)
    page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=120_000)  # the kernel itself is up
    page.click("li.lm-MenuBar-item:has-text('Run')")
    page.click("li.lm-Menu-item:has-text('Run All Cells')")
    prompts = ("() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')]"
               ".map(e => e.textContent.trim())")
    seen: list[str] = []
    idle = None
    deadline = time.monotonic() + RUN_ALL_S
    while time.monotonic() < deadline:
        seen = page.evaluate(prompts)
        idle = page.evaluate("() => document.querySelector('.jp-Notebook-ExecutionIndicator')?.dataset.status")
        if seen and all(p[1:-2].isdigit() for p in seen) and idle == "idle":
            return page
        time.sleep(1)
    raise AssertionError(f"{notebook}: cells not all run in {RUN_ALL_S} s: prompts {seen}, kernel {idle}")
