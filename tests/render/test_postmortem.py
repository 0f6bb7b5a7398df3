"""The post-mortem draft a team can publish after light editing: impact in numbers with their
sources, a consequence told from a root cause, typed and prioritised action items, one timeline
row per event with its date in the display zone and UTC, and durations that agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forensics.render.text_report import report_text
from forensics.render.sections import ReportSession
from tests.sources.test_frtrace_text import OLDER as PASTED_FRTRACE
from tests.test_report import REFERENCE


@pytest.fixture(scope="module", params=["UTC", "Asia/Shanghai", "America/Los_Angeles"])
def draft(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    session = ReportSession.open(REFERENCE, tmp_path_factory.mktemp("pm"), display_tz=request.param)
    session.write_outputs()
    return request.param, (session.out_dir / "postmortem.md").read_text()


def _section(text: str, heading: str) -> str:
    return text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_impact_is_counted_in_requests_and_tokens_with_sources(draft: tuple[str, str]) -> None:
    _, text = draft
    impact = _section(text, "Impact")
    # the story logs no request that timed out (SGLang's router prints none; its engines' timeouts
    # are off by default): no request count is claimed
    assert "requests timed out" not in impact and "requests aborted" not in impact
    assert re.search(r"about [\d,]+ tokens not generated .* \(source: sglang:generation_tokens_total \(metrics\)\) — "
                     r"an estimate", impact)
    assert "blind spot" not in impact  # the health checks' blind spot is a matter of detection


def test_prefill_is_a_consequence_not_a_second_root_cause(draft: tuple[str, str]) -> None:
    _, text = draft
    causes = _section(text, "Root Causes")
    assert "prefill is a consequence, not a second root cause (a hypothesis the evidence supports)" in causes
    assert "nothing reached it" in causes and "6 queued and none running" in causes and "To confirm:" in causes
    assert "(most likely a consequence of decode's freeze)" in _section(text, "Summary")


def test_action_items_have_a_type_and_a_priority(draft: tuple[str, str]) -> None:
    _, text = draft
    rows = [r for r in _section(text, "Action Items").splitlines() if r.startswith("| ") and "---" not in r][1:]
    assert rows and all(r.split(" | ")[1] in ("detect", "mitigate", "prevent", "mitigate / prevent / detect / process")
                        for r in rows)
    assert any("alerts.yml" in r and "| P0 |" in r for r in rows)


def test_one_row_per_event_dated_in_the_display_zone_and_utc(draft: tuple[str, str]) -> None:
    zone, text = draft
    rows = [r for r in _section(text, "Timeline").splitlines() if r.startswith("| 2026-")]
    assert len(rows) == len(set(rows))
    restart_notes = [r for r in rows if "restart issued" in r]
    assert len(restart_notes) == 1  # the sudo line and the person's note say the same: one row
    day = {"UTC": "2026-06-18 21:34:47", "Asia/Shanghai": "2026-06-19 05:34:47",
           "America/Los_Angeles": "2026-06-18 14:34:47"}[zone]
    assert any(r.startswith(f"| {day} |") and "| frozen |" in r for r in rows)
    header = text.splitlines()[2]
    assert f"incident of {day[:10]} ({zone})" in header
    if zone != "UTC":
        assert "| 2026-06-18 21:34:47 |" in text  # the UTC column beside the zone's
    if zone == "Asia/Shanghai":
        assert "2026-06-18 UTC" in header  # the day differs from UTC's: both are said


def test_durations_agree_with_the_key_times(draft: tuple[str, str]) -> None:
    _, text = draft
    assert "(7m13s after the start)" in text and "no progress for 7m13s" in text
    assert "7m14s" not in text and "1781806800" not in text  # no raw epoch seconds


def test_the_draft_renders_inert_and_whole_as_markdown(draft: tuple[str, str], tmp_path: Path) -> None:
    import mistune

    _, text = draft
    rendered = str(mistune.html(text))
    assert "<script" not in rendered and "<img" not in rendered
    for heading in ("Summary", "Impact", "Root Causes", "Trigger", "Resolution", "Detection", "Action Items",
                    "Lessons Learned", "Timeline"):
        assert f"<h2>{heading}</h2>" in rendered


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai"])
def test_a_finding_the_evidence_gives_no_time_has_its_row_and_says_so(tmp_path: Path, zone: str) -> None:
    bundle = tmp_path / "pasted"
    bundle.mkdir()
    (bundle / "frtrace.txt").write_text(PASTED_FRTRACE)  # torchfrtrace's report as pasted into a ticket
    session = ReportSession.open(bundle, tmp_path / "out", display_tz=zone)
    session.write_outputs()
    text = (session.out_dir / "postmortem.md").read_text()
    rows = [line for line in _section(text, "Timeline").splitlines() if "collective_verdict" in line]
    assert len(rows) == 2  # one verdict per process group, after the dated rows (there are none)
    assert all(row.startswith("| time unknown |" + (" time unknown |" if zone != "UTC" else "") + " ") for row in rows)
    assert "Rank 1 of the group's 4 ranks never joined collective 5" in rows[0] and "SIZE_MISMATCH" in rows[1]
    assert "- Resolved: not in the evidence" in _section(text, "Resolution")
    assert _section(text, "Detection").lstrip().startswith("Detected: not in the evidence; time to detect unknown.")
    assert " ?" not in text.replace("(a client's mass cancellation? a deploy? load?)", "")
    brief = report_text(session.analysis)
    assert "## track: wedge (no component, no time in the evidence)" in brief
    assert "\n  --:--:--  [collective_verdict] process group 0 (default_pg)" in brief
