"""Every file of a bundle that is not read is named with its reason wherever the analysis speaks:
`forensics analyze`'s text, summary.json (valid against its schema) and the post-mortem draft. The
bundle is a real corpus3 log beside two files no reader takes (a note and bytes): the discovery's
reason for each is the one `ingest`'s listing gives (`sources.detect`'s words)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from forensics.analyze import analyze, summary_problems
from forensics.render.postmortem import draft
from forensics.render.text_report import report_text

CORPUS3 = Path(os.environ.get("FORENSICS_CORPUS3", Path(__file__).resolve().parents[2] / "shared" / "corpus3"))
LOG = CORPUS3 / "logs" / "sglang_dgx_spark_nvfp4_silent_death_during_cuda_graph_capture_resource_tracker_warning.log"


@pytest.mark.skipif(not LOG.is_file(), reason=f"no corpus at {CORPUS3}")
def test_files_not_read_are_named_with_their_reason_in_every_output(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "logs" / "node-0").mkdir(parents=True)
    shutil.copy(LOG, bundle / "logs" / "node-0" / LOG.name)
    (bundle / "notes.txt").write_text("copied the logs at 21:45, ask Ana about the restart\n")
    (bundle / "blob.bin").write_bytes(bytes(range(256)))
    analysis = analyze(bundle, tmp_path / "case")
    summary = analysis.summary()
    assert summary_problems(summary) == []
    named = {s["path"]: s["reason"] for s in summary["skipped"]["files"]}
    assert summary["skipped"]["count"] == 2 and set(named) == {"notes.txt", "blob.bin"}
    assert all(reason.startswith("not a recognised input") for reason in named.values())
    text, post = report_text(analysis), draft(analysis)
    for path, reason in named.items():
        assert f"  {path}: {reason}" in text
        assert f"`{path}`" in post and reason in post
    assert "## Evidence not read" in post
