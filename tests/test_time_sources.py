"""Time sources ranked: a time written in the evidence outvotes a file's modification time. Files
that were just copied (their mtime is "now") beside a log with real 2025 stamps must not push the log
out of the analysis as a forged clock, stretch the window over 22 months, or lend their copy time to
a finding (the corpus files as issue 34 describes: a k8s SGLang log, a py-spy dump and a scrape)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from forensics.analyze import analyze
from forensics.render.postmortem import draft

CORPUS = Path(os.environ.get("FORENSICS_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus"))
FILES = {"logs": "server_log_deepseek_tp8_k8s_lws_2025-02-17.log",
         "stacks": "sglang_pd_decode_dp_attention_multiprocess.txt",
         "metrics": "metrics_sglang_production_metrics_doc_llama3.1-8b.prom"}
pytestmark = pytest.mark.skipif(not (CORPUS / "README.md").is_file(), reason=f"no corpus at {CORPUS}")


def test_copied_files_mtimes_never_outvote_the_logs_own_times(tmp_path: Path) -> None:
    for folder, name in FILES.items():
        (tmp_path / "bundle" / folder).mkdir(parents=True)
        (source,) = CORPUS.rglob(name)
        shutil.copy(source, tmp_path / "bundle" / folder / name)  # a fresh mtime: "now"
    analysis = analyze(tmp_path / "bundle", tmp_path / "case")
    assert not any(f.kind == "out_of_range" for f in analysis.findings)  # the log stays in
    assert analysis.timeline.events.get_column("ts").min().year == 2025
    notes = analysis.timeline.incident.notes
    assert any(n.startswith(f"stacks/{FILES['stacks']}: time unknown") for n in notes)
    assert any(n.startswith(f"metrics/{FILES['metrics']}: time unknown") for n in notes)
    window = analysis.summary()["window"]
    assert window[0][:4] == "2025" and window[1][:4] == "2025"  # not stretched to the copy time
    for finding in analysis.findings:
        assert finding.at is None or finding.at.year == 2025, finding.text  # the copy time gives no time
    root = draft(analysis).split("## Root Causes", 1)[1].split("##", 1)[0]
    assert "Not yet a root cause (one round of dumps" in root  # one snapshot alone is no root cause
