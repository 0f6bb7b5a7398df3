"""torch's own Flight Recorder analyser (`torchfrtrace`), run on a folder of dumps for the
comparison the tests keep: with torch 2.13 it stops on gloo dumps with a KeyError in
`build_collectives`; a later torch that reads them must agree with forensics on the rank named."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def check_torchfrtrace(folder: Path, rank: int) -> None:
    """Run `torchfrtrace` on `folder`'s `nccl_trace_rank_*` files: either the known gloo failure, or
    an answer that names `rank`."""
    tool = shutil.which("torchfrtrace") or str(Path(sys.executable).parent / "torchfrtrace")
    done = subprocess.run([tool, "-p", "nccl_trace_rank_", str(folder)], capture_output=True, text=True,
                          timeout=120, check=False)
    if done.returncode != 0:
        assert "KeyError" in done.stderr and "build_collectives" in done.stderr, done.stderr[-2000:]
    else:
        assert str(rank) in done.stdout, done.stdout[-2000:]
