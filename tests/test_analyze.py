"""The reference incident end to end: exact times, the blind spot, the desync verdict, two
symptom tracks, and the same UTC story from a host in another zone with a skewed clock."""

from __future__ import annotations

import gc
import hashlib
import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

import forensics.analyze as analyze_module
from forensics.analyze import Analysis, analyze
from forensics.cli import main as cli
from forensics.detect import Finding
from forensics.detect.errors import fold_tracebacks
from forensics.detect.keytimes import key_times
from forensics.errors import ForensicsError
from forensics.case.incident import ManifestError, load_incident
from forensics.lab.reference import write_reference
from tests.conftest import REPO

REFERENCE = REPO / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"


def t(hms: str) -> str:
    return f"2026-06-18T{hms}+00:00"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    return analyze(REFERENCE, tmp_path_factory.mktemp("case") / "case")


def _story(result: Analysis) -> dict:
    summary = result.summary()
    return {"key_times": {k: summary["key_times"][k] for k in ("started", "detected", "mitigated", "resolved",
                                                              "ttd_s", "ttm_s", "ttr_s")},
            "last_progress": {c: v["last_progress"] for c, v in summary["components"].items()},
            "findings": sorted((f["kind"], f["component"] or "", f["at"]) for f in summary["findings"])}


def test_the_reference_incident_key_times(reference: Analysis) -> None:
    times = reference.summary()["key_times"]
    assert (times["started"], times["detected"], times["mitigated"], times["resolved"]) == (
        t("21:34:47"), t("21:38:30"), t("21:40:45"), t("21:42:00"))
    assert (times["ttd_s"], times["ttm_s"], times["ttr_s"]) == (223.0, 358.0, 433.0)
    assert times["contradictions"] == []


def test_decode_froze_first_prefill_later_and_both_looked_healthy(reference: Analysis) -> None:
    components = reference.summary()["components"]
    assert components["decode"]["last_progress"] == t("21:34:47") and components["decode"]["frozen"]
    assert components["prefill"]["last_progress"] == t("21:39:07") and components["prefill"]["frozen"]
    frozen = {f.component: f for f in reference.findings if f.kind == "frozen"}
    assert "The metrics agree" in frozen["decode"].text
    assert frozen["decode"].evidence[0].excerpt.startswith("[2026-06-18 21:34:47 TP0] Decode batch.")
    resumed = frozen["decode"].evidence[-1]  # the line that ends the freeze, found by its position in events
    assert (resumed.at, resumed.excerpt[:40]) == (frozen["decode"].until, "[2026-06-18 21:42:00 TP0] Decode batch. ")
    assert resumed.source == "journal/gpu-node-00.export.zst" and resumed.line > frozen["decode"].evidence[0].line
    hang = next(f for f in reference.findings if f.kind == "silent_hang" and f.component == "decode")
    assert (hang.at.isoformat(), hang.until.strftime("%H:%M:%S")) == (t("21:34:47"), "21:40:45")
    assert "health checks answered 200" in hang.text and "(5m58s)" in hang.text


def test_restart_and_time_to_healthy(reference: Analysis) -> None:
    restarts = {f.component: f for f in reference.findings if f.kind == "restart"}
    assert set(restarts) == {"decode", "prefill"}
    assert "healthy again at 21:42:00 (75 s after the restart was issued at 21:40:45)" in restarts["decode"].text
    assert {f.component for f in reference.findings if f.kind == "metrics_restart"} == {"decode", "prefill"}


def test_the_stack_verdict_is_on_the_timeline(reference: Analysis) -> None:
    verdicts = {v["group"]: v for v in reference.summary()["stack_verdicts"]}
    assert verdicts["decode"]["verdict"] == "TP_DESYNC"
    assert verdicts["decode"]["ranks_by_phase"] == {"collective": [0, 1, 2], "idle": [3]}
    assert verdicts["prefill"]["verdict"] == "ALL_IDLE"
    assert {f.at.strftime("%H:%M:%S") for f in reference.findings if f.kind == "stack_verdict"} == {
        "21:40:10", "21:40:20"}


def test_two_symptom_tracks_kept_apart(reference: Analysis) -> None:
    names = [track.name for track in reference.tracks]
    assert names == ["wedge", "tool-call markup leak"]
    leak = reference.tracks[1]
    assert {f.kind for f in leak.findings} == {"markup_leak", "annotation"}
    assert not any(f.kind == "markup_leak" for f in reference.tracks[0].findings)
    (link,) = reference.links
    assert "nothing in the evidence links them" in link and "hypothesis" in link
    assert "21:24:10, before the wedge began" in link and "21:43:10, after the wedge was resolved" in link


@pytest.mark.parametrize("zone, skew", [("Asia/Shanghai", 7.5), ("America/Los_Angeles", -42.0)])
def test_a_host_in_another_zone_with_a_skewed_clock_tells_the_same_utc_story(
        reference: Analysis, tmp_path: Path, zone: str, skew: float) -> None:
    bundle = write_reference(tmp_path / "bundle", time_zone=zone, skew_s=skew)
    shifted = analyze(bundle, tmp_path / "case")
    assert _story(shifted) == _story(reference)
    (check,) = shifted.timeline.clock_checks.iter_rows(named=True)
    assert check["time_zone"] == zone and check["offset_applied_s"] == skew
    assert abs(check["line_minus_journal_s"]) < 1  # stamps and journald agree once zone and offset are applied


def test_without_a_manifest_components_are_guessed_and_said_so(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(REFERENCE, bundle)
    (bundle / "incident.toml").unlink()
    result = analyze(bundle, tmp_path / "case")
    summary = result.summary()
    assert summary["notes"][0].startswith("no incident.toml: components guessed from unit names")
    assert summary["components"]["decode"]["last_progress"] == t("21:34:47")
    # no annotations: detection is the first py-spy dump, a diagnostic action
    assert summary["key_times"]["detected"] == t("21:40:10")
    assert summary["key_times"]["mitigated"] == t("21:40:45")


def test_contradicting_key_times_are_flagged_not_hidden(reference: Analysis) -> None:
    late = datetime(2026, 6, 18, 21, 43, tzinfo=UTC)
    findings = [f for f in reference.findings if f.kind != "mitigation"]
    findings.append(Finding("mitigation", "wedge", None, late, "restart issued at 21:43:00 (a wrong note)."))
    times, extra = key_times(reference.timeline, findings)
    assert times.contradictions == ["resolved (21:42:00) is before mitigated (21:43:00)"]
    assert [f.kind for f in extra] == ["key_times_contradiction"]


def test_tracebacks_fold_into_one_event() -> None:
    rows = [("Traceback (most recent call last):", 0), ('  File "scheduler.py", line 1, in run', 1),
            ("    self.event_loop()", 2), ("RuntimeError: NCCL error: unhandled system error", 3),
            ("[2026-06-18 21:30:00 TP0] Decode batch. #running-req: 1", 4)]
    events = pl.DataFrame({
        "message": [m for m, _ in rows], "host": ["h"] * 5, "pid": [7] * 5, "component": ["decode"] * 5,
        "unit": ["u"] * 5, "source_file": ["j"] * 5, "source_line": [None] * 5, "source_offset": [0, 10, 20, 30, 40],
        "ts": [datetime(2026, 6, 18, 21, 30, 0, n * 1000, tzinfo=UTC) for _, n in rows]})
    (folded,) = fold_tracebacks(events).iter_rows(named=True)
    assert folded["lines"] == 4 and folded["exception"] == "RuntimeError: NCCL error: unhandled system error"


@pytest.mark.parametrize("text, message", [
    ('window = ["2026-06-18T21:45:00Z", "2026-06-18T21:20:00Z"]\n', "window ends before it starts"),
    ('window = ["yesterday", "2026-06-18T21:20:00Z"]\n', "window[0]: expected a time, found a string ('yesterday')"),
    ('[hosts.a]\ntime_zone = "Mars/Olympus"\n', "hosts.a.time_zone: unknown time zone 'Mars/Olympus'"),
    ('[[annotations]]\ntext = "no time"\n', "annotations[0].at: missing"),
    ("title = \n", "incident.toml: "),
])
def test_bad_manifests_are_named(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "incident.toml").write_text(text)
    with pytest.raises(ManifestError, match=re.escape(message)):
        load_incident(tmp_path)


def test_the_committed_reference_is_what_the_generator_writes(tmp_path: Path) -> None:
    fresh = write_reference(tmp_path / "ref")

    def digests(root: Path) -> dict[str, str]:
        return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(root.rglob("*")) if p.is_file()}
    assert digests(fresh) == digests(REFERENCE)


def test_analyze_command_prints_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["analyze", str(REFERENCE), "--case", str(tmp_path / "case"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary) >= {"incident", "window", "sources", "key_times", "components", "findings",
                            "stack_verdicts"}
    assert summary["sources"][0] == {**summary["sources"][0], "path": "journal/gpu-node-00.export.zst",
                                     "format": "journal_export", "quarantined": 0}
    assert cli(["analyze", str(REFERENCE), "--case", str(tmp_path / "case")]) == 0
    assert "TTD 3m43s   TTM 5m58s   TTR 7m13s" in capsys.readouterr().out


def test_on_many_hosts_only_the_incident_host_freezes(reference: Analysis, tmp_path: Path) -> None:
    bundle = write_reference(tmp_path / "bundle", hosts=3)
    result = analyze(bundle, tmp_path / "case")
    assert _story(result)["key_times"] == _story(reference)["key_times"]
    frozen = {(f.component, f.host) for f in result.findings if f.kind == "frozen"}
    assert frozen == {("decode", "gpu-node-00"), ("prefill", "gpu-node-00")}
    assert {f.host for f in result.findings if f.kind == "restart"} == {"gpu-node-00"}


def test_an_undeclared_clock_offset_is_estimated_from_requests_seen_on_two_hosts(
        reference: Analysis, tmp_path: Path) -> None:
    bundle = write_reference(tmp_path / "bundle", hosts=2, skew_s=7.5, declare_skew=False)
    result = analyze(bundle, tmp_path / "case")
    checks = {row["host"]: row for row in result.timeline.clock_checks.iter_rows(named=True)}
    assert checks["gpu-node-00"]["offset_applied_s"] == pytest.approx(7.5, abs=0.005)  # latency: 1-3 ms
    assert checks["gpu-node-00"]["offset_source"].startswith("estimated ±")
    assert checks["gpu-node-01"]["offset_source"] == "declared"
    expected = {k: datetime.fromisoformat(v) for k, v in reference.summary()["key_times"].items()
                if k in ("started", "detected", "mitigated", "resolved")}
    got = result.summary()["key_times"]
    for name, at in expected.items():
        assert abs((datetime.fromisoformat(got[name]) - at).total_seconds()) < 0.005, name


def test_the_display_zone_changes_the_words_not_the_data(reference: Analysis, tmp_path: Path) -> None:
    from forensics.render.text_report import report_text
    shown = analyze(REFERENCE, tmp_path / "case", display_zone="Asia/Shanghai")
    text = report_text(shown)
    assert "key times (Asia/Shanghai):" in text and "started   05:34:47" in text
    assert "decode froze at 05:34:47" in text
    assert shown.summary()["key_times"]["started"] == reference.summary()["key_times"]["started"]
    with pytest.raises(ForensicsError, match="unknown display time zone 'Mars/Base'"):
        analyze(REFERENCE, tmp_path / "case", display_zone="Mars/Base")


@pytest.mark.parametrize("lean", [False, True])
def test_a_wall_clock_step_is_found_with_the_monotonic_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             lean: bool) -> None:
    """Also on a lean timeline read two records at a time: the step lies between two batches, and
    the records either side (routine lines, no text held) are read back from the case."""
    import forensics.timeline.align as align
    import forensics.timeline.host_read as host_read
    from tests.conftest import export_entry
    if lean:
        monkeypatch.setattr(align, "LEAN_ABOVE", -1)
        monkeypatch.setattr(host_read, "LEAN_BATCH_ROWS", 2)
    boot, base = "b" * 32, 1781818000_000000
    records = []
    for n, (real_s, mono_s) in enumerate([(0, 100), (1, 101), (3602, 102), (3603, 103)]):  # +3600 s step
        records.append(export_entry(("__CURSOR", f"c{n}"), ("__REALTIME_TIMESTAMP", str(base + real_s * 1_000_000)),
                                    ("__MONOTONIC_TIMESTAMP", str(mono_s * 1_000_000)), ("_BOOT_ID", boot),
                                    ("_HOSTNAME", "gpu-node-07"), ("MESSAGE", f"line {n}")))
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "host.export").write_bytes(b"".join(records))
    result = analyze(tmp_path / "bundle", tmp_path / "case")
    (jump,) = [f for f in result.findings if f.kind == "clock_jump"]
    assert jump.host == "gpu-node-07" and "stepped +3600.000 s" in jump.text
    assert jump.evidence[0].excerpt == "line 2"
    assert result.timeline.lean is lean
    assert result.timeline.jumps.select("message_before", "message").row(0) == ("line 1", "line 2")


def test_a_log_that_simply_ends_is_not_a_freeze(tmp_path: Path) -> None:
    result = analyze(REPO / "data" / "incidents" / "sample-sglang", tmp_path / "case")
    assert [f for f in result.findings if f.kind == "frozen"] == []
    assert result.key_times.started is None and result.summary()["key_times"]["ttd_s"] is None


def test_templates_new_in_the_incident_window(tmp_path: Path) -> None:
    from forensics.timeline.align import build_timeline
    from forensics.case import ingest as ingest_case
    from forensics.case import load_case
    from forensics.detect import errors
    from forensics.case.incident import load_incident
    from forensics.profiles import load_profile
    from tests.conftest import export_entry
    base = 1781818000_000000
    lines = [(0, "disk /dev/sda1 at 91% full"), (60, "disk /dev/sda1 at 92% full"),
             (600, "allocator returned no block at 0x7f3a2b4c"), (601, "allocator returned no block at 0x7f3a2b50")]
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "h.export").write_bytes(b"".join(
        export_entry(("__REALTIME_TIMESTAMP", str(base + s * 1_000_000)), ("_HOSTNAME", "h"), ("PRIORITY", "3"),
                     ("_SYSTEMD_UNIT", "sglang-dsv4-decode.service"), ("MESSAGE", text)) for s, text in lines))
    ingest_case(tmp_path / "bundle", tmp_path / "case")
    timeline = build_timeline(load_case(tmp_path / "case"), load_incident(tmp_path / "bundle"), load_profile())
    start = datetime.fromtimestamp((base + 300_000_000) / 1e6, UTC)
    (new,) = [f for f in errors.detect(timeline, start) if f.kind == "new_template"]
    assert new.component == "decode"
    assert "2 × “allocator returned no block at <hex>”" in new.text


def test_inputs_listed_in_the_manifest_are_the_ones_read(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(REFERENCE, bundle)
    with open(bundle / "incident.toml", "a") as manifest:
        manifest.write('\n[inputs]\njournal = ["journal/*.export.zst"]\nstacks = ["stacks/round-1.txt", "dumps/*"]\n')
    result = analyze(bundle, tmp_path / "case")
    read = sorted(e["path"] for e in result.timeline.manifest["inputs"])
    assert read == ["journal/gpu-node-00.export.zst", "stacks/round-1.txt"]
    skipped = {s["path"]: s["reason"] for s in result.timeline.manifest["skipped"]}
    assert skipped["stacks/round-2.txt"] == "not among incident.toml [inputs]"
    assert skipped["dumps/*"] == "listed in incident.toml [inputs] but matches no file"


def test_impact_counts_engines_not_their_tp_rank_copies(tmp_path: Path) -> None:
    """The reference generator's decode engine makes 1,000 tokens every 10 s scrape (100 token/s,
    `forensics.lab.reference`), and each of its 4 TP ranks exports that same counter; prefill's
    generated tokens are not the users'. The lost-token estimate uses 100 token/s, not 4 ranks × 2
    engines."""
    from forensics.analyze import analyze

    analysis = analyze(Path(__file__).resolve().parents[1] / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18",
                       tmp_path / "case")
    (lost,) = [i for i in analysis.impact() if i.what == "tokens not generated"]
    assert "100 token/s of the decode engines, one TP rank each" in lost.how
    assert lost.value == pytest.approx(100 * analysis.key_times.seconds("resolved"), rel=0.01)


def test_an_analysis_leaves_the_cycle_collector_as_it_found_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """`analyze` has the collector leave the objects that existed before it alone while it runs (a
    notebook's among them), and gives them back to it at the end, when it fails as well."""
    before = gc.get_freeze_count()
    seen: list[int] = []
    original = analyze_module._analyze

    def spying(*args: object, **kwargs: object) -> Analysis:
        seen.append(gc.get_freeze_count())
        return original(*args, **kwargs)

    monkeypatch.setattr(analyze_module, "_analyze", spying)
    analyze(REFERENCE, tmp_path / "case")
    with pytest.raises(ForensicsError):
        analyze(tmp_path / "no such bundle", tmp_path / "case2")
    assert len(seen) == 2 and all(frozen > before for frozen in seen)
    assert gc.get_freeze_count() == before
