"""The console script's exit (`forensics.cli.console`): it skips the interpreter's teardown, and
nothing the interpreter's own exit would have finished is left undone — threads, atexit handlers,
temporary folders, buffered output, the exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

FORENSICS = Path(sys.executable).parent / "forensics"


def _console_with(main_body: str, tmp_path: Path, **run: object) -> subprocess.CompletedProcess[bytes]:
    """`console()` in a fresh interpreter, with `main` replaced by a function whose body is
    `main_body` (`out`: a folder for what it leaves behind)."""
    code = ("import atexit, os, sys, tempfile, threading, time\n"
            "from pathlib import Path\n"
            "import forensics.cli as cli\n"
            f"out = Path({str(tmp_path)!r})\n"
            "def main(argv=None):\n"
            + "".join(f"    {line}\n" for line in main_body.splitlines())
            + "cli.main = main\n"
            "cli.console()\n")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, check=False, **run)  # type: ignore[call-overload]


def test_the_command_keeps_its_exit_status_and_words() -> None:
    usage = subprocess.run([str(FORENSICS), "analyze"], capture_output=True, text=True, check=False)
    assert usage.returncode == 2 and "the following arguments are required: bundle" in usage.stderr
    helped = subprocess.run([str(FORENSICS), "--help"], capture_output=True, text=True, check=False)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: forensics")
    missing = subprocess.run([str(FORENSICS), "summary", "/nonexistent/case"], capture_output=True, text=True,
                             check=False)
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
sys.stdout.write("x" * 3_000_000)
return 3"""
    done = _console_with(body, tmp_path, capture_output=True)
    assert done.returncode == 3, done.stderr
    assert len(done.stdout) == 3_000_000  # every buffered byte written out
    assert (tmp_path / "thread").read_text() == "finished"  # a thread still running was waited for
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not Path((tmp_path / "tmpdir").read_text()).exists()  # removed at exit, as the interpreter does


def test_a_reason_given_to_sys_exit_is_printed_and_exits_1(tmp_path: Path) -> None:
    done = _console_with('sys.exit("no bundle here")', tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr == "no bundle here\n"


def test_output_nobody_reads_any_more_exits_120_as_the_interpreter_does(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone (`forensics … | head` after its lines)
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    done = _console_with('print("a line left in the buffer")\nreturn 0', tmp_path, stdout=write,
                         stderr=subprocess.PIPE, env=buffered)
    os.close(write)
    assert done.returncode == 120, done.stderr
