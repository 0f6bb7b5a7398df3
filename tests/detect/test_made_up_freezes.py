"""Freezes the verdict must not make up (issue 51, item 9a): a long prefill that the next batch line
shows done is one long step, not a freeze; how long a quiet spell may be is the profile's.

The logs are real SGLang lines, copied whole from the public reports named beside them. What a
test expects is what those lines say — the tokens a Prefill line began, the seconds between the
two stamps, the tokens the next Decode line holds — never what the suite printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forensics.analyze import Analysis, analyze, is_anomaly
from forensics.profiles import FREEZE_GAP_S, PROFILE_DIR, ProfileError, load_profile

# https://github.com/sgl-project/sglang/issues/5031 (pseudotensor, 2025-04-03: "the slowness is in
# the prefill batch phase … Nothing is going on this machine"): an 8009-token prefill, then 90 s
# to the next line, whose cache holds 8014 tokens.
SLOW_PREFILL = """\
[2025-04-03 09:48:06] INFO:     162.199.91.31:42860 - "POST /v1/chat/completions HTTP/1.1" 200 OK
[2025-04-03 09:48:06 TP0] Prefill batch. #new-seq: 1, #new-token: 8009, #cached-token: 2, token usage: 0.00, #running-req: 0, #queue-req: 0, 
[2025-04-03 09:49:36 TP0] Decode batch. #running-req: 1, #token: 8014, token usage: 0.02, gen throughput (token/s): 0.44, #queue-req: 0, 
[2025-04-03 09:49:37 TP0] Decode batch. #running-req: 1, #token: 8054, token usage: 0.02, gen throughput (token/s): 52.24, #queue-req: 0, 
[2025-04-03 09:49:38 TP0] Decode batch. #running-req: 1, #token: 8094, token usage: 0.02, gen throughput (token/s): 52.23, #queue-req: 0, 
[2025-04-03 09:49:38 TP0] Decode batch. #running-req: 1, #token: 8134, token usage: 0.02, gen throughput (token/s): 52.22, #queue-req: 0, 
[2025-04-03 09:49:39 TP0] Decode batch. #running-req: 1, #token: 8174, token usage: 0.02, gen throughput (token/s): 52.22, #queue-req: 0, 
"""
# https://github.com/sgl-project/sglang/issues/4759 (bitbooboo, 2025-03-24; whole lines up to where
# the stored quote breaks off): a 3810-token prefill with 2 running and 68 queued, 15 s to the next
# line, whose cache holds 7352 tokens.
BUSY_PREFILL = """\
[2025-03-24 02:56:20 TP0] Prefill batch. #new-seq: 1, #new-token: 128, #cached-token: 1, token usage: 0.00, #running-req: 0, #queue-req: 0, 
[2025-03-24 02:56:25 TP0] Prefill batch. #new-seq: 2, #new-token: 258, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, 
[2025-03-24 02:56:26 TP0] Prefill batch. #new-seq: 30, #new-token: 3810, #cached-token: 60, token usage: 0.00, #running-req: 2, #queue-req: 68, 
[2025-03-24 02:56:41 TP0] Decode batch. #running-req: 32, #token: 7352, token usage: 0.01, accept len: 2.54, gen throughput (token/s): 39.33, largest-len: 0, #queue-req: 68, 
[2025-03-24 02:56:43 TP0] Prefill batch. #new-seq: 2, #new-token: 253, #cached-token: 5, token usage: 0.01, #running-req: 30, #queue-req: 66, 
[2025-03-24 02:56:45 TP0] Prefill batch. #new-seq: 3, #new-token: 378, #cached-token: 9, token usage: 0.01, #running-req: 29, #queue-req: 63, 
[2025-03-24 02:56:46 TP0] Prefill batch. #new-seq: 2, #new-token: 254, #cached-token: 4, token usage: 0.01, #running-req: 30, #queue-req: 61, 
[2025-03-24 02:56:47 TP0] Prefill batch. #new-seq: 5, #new-token: 632, #cached-token: 13, token usage: 0.01, #running-req: 27, #queue-req: 56, 
[2025-03-24 02:56:47 TP0] Prefill batch. #new-seq: 2, #new-token: 254, #cached-token: 4, token usage: 0.01, #running-req: 30, #queue-req: 54, 
"""


def _analysis(tmp_path: Path, log: str, profile: Path | None = None) -> Analysis:
    path = tmp_path / "bundle" / "logs" / "gpu-node-00" / "sglang.log"
    path.parent.mkdir(parents=True)
    path.write_text(log)
    return analyze(tmp_path / "bundle", tmp_path / "case", load_profile(profile) if profile else None)


def _sglang_with(tmp_path: Path, gap_s: float, long_step: bool = True) -> Path:
    """SGLang's shipped profile as a user's own file, with its freeze gap set to `gap_s` (and,
    when `long_step` is False, without its long-step rules)."""
    text = (PROFILE_DIR / "sglang.toml").read_text()
    text, n = re.subn(r"(?m)^freeze_gap_seconds = .*$", f"freeze_gap_seconds = {gap_s}", text)
    assert n == 1
    if not long_step:
        text, n = re.subn(r"(?ms)^\[logs\.long_step\]\n.*?(?=^\[)", "", text)
        assert n == 1
    path = tmp_path / "sglang-own.toml"
    path.write_text(text)
    return path


def _kinds(analysis: Analysis, kind: str) -> list:
    return [f for f in analysis.findings if f.kind == kind]


def test_a_long_prefill_the_next_line_shows_done_is_one_long_step(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, SLOW_PREFILL)
    assert _kinds(analysis, "frozen") == [] and _kinds(analysis, "silent_hang") == []
    (step,) = _kinds(analysis, "long_step")
    assert step.at.strftime("%H:%M:%S") == "09:48:06" and step.until.strftime("%H:%M:%S") == "09:49:36"
    assert (step.facts["tokens"], step.facts["seconds"], step.facts["held_after"]) == (8009, 90, 8014)
    assert "8,009 tokens" in step.text and "90 s" in step.text and "not a freeze" in step.text
    assert [e.line for e in step.evidence] == [2, 3]
    assert not is_anomaly(step) and not analysis.incident_found


def test_a_busy_engines_long_prefill_is_a_step_under_a_shorter_freeze_gap(tmp_path: Path) -> None:
    """With a 10 s freeze gap in the profile, the 15 s after the 3810-token prefill (2 running, 68
    queued: work pending) is a long step the next line's cache shows done, not a freeze."""
    analysis = _analysis(tmp_path, BUSY_PREFILL, _sglang_with(tmp_path, 10.0))
    assert analysis.timeline.profile.logs.progress_rules.freeze_gap_s == 10.0
    assert _kinds(analysis, "frozen") == []
    (step,) = _kinds(analysis, "long_step")
    assert (step.facts["tokens"], step.facts["seconds"], step.facts["held_after"]) == (3810, 15, 7352)
    assert not analysis.incident_found, [f.text for f in analysis.findings if is_anomaly(f)]


def test_without_the_long_step_rules_the_same_gap_reads_as_a_freeze(tmp_path: Path) -> None:
    """What makes the difference is the profile's [logs.long_step]: without it the same 15 s after a
    line with 2 running and 68 queued is the freeze the gap rule sees."""
    analysis = _analysis(tmp_path, BUSY_PREFILL, _sglang_with(tmp_path, 10.0, long_step=False))
    (frozen,) = _kinds(analysis, "frozen")
    assert frozen.at.strftime("%H:%M:%S") == "02:56:26" and frozen.until.strftime("%H:%M:%S") == "02:56:41"
    assert _kinds(analysis, "long_step") == []


def test_the_shipped_profiles_name_their_freeze_gap_with_its_reason() -> None:
    for name in ("sglang", "vllm"):
        text = (PROFILE_DIR / f"{name}.toml").read_text()
        said = re.search(r"(?ms)((?:^#[^\n]*\n)+)freeze_gap_seconds = ([0-9.]+)$", text)
        assert said and len(said.group(1)) > 100, name  # the reason, in the comment above it
        assert load_profile(name).logs.progress_rules.freeze_gap_s == float(said.group(2)) == FREEZE_GAP_S


@pytest.mark.parametrize(("change", "message"), [
    (("freeze_gap_seconds = 60.0", "freeze_gap_seconds = 0"), "[logs] freeze_gap_seconds must be above 0"),
    (("freeze_gap_seconds = 60.0", 'freeze_gap_seconds = "1m"'),
     "[logs] freeze_gap_seconds must be a number of seconds or tokens per second (0 or more), not '1m'"),
    (('held = "token"', 'held = "tokens"'), "[logs.long_step] held must name a [logs.fields] field, not 'tokens'"),
])
def test_a_bad_freeze_rule_is_named(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    text = (PROFILE_DIR / "sglang.toml").read_text()
    assert text.count(change[0]) == 1
    path = tmp_path / "bad.toml"
    path.write_text(text.replace(*change))
    with pytest.raises(ProfileError) as raised:
        load_profile(path)
    assert str(raised.value) == f"{path}: {message}"
