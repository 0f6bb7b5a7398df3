"""torch's own Flight Recorder analyser (`torchfrtrace`), run on a folder of dumps for the
comparison the tests keep: with torch 2.13 it stops on gloo dumps with a KeyError in
`build_collectives` (their group config names the default group ""); on copies with that key set as
the entries name it (`forensics.lab.collectives.readable_by_torchfrtrace`) it runs, and its text
is what a ticket would hold."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from forensics.lab.collectives import readable_by_torchfrtrace


def _run(folder: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("torchfrtrace") or str(Path(sys.executable).parent / "torchfrtrace")
    return subprocess.run([tool, "-p", "nccl_trace_rank_", str(folder)], capture_output=True, text=True,
                          timeout=120, check=False)


def check_torchfrtrace(folder: Path, rank: int) -> None:
    """`torchfrtrace` on `folder`'s `nccl_trace_rank_*` files as torch wrote them: either the known
    gloo failure, or an answer that names `rank`."""
    done = _run(folder)
    if done.returncode != 0:
        assert "KeyError" in done.stderr and "build_collectives" in done.stderr, done.stderr[-2000:]
    else:
        assert str(rank) in done.stdout + done.stderr, done.stdout[-2000:]


def torchfrtrace_text(folder: Path, work: Path) -> str:
    """What `torchfrtrace` prints (its log goes to stderr) on the repaired copies of `folder`'s dumps."""
    done = _run(readable_by_torchfrtrace(folder, work))
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout + done.stderr
