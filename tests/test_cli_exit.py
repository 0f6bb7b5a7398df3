"""The console script's exit (`forensics.cli.console`): it skips the interpreter's teardown, and
nothing the interpreter's own exit would have finished is left undone — threads, atexit handlers,
temporary folders, buffered output, the exit status and its reason."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

FORENSICS = Path(sys.executable).parent / "forensics"
# buffered as a user's shell gives it (the suite's environment may ask for unbuffered output)
BUFFERED = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}


def _console_with(main_body: str, tmp_path: Path, **run: object) -> subprocess.CompletedProcess[bytes]:
    """`console()` in a fresh interpreter with buffered output, `main` replaced by a function whose
    body is `main_body` (`out`: a folder for what it leaves behind)."""
    code = ("import atexit, os, sys, tempfile, threading, time\n"
            "from pathlib import Path\n"
            "import forensics.cli as cli\n"
            f"out = Path({str(tmp_path)!r})\n"
            "def main(argv=None):\n"
            + "".join(f"    {line}\n" for line in main_body.splitlines())
            + "cli.main = main\n"
            "cli.console()\n")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, check=False, env=BUFFERED,  # type: ignore[call-overload]
                          timeout=60, **run)


def test_the_installed_command_is_the_console_script() -> None:
    (script,) = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == "forensics"]
    assert script.value == "forensics.cli:console"


def test_the_command_keeps_its_exit_status_and_words() -> None:
    usage = subprocess.run([str(FORENSICS), "analyze"], capture_output=True, text=True, check=False, timeout=60)
    assert usage.returncode == 2 and "the following arguments are required: bundle" in usage.stderr
    helped = subprocess.run([str(FORENSICS), "--help"], capture_output=True, text=True, check=False, timeout=60)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: forensics")
    missing = subprocess.run([str(FORENSICS), "summary", "/nonexistent/case"], capture_output=True, text=True,
                             check=False, timeout=60)
    assert missing.returncode != 0 and missing.stderr.startswith("forensics: ")


def test_work_left_for_the_exit_is_done_before_it(tmp_path: Path) -> None:
    body = """\
def late():
    time.sleep(0.3)
    (out / "thread").write_text("finished")
threading.Thread(target=late).start()
atexit.register(lambda: (out / "atexit").write_text("ran"))
global kept
kept = tempfile.TemporaryDirectory(dir=out)
(out / "tmpdir").write_text(kept.name)
print("a line")
sys.stdout.write("the last words, left in the buffer")
return 3"""
    done = _console_with(body, tmp_path, capture_output=True)
    assert done.returncode == 3, done.stderr
    assert done.stdout == b"a line\nthe last words, left in the buffer"  # the buffer written out
    assert (tmp_path / "thread").read_text() == "finished"  # a thread still running was waited for
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not Path((tmp_path / "tmpdir").read_text()).exists()  # removed at exit, as the interpreter does


@pytest.mark.parametrize("exit_with, status, said", [
    ('"no bundle here"', 1, "no bundle here\n"),
    ("ValueError('not a bundle')", 1, "not a bundle\n"),
    ("None", 0, ""),
    ("True", 1, ""),
    ("2 ** 40", 0, ""),
])
def test_what_is_given_to_sys_exit_is_said_and_exits_as_the_interpreter_does(
        tmp_path: Path, exit_with: str, status: int, said: str) -> None:
    done = _console_with(f"sys.exit({exit_with})", tmp_path, capture_output=True, text=True)
    ordinary = subprocess.run([sys.executable, "-c", f"import sys; sys.exit({exit_with})"], capture_output=True,
                              text=True, check=False, timeout=60)
    assert (done.returncode, done.stderr) == (ordinary.returncode, ordinary.stderr) == (status, said)


def test_a_failure_in_main_is_a_traceback_and_status_1(tmp_path: Path) -> None:
    done = _console_with("raise RuntimeError('a bug')", tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.rstrip().endswith("RuntimeError: a bug")


@pytest.mark.parametrize("returned", [0, 3])
def test_output_nobody_reads_any_more_exits_120_as_the_interpreter_does(tmp_path: Path, returned: int) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone (`forensics … | head` after its lines)
    done = _console_with(f'print("a line left in the buffer")\nreturn {returned}', tmp_path, stdout=write,
                         stderr=subprocess.PIPE)
    os.close(write)
    assert done.returncode == 120 and done.stderr == b""
