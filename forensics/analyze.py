"""Analyze a bundle: ingest, one timeline, every detector, key times, symptom tracks, summary.json.

`analyze(bundle)` returns an `Analysis`; `forensics analyze BUNDLE [--json]` prints it. The
detectors run in this order because later ones read earlier ones' findings: progress (freezes,
silent hangs), lifecycle (restarts, mitigation), errors (line kinds, tracebacks, new templates),
stacks (py-spy verdicts on the timeline), then key times and tracks over all of them.
"""

from __future__ import annotations

import gc
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from forensics.timeline.align import LEAN_ABOVE, Timeline, build_timeline
from forensics.case.build import Held, check_held_unshrunk, ingest
from forensics.case.opened import Case, load_case
from forensics.case.places import location
from forensics.case.cluster import Progress
from forensics.detect import (
    DISPLAY_DATED,
    DISPLAY_ZONE,
    Finding,
    collectives,
    findings_frame,
    fold_findings,
    progress,
    span,
    spans_days,
)
from forensics.detect.checked import checked
from forensics.detect.keytimes import KeyTimes
from forensics.detect.registry import run_detectors
from forensics.detect.stack_verdict import HANG_VERDICTS, WAITING_IN_ONE_SNAPSHOT, Verdict
from forensics.detect.stacks import latest
from forensics.detect.tracks import Track, links, main_track_named, tracks
from forensics.errors import ForensicsError
from forensics.case.incident import load_incident
from forensics.profiles import Profile, choose_profile, layers, lines_found


# Symptom kinds that speak of a cause and go into an incident's signature (counts of timeouts or
# aborts follow the load, and would split one problem into many): these, and every layer kind that
# is evidence of a failure mode (its `fault`).
SIGNATURE_KINDS = ("silent_hang", "kv_transfer_failure", "watchdog_timeout", "engine_wait_timeout", "engine_dead", "cuda_error",
                   "gpu_xid_error", "gpu_busy_while_hung", "gpu_idle_while_hung", "collective_timeout",
                   "process_group_abort", "gpu_fallen_off_bus", "npu_device_error", "oom_kill",
                   "cuda_oom", "crash_loop", "startup_failure", "startup_stall", "silent_death", "stuck_process",
                   "distributed_transport_failure", "collective_verdict", "worker_died", "child_failed")
PROFILE_SAMPLE_LINES = 20_000  # log lines looked at to choose a profile
CHECKS_TRACK = "checks"  # findings that say what was looked at when nothing was wrong
# Notes, and what is no fault: an operator's stop and what it brought with it, a run's own orderly end,
# one long step (a prefill the next line shows done) where a freeze was suspected.
NOT_ANOMALIES = ("annotation", "clock_jump", "out_of_range", "operator_stop", "after_stop", "quiet_until_stop",
                 "run_finished", "long_step")


def is_anomaly(finding: Finding) -> bool:
    """Whether a finding says something went wrong: anything but notes, clock steps, non-fatal
    device errors (the device went on: a finding, not an incident) and stack verdicts that show no
    hang (ordinary work, every rank idle)."""
    if finding.kind in NOT_ANOMALIES or finding.facts.get("non_fatal"):
        return False
    if finding.kind == "stack_verdict":  # a hang, or threads waiting on each other in one snapshot
        return finding.facts.get("verdict") in (*HANG_VERDICTS, WAITING_IN_ONE_SNAPSHOT)
    return True


SKIPPED_LISTED = 1000  # files skipped that summary.json names one by one (then only counts)


@dataclass
class Analysis:
    """Everything the detectors found in one bundle."""

    bundle: Path
    timeline: Timeline
    findings: list[Finding]
    key_times: KeyTimes
    tracks: list[Track]
    links: list[str]
    verdicts: list[Verdict]
    display_zone: str = "UTC"  # the zone the findings' text is written in
    #: whether a serving profile's evidence was in the bundle (or the user named one): False when
    #: the default profile was taken for want of any, so no page says the job was SGLang
    profile_matched: bool = True
    #: the main track's name here: the profile's ("wedge") only where a finding on it shows one
    main_track: str = "incident"

    def superseded(self, finding: Finding) -> bool:
        """A stack verdict of an earlier py-spy round than its group's last (reports show the last)."""
        if finding.kind != "stack_verdict":
            return False
        last = {v.group: v for v in latest(self.verdicts)}.get(finding.component or "")
        if last is None:
            return True
        if "round" in finding.facts:  # rounds of one capture time (a copied file's mtime) told apart
            return bool(finding.facts["round"] != last.round + 1)
        return last.at != finding.at

    def reported(self, findings: list[Finding] | None = None) -> list[Finding]:
        """The findings a report lists (all, or those given): stack verdicts of each group's last
        round only, and a person's note that repeats a restart the evidence already shows at the
        same second (typed in sudo's log and noted by a person) kept once."""
        rows = [f for f in (self.findings if findings is None else findings) if not self.superseded(f)]
        said = {(f.at.replace(microsecond=0), f.track) for f in rows if f.kind == "mitigation" and f.at}
        return [f for f in rows if not (f.kind == "annotation" and f.at and (f.at.replace(microsecond=0), f.track)
                                        in said)]

    @property
    def incident_found(self) -> bool:
        """Whether any finding shows something wrong (else the report says "no incident found")."""
        return any(is_anomaly(f) for f in self.findings)

    def impact(self) -> list[Any]:
        """The incident's impact in numbers (`forensics.detect.impact`), each with its source; a
        number that is none (a counter scraped at +Inf or NaN gives a rate of NaN) is left out: no
        sentence can say it and JSON cannot hold it."""
        from forensics.detect.impact import impact

        if not hasattr(self, "_impact"):
            self._impact = [i for i in impact(self.timeline, self.key_times) if math.isfinite(i.value)]
        return self._impact

    def collectives(self) -> pl.DataFrame:
        """One row per process group and rank from every source that saw the collectives (Flight
        Recorder, watchdog lines, py-spy phase): `forensics.detect.collectives.collective_table`."""
        if not hasattr(self, "_collectives"):
            self._collectives = collectives.collective_table(self.timeline, self.verdicts)
        return self._collectives

    def collective_states(self) -> pl.DataFrame:
        """The collectives table with the ranks in one state together: one row per job, process
        group and state (every column but the rank), in the order of each state's first rank, with
        its ranks (`ranks`, a list) and how many (`count`). A thousand ranks waiting in one
        all-reduce are one row, not a thousand."""
        table = self.collectives()
        keys = [c for c in table.columns if c != "rank"]
        return (table.group_by(keys, maintain_order=True)
                .agg(pl.col("rank").alias("ranks"), pl.len().alias("count")))

    def consequences(self) -> list[tuple[str, str, list[str]]]:
        """Components that stopped because a peer stopped, as (component, the peer, the evidence in
        words): a freeze that came after another's, with its ranks all idle (nothing reached it) or
        its last batch line showing work queued and none running. What the evidence supports, and no
        more: the post-mortem words the link as a hypothesis."""
        frozen = sorted((f for f in self.findings if f.kind == "frozen" and f.at and f.component),
                        key=lambda f: f.at)  # type: ignore[arg-type, return-value]
        if len(frozen) < 2:
            return []
        first, out = frozen[0], []
        idle_groups = {v.group for v in latest(self.verdicts) if v.verdict == "ALL_IDLE"}
        for later in frozen[1:]:
            if later.component == first.component:
                continue
            evidence = []
            if later.component in idle_groups:
                evidence.append("its ranks were all idle in the stacks: nothing reached it")
            queued = re.search(r"\((\d+) running, (\d+) queued\)", later.text)
            if queued and int(queued[1]) == 0 and int(queued[2]) > 0:
                evidence.append(f"its last batch line shows {queued[2]} queued and none running: work waited that "
                                "it did not start")
            if evidence:
                gap = span((later.at - first.at).total_seconds())  # type: ignore[operator]
                evidence.insert(0, f"it stopped {gap} after {first.component} froze")
                out.append((later.component, first.component or "", evidence))
        return out

    def alert(self) -> Any:
        """The progress alert that would have caught this incident (`forensics.detect.alert`), or None."""
        from forensics.detect.alert import alert_rule

        if not hasattr(self, "_alert"):
            self._alert = alert_rule(self.timeline, self.findings)
        return self._alert

    def signature(self) -> dict[str, Any] | None:
        """What makes this incident the same problem as another: the components that froze, each
        hung stack group's verdict with its collective and the function that called it, and the
        symptom kinds that speak of a cause (not load-dependent counts). `id` is a short hash of
        `parts`; None when nothing was wrong."""
        if not self.incident_found:
            return None
        parts = sorted({f"froze: {f.component}" for f in self.findings if f.kind == "frozen" and f.component})
        for v in latest(self.verdicts):
            if v.verdict in HANG_VERDICTS:
                caller = (v.called_from or "").split(" (")[0]
                parts.append(f"stacks: {v.group} {v.verdict}"
                             + (f" in {v.collective}" if v.collective else "") + (f" from {caller}" if caller else ""))
        main = self.main_track
        kinds = set(SIGNATURE_KINDS) | {e.kind for e in self.timeline.profile.logs.events if e.fault}
        parts += sorted({f"symptom: {f.kind}" for f in self.findings if f.kind in kinds and f.track == main})
        if not parts:
            return None
        import hashlib

        return {"id": hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12], "parts": parts}

    def checked(self) -> list[str]:
        """What the analysis looked at and what each look found (`forensics.detect.checked`)."""
        return checked(self.timeline, self.findings, self.verdicts)

    def findings_frame(self) -> pl.DataFrame:
        """The canonical `findings` frame."""
        return findings_frame(self.findings)

    def last_progress(self) -> dict[str, dict[str, Any]]:
        """Per component: the last progress before it froze (or its last progress if it never did)."""
        out: dict[str, dict[str, Any]] = {}
        table = (progress.last_progress(self.timeline).group_by("component")
                 .agg(pl.col("last").max(), pl.col("lines").sum()).sort("component", nulls_last=True))
        for row in table.iter_rows(named=True):  # sorted: the same summary.json for the same evidence
            out.setdefault(row["component"] or "unknown", {"last_progress_line": row["last"].isoformat()
                                                           if row["last"] else None,
                                                           "progress_lines": row["lines"]})
        for f in self.findings:
            if f.kind == "frozen" and f.component:
                entry = out.setdefault(f.component, {})
                if "last_progress" not in entry:
                    entry.update(last_progress=f.at.isoformat() if f.at else None, frozen=True,
                                 frozen_until=f.until.isoformat() if f.until else None)
        for entry in out.values():
            entry.setdefault("last_progress", entry.get("last_progress_line"))
            entry.setdefault("frozen", False)
        return out

    def span(self) -> list[str | None]:
        """The first and last time on the timeline (ISO-8601): what the analysis placed, so a file
        whose only time is its copy time ("time unknown", or a dump or scrape dated by its file's
        mtime) does not stretch it; [None, None] when nothing carries a time of its own."""
        t = self.timeline
        stated = pl.col("ts_confidence").cast(pl.String).fill_null("") != "low"  # a copy time is no incident's time
        stacks = t.stacks.filter(stated) if t.stacks.height else t.stacks
        times = [x for x in (t.events.get_column("ts").min(), t.events.get_column("ts").max(),
                             stacks.get_column("ts").min() if stacks.height else None,
                             stacks.get_column("ts").max() if stacks.height else None,
                             *t.samples.filter(stated).select(pl.col("ts").min().alias("a"), pl.col("ts").max()
                                                              .alias("b")).collect().row(0)) if x is not None]
        if not times:
            return [None, None]  # nothing carries a time of its own: the window is unknown, not the copy time
        return [min(times).isoformat(), max(times).isoformat()]

    def summary(self) -> dict[str, Any]:
        """What summary.json holds (see DESIGN.md): JSON as RFC 8259 has it, a number the evidence
        made NaN or infinite (a fact read from a hostile line) null."""
        incident, manifest = self.timeline.incident, self.timeline.manifest
        window = ([w.isoformat() for w in incident.window] if incident.window else self.span())
        return strict_json({
            "incident": incident.title,
            "display_time_zone": self.display_zone,
            "bundle": str(self.bundle),
            "window": window,
            "sources": [{k: e.get(k) for k in ("path", "format", "records", "parsed", "quarantined", "duplicates",
                                               "first_ts", "last_ts", "error")} for e in manifest["inputs"]],
            "skipped": {"count": len(manifest["skipped"]), "files": manifest["skipped"][:SKIPPED_LISTED]},
            "key_times": self.key_times.as_dict(),
            "components": self.last_progress(),
            "findings": [{"kind": f.kind, "track": f.track, "component": f.component, "host": f.host,
                          "at": f.at.isoformat() if f.at else None, "until": f.until.isoformat() if f.until else None,
                          "text": f.text, "facts": jsonable(f.facts)}
                         for f in sorted(self.findings, key=lambda f: (f.at is None, f.at))],
            "tracks": [{"name": t.name, "components": t.components, "first": t.first.isoformat() if t.first else None,
                        "last": t.last.isoformat() if t.last else None, "findings": len(t.findings)}
                       for t in self.tracks],
            "track_links": self.links,
            "stack_verdicts": [v.as_dict() for v in latest(self.verdicts)],
            "incident_found": self.incident_found,
            "signature": self.signature(),
            "impact": [{"what": i.what, "value": i.value, "source": i.source, "how": i.how, "estimate": i.estimate}
                       for i in self.impact()],
            "alert": (rule.as_dict(self.key_times.detected) if (rule := self.alert()) is not None else None),
            "checked": self.checked(),
            "clock_checks": self.timeline.clock_checks.to_dicts(),
            "notes": self.timeline.incident.notes,
        })


def analyze(bundle: str | Path, case_dir: str | Path | None = None, profile: Profile | None = None,
            display_zone: str = "UTC", on_progress: Progress | None = None) -> Analysis:
    """Ingest `bundle` (into `case_dir`, default exports/<bundle>/case; `on_progress` shows its tasks)
    and run every detector; the findings' text writes times in `display_zone` (everything stored
    stays UTC)."""
    try:
        zone = ZoneInfo(display_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ForensicsError(f"unknown display time zone {display_zone!r} (e.g. UTC, Asia/Shanghai)") from None
    token = DISPLAY_ZONE.set(zone)
    try:
        with _objects_so_far_left_alone():
            return _analyze(Path(bundle), case_dir, profile, on_progress)
    finally:
        DISPLAY_ZONE.reset(token)


@contextmanager
def _objects_so_far_left_alone() -> Iterator[None]:
    """Python's cycle collector leaves the objects that exist now (modules, classes, a notebook's
    state) out of its passes until the end: an analysis makes many short-lived objects, and each
    full pass walked all of those too, holding the lock every thread needs (measured at 1 M entries:
    0.1-0.2 s of a 4 s analysis)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _profile_evidence(case: Case) -> tuple[list[str], list[str], pl.Series]:
    """What a profile is chosen by: the process titles (a dump's, and the one a log line's prefix
    names: vLLM's `(EngineCore_DP1 pid=1455)`), the metric names and the first log lines."""
    titles = case.stacks.select(pl.col("title").drop_nulls().unique()).collect().get_column("title").to_list()
    if "LOG_PROCESS" in (case.manifest.get("layout", {}).get("extra_columns", {}).get("events") or []):
        titles += (case.events_of(["LOG_PROCESS"]).head(PROFILE_SAMPLE_LINES).select(pl.col("LOG_PROCESS").drop_nulls()
                                                                                      .unique()).collect()
                   .get_column("LOG_PROCESS").to_list())
    names = (case.samples.select(pl.col("name").cast(pl.String).drop_nulls().unique()).collect()
             .get_column("name").to_list())
    messages = case.events_of(["message"]).head(PROFILE_SAMPLE_LINES).collect().get_column("message").drop_nulls()
    return titles, names, messages


def profile_for(case: Case) -> tuple[Profile, str, bool]:
    """The shipped profile the case's evidence points to (process titles, metric names, the first
    log lines), why, and whether its own evidence was there (not the default for want of any)."""
    titles, names, messages = _profile_evidence(case)
    count = lines_found_in(messages)
    profile, why = choose_profile(titles, names, messages.to_list(), count)
    found = profile.evidence is not None and bool(lines_found(profile.evidence, [*titles, *names])
                                                  or count(profile.evidence))
    return profile, why, found


def profile_said(analysis: Analysis) -> str:
    """Which knowledge read the bundle, as a report's header says it: the serving profile whose
    evidence it showed, or that none matched and the layers under every stack read it."""
    if analysis.profile_matched:
        return f"profile {analysis.timeline.profile.name}"
    return "no serving profile matched; read with the layers " + ", ".join(layer.name for layer in layers())


def lines_found_in(messages: pl.Series) -> Callable[[re.Pattern[str]], int]:
    """How many of `messages` a pattern finds something in: by polars (Rust's regex engine, 45 ms
    less than Python's loop over 20,000 lines), or by Python's `re` where that engine does not take
    the pattern."""
    def count(pattern: re.Pattern[str]) -> int:
        try:
            return int(messages.str.contains(pattern.pattern).sum())
        except pl.exceptions.ComputeError:
            return lines_found(pattern, messages)

    return count


def _analyze(bundle: Path, case_dir: str | Path | None, profile: Profile | None,
             on_progress: Progress | None) -> Analysis:
    case_dir = location(case_dir) if case_dir else Path("exports") / bundle.resolve().name / "case"
    # the timeline reads the journal rows this ingest holds, not its files, unless it is lean
    held = Held(keep_events=LEAN_ABOVE)
    ingest(bundle, case_dir, on_progress, held=held)
    case = load_case(case_dir)
    case.held_events = held.events
    chosen = None
    matched = True
    if profile is None:
        profile, chosen, matched = profile_for(case)
    incident = load_incident(bundle, profile, matched)
    if chosen:
        incident.notes.append(chosen)
    timeline = build_timeline(case, incident, profile, progress=on_progress)
    dated = DISPLAY_DATED.set(spans_days(_evidence_span(timeline), DISPLAY_ZONE.get()))
    try:
        ctx = run_detectors(timeline)
    finally:
        DISPLAY_DATED.reset(dated)
    check_held_unshrunk(bundle, "after the case was written, while its records were read from memory",
                        "the findings may rest on those zeros, so none is given")
    found, verdicts, times = ctx.found, ctx.verdicts, ctx.times
    if not any(is_anomaly(f) for f in found):
        # Stacks of healthy processes are a check that was made, not an incident: no track of its own.
        for f in found:
            if f.kind == "stack_verdict":
                f.track = CHECKS_TRACK
    found = fold_findings(found)
    main = main_track_named(found, ctx.main_track)
    all_tracks = tracks(found, main)
    return Analysis(bundle, timeline, found, times, all_tracks, links(all_tracks, times.resolved), verdicts,
                    DISPLAY_ZONE.get().key, matched, main)


@contextmanager
def in_display_zone(analysis: Analysis) -> Iterator[None]:
    """Within it, `forensics.detect.clock` writes times in the analysis' display zone (with their
    dates when the evidence spans more than one day there)."""
    zone = ZoneInfo(analysis.display_zone)
    token = DISPLAY_ZONE.set(zone)
    dated = DISPLAY_DATED.set(spans_days(_evidence_span(analysis.timeline), zone))
    try:
        yield
    finally:
        DISPLAY_DATED.reset(dated)
        DISPLAY_ZONE.reset(token)


def _evidence_span(timeline: Timeline) -> list[datetime | None]:
    """The first and last times of the timeline's lines, dumps and scrapes."""
    samples = timeline.samples.select(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last")).collect()
    stacks = timeline.stacks.get_column("ts")
    return [timeline.first_ts, timeline.last_ts, stacks.min(), stacks.max(), *samples.row(0)]  # type: ignore[list-item]


SUMMARY_SCHEMA = Path(__file__).with_name("summary.schema.json")  # summary.json's published JSON Schema


def strict_json(value: Any) -> Any:
    """`value` with every float that JSON cannot hold (NaN, ±infinity, which Python's `json`
    writes as `NaN` and `Infinity`, and strict readers refuse) made None, in dicts and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def jsonable(facts: dict[str, Any]) -> dict[str, Any]:
    """A finding's facts as JSON holds them: times as ISO-8601 text."""
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in facts.items()}


def summary_problems(summary: dict[str, Any]) -> list[str]:
    """Every way `summary` (as written to summary.json) breaks its JSON Schema, each with its path;
    empty when it conforms. Needs `jsonschema` (installed with the report and dev extras)."""
    import json

    import jsonschema

    schema = json.loads(SUMMARY_SCHEMA.read_text())
    checker = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    data = json.loads(json.dumps(summary, default=str))
    return [f"{'/'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"
            for error in sorted(checker.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))]


def seen_before(summary: dict[str, Any], library: Path, itself: Path | None = None) -> dict[str, Any] | None:
    """Incidents of the same signature that started no later than this one, among the
    summary.json files under `library` (a batch's output, or any folder of reports) other than
    `itself`: how many, the last one, and each; None when none."""
    import json

    signature = (summary.get("signature") or {}).get("id")
    start = (summary.get("window") or [None])[0]
    if not signature or not library.is_dir():
        return None
    earlier = []
    for path in sorted(library.glob("**/summary.json")):
        if itself is not None and path.resolve() == itself.resolve():
            continue
        try:
            other = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        other_start = (other.get("window") or [None])[0]
        if (other.get("signature") or {}).get("id") == signature and other_start and (not start or other_start <= start):
            earlier.append({"incident": other.get("incident"), "started": other_start, "summary": str(path)})
    if not earlier:
        return None
    earlier.sort(key=lambda e: e["started"])
    return {"count": len(earlier), "last": earlier[-1]["started"], "incidents": earlier}


def no_incident_heading(analysis: Analysis) -> str:
    """The sentence a report opens with when no finding shows a fault."""
    if not analysis.timeline.manifest["inputs"]:
        return "no evidence read: nothing in the bundle could be checked"
    return "no incident found: nothing in the evidence shows a fault. Checked:"
