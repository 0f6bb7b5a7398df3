"""What the suite writes from evidence stays inert: a label value crafted to inject YAML into the
alert's promtool test, escape sequences in messages, hosts and file names printed to a terminal,
and `%{…}` placeholders in evidence under plotly's hover templates."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.render.sections import ReportSession
from tests.test_report import REFERENCE

# In Prometheus' text format: a value holding a quote, a newline and a whole YAML series of its own.
EVIL = "a'\\n      - series: 'up{pwned=\\\"yes\\\"}'\\n        values: '1'"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus) not installed")
def test_a_hostile_label_value_cannot_add_a_series_to_the_promtool_test(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(REFERENCE, bundle)
    for scrapes in (bundle / "metrics").glob("*/scrapes.prom.gz"):
        text = gzip.decompress(scrapes.read_bytes()).decode()
        scrapes.write_bytes(gzip.compress(text.replace('{engine_type="', '{evil="' + EVIL + '",engine_type="').encode()))
    session = ReportSession.open(bundle, tmp_path / "out")
    session.write_outputs()
    test_file = (tmp_path / "out" / "alerts.test.yml").read_text()
    import yaml

    series = [s["series"] for s in yaml.safe_load(test_file)["tests"][0]["input_series"]]
    assert not any(s.startswith("up{") for s in series)  # no series of the attacker's
    assert any("evil=" in s for s in series)  # the label kept, escaped as PromQL wants it
    done = subprocess.run(["promtool", "test", "rules", "alerts.test.yml"], cwd=tmp_path / "out", capture_output=True,
                          text=True)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


ESCAPES = "\x1b[2J\x1b]52;c;cHduZWQ=\x07\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\\x1b]0;title\x07"


def test_escape_sequences_from_evidence_never_reach_the_terminal(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bundle = tmp_path / f"bundle{ESCAPES[:4]}"
    logs = bundle / "logs" / f"host{ESCAPES[:4]}"
    logs.mkdir(parents=True)
    (logs / f"decode{ESCAPES[:4]}.log").write_text(
        f"[2026-06-18 21:40:00] ERROR: {ESCAPES} engine failed\n")
    for command in (["analyze", str(bundle), "--case", str(tmp_path / "case")],
                    ["ingest", str(bundle), "--case", str(tmp_path / "case2")],
                    ["summary", str(tmp_path / "case2")]):
        assert main(command) == 0
        said = capsys.readouterr()
        for stream in (said.out, said.err):
            assert "\x1b" not in stream and "\x07" not in stream, command
        assert "\\x1b" in said.out + said.err  # shown, escaped


def test_hover_templates_hold_only_the_suites_own_text(tmp_path: Path) -> None:
    """Evidence goes into plotly's data (text, meta), never into a hovertemplate, where `%{y}` would
    be read as a placeholder."""
    from forensics.render import figures, swimlanes

    bundle = tmp_path / "bundle"
    (bundle / "logs").mkdir(parents=True)
    (bundle / "logs" / "decode.log").write_text(
        "[2026-06-18 21:40:00] WARNING: spoof %{y} %{x} here\n[2026-06-18 21:40:01] WARNING: spoof %{y} %{x} here\n")
    session = ReportSession.open(bundle, tmp_path / "out")
    figs = [figures.errors_figure(session.analysis, None) if hasattr(figures, "errors_figure") else None,
            swimlanes.timeline_figure(session.analysis, None)]
    for fig in [f for f in figs if f is not None]:
        for trace in fig.data:
            template = getattr(trace, "hovertemplate", None) or ""
            assert "spoof" not in template, template


@pytest.mark.parametrize("marked", [False, True])
def test_report_out_never_replaces_a_users_case_folder(tmp_path: Path, marked: bool,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    (out / "case").mkdir(parents=True)
    (out / "case" / "data.txt").write_text("a user's own file")
    if marked:  # a report folder of ours, with someone's own case/ put in it later
        (out / ".forensics-report").write_text("")
    assert main(["report", str(REFERENCE), "--out", str(out)]) == 2
    assert (out / "case" / "data.txt").read_text() == "a user's own file"
    assert "its case/ is not a forensics case" in capsys.readouterr().err
