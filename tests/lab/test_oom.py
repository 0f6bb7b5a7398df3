"""The kernel's OOM killer for real: a Python process outgrows a 64 MiB memory cgroup, the kernel kills
it, and its own report (`dmesg -T`) goes into a bundle. Skipped, with the reason, where the machine
gives no writable memory cgroup or no readable kernel log (CI runs as root and has both)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.analyze import analyze
from forensics.lab.oom import LabError, run


def test_the_kernels_oom_kill_in_a_memory_cgroup_is_named_with_its_pid(tmp_path: Path) -> None:
    try:
        bundle, pid = run(tmp_path / "bundle", limit_mib=64)
    except LabError as error:
        pytest.skip(f"no real OOM kill here: {error}")
    report = (bundle / "logs" / "gpu-node-00" / "dmesg.txt").read_text()
    assert f"Killed process {pid} (python" in report  # the kernel's own words, before forensics reads them
    analysis = analyze(bundle, tmp_path / "case")
    (oom,) = [f for f in analysis.findings if f.kind == "oom_kill"]
    assert f"(pid {pid})" in oom.text and "memory cgroup's limit was reached" in oom.text
    assert oom.at is not None and oom.host == "gpu-node-00"
    assert analysis.incident_found and "no incident" not in oom.text
    (entry,) = analysis.timeline.manifest["inputs"]
    assert entry["quarantined"] == 0 and entry["parsed"] > 0
