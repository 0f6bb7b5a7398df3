"""Progress: when each component last did work, and whether it froze with work pending.

A component froze when its progress lines (SGLang's `Prefill batch` / `Decode batch`) stop for
longer than its profile's freeze gap (`[logs] freeze_gap_seconds`) while its last line still counted
running or queued requests — unless the quiet was one long step: the last line began a step (a
long prefill) that the next line shows done, at a rate the profile finds plausible; that is said
as a long step (`long_step`, a note), not as a freeze. The
metrics say the same or not: their stalled windows (`forensics.timeline.metrics.stalled`) on the
component's port are checked against the freeze and the agreement or disagreement is stated.
While frozen, a unit that stays active and health checks that answer 200 are the blind spot
(`silent_hang`), measured until the restart or until progress resumes.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from forensics.detect import (
    Evidence,
    Finding,
    clock,
    earliest,
    event_evidence,
    excerpt,
    span,
)
from forensics.detect.registry import Context, detector
from forensics.timeline.align import Timeline
from forensics.timeline.metrics import stalled
from forensics.timeline.progress import (  # noqa: F401 - the detector's own names, read by its callers
    LINE,
    PENDING,
    STREAM,
    working,
)


def progress_lines(timeline: Timeline, *columns: str) -> pl.DataFrame:
    """The progress lines the timeline holds, in time order, with `columns` beside who logged them
    and when (a lean timeline holds only those either side of a gap and each scheduler's first and
    last: `timeline.progress_streams` counts them all)."""
    keep = [c for c in dict.fromkeys(("ts", "component", "host", "tag", "progress", *columns))
            if c in timeline.events.columns]
    return timeline.events.lazy().filter(working(timeline.profile)).sort("ts", maintain_order=True).select(keep).collect()


def last_progress(timeline: Timeline) -> pl.DataFrame:
    """Per component, host and scheduler tag: progress lines, first and last time, and the last line's
    running and queued requests."""
    return timeline.progress_streams.sort("component", "host", "tag", nulls_last=True)


def freezes(timeline: Timeline) -> pl.DataFrame:
    """Gaps in each component's progress (per host and scheduler tag: with DP attention every DP
    rank logs its own batches, and a pasted log may hold several engines) longer than the profile's
    freeze gap after a line with work pending, or that were one long step (`long_step`, with the
    step's tokens and what the next line shows of them): component, host, from (`ts`, the last
    line), to (`next_ts`, the next one, or null when progress never came back), the pending counts,
    the line (`LINE`) and the next (`next_row`). Found host by host (`host_progress`)."""
    gaps = timeline.progress_gaps
    this = timeline.with_messages(gaps.select(*LINE))
    after = timeline.with_messages(gaps.select(pl.col(f"next_{c}").alias(c) for c in LINE))
    next_row = pl.when(gaps.get_column("next_ts").is_not_null()).then(pl.struct(*LINE, "ts"))
    return gaps.drop(*LINE, *(f"next_{c}" for c in LINE)).with_columns(
        *this.get_columns(), after.with_columns(gaps.get_column("next_ts").alias("ts"))
        .select(next_row.alias("next_row")).to_series())


def _metrics_check(timeline: Timeline, component: str, host: str | None, frozen_at: datetime,
                   until: datetime | None) -> tuple[str, list]:
    """Whether the component's metrics (its ports on that host) show a stall over the freeze."""
    ports = timeline.incident.components.get(component)
    if ports is None or not ports.ports:
        return "", []
    samples = timeline.samples.filter(pl.col("port").is_in(list(ports.ports))
                                      & (pl.col("host").cast(pl.String) == host if host else pl.lit(True)))
    if samples.select(pl.len()).collect().item() == 0:
        return " No metrics of this component in the bundle.", []
    windows = stalled(samples, timeline.profile)
    overlapping = windows.filter((pl.col("end") >= frozen_at) & (pl.col("start") <= (until or pl.col("end"))))
    if overlapping.height == 0:
        return (" The metrics disagree: no stalled window of its progress counters over the freeze "
                "(check the scrape interval and the profile's metric names)."), []
    w = overlapping.row(0, named=True)
    text = (f" The metrics agree: {w['evidence'].split(' did not move')[0]} did not move between scrapes at "
            f"{clock(w['start'])} and {clock(w['end'])} while up to {w['pending_peak']:g} requests were pending.")
    return text, [Evidence("samples", None, None, None, w["end"], excerpt(w["evidence"]))]


def detect(timeline: Timeline) -> list[Finding]:
    """Freeze findings per component, each with the metrics' view and the silent-hang window."""
    findings = []
    track = timeline.profile.logs.main_track
    restarts = timeline.events.filter(pl.col("message_id") == "de5b426a63be47a7b6ac3eaac82e2f6f")  # stopping
    several_hosts = len(timeline.hosts) > 1
    stops = (timeline.events.lazy().filter(pl.col("event") == "operator_stop").select("ts", "component", "host")
             .collect() if "event" in timeline.events.columns else pl.DataFrame())
    for gap in freezes(timeline).iter_rows(named=True):
        component, host, at = gap["component"], gap["host"], gap["ts"]
        until = gap["next_ts"]
        pending = f"{gap['running_req'] or 0:g} running, {gap['queue_req'] or 0:g} queued"
        unnamed = f"the scheduler {gap['tag']}" if gap["tag"] else "a scheduler"
        who = component or f"{unnamed} (its log names no component)"
        where = f"{who} on {host}" if several_hosts else who
        if gap.get("long_step"):
            findings.append(_long_step(timeline, gap, where))
            continue
        stopped = _stopped_after(stops, component, host, at) if until is None and not gap["queue_req"] else None
        if stopped is not None:
            # Nothing queued, and the quiet ran until someone stopped it: a last request finishing
            # between two batch lines (SGLang logs one every few dozen steps) looks the same.
            findings.append(Finding("quiet_until_stop", track, component, at,
                                    f"{where} logged no batch line from {clock(at)} until it was stopped at "
                                    f"{clock(stopped)} ({span((stopped - at).total_seconds())}); its last batch line "
                                    f"had {pending}: a last request finishing between two batch lines looks the "
                                    "same, so no freeze is shown.", stopped, [], host))
            continue
        text = (f"{where} froze at {clock(at)}: last {gap['progress']} batch line ({pending}); "
                + (f"no progress for {span((until - at).total_seconds())} until {clock(until)}."
                   if until else "no progress until the end of the data."))
        agree, metric_evidence = _metrics_check(timeline, component, host, at, until)
        rows = timeline.events.filter((pl.col("ts") == at) & pl.col("component").eq_missing(component)
                                      & pl.col("host").eq_missing(host) & pl.col("progress").is_not_null())
        evidence = event_evidence(timeline.with_messages(rows.head(1)), 1) + metric_evidence
        if gap["next_row"]:
            evidence += [Evidence("events", gap["next_row"]["source_file"], gap["next_row"]["source_line"],
                                  gap["next_row"]["source_offset"], until, excerpt(gap["next_row"]["message"]))]
        findings.append(Finding("frozen", track, component, at, text + agree, until, evidence, host))
        findings += _silent_hang(timeline, component, host, where, at, until, restarts)
    return findings


def _long_step(timeline: Timeline, gap: dict, where: str) -> Finding:
    """A quiet spell that was one step: the tokens the line before it began, the time they took,
    and what the next line shows of them."""
    at, until, tokens, seconds = gap["ts"], gap["next_ts"], gap["step_tokens"], gap["gap_s"]
    shown = (f"the cache holding {gap['next_held']:,.0f} tokens" if gap["next_held"] is not None
             and gap["next_held"] >= tokens else f"an input throughput of {gap['next_rate']:,.2f} token/s since it")
    text = (f"{where} ran one long step, not a freeze: its {gap['progress']} batch line at {clock(at)} began "
            f"{tokens:,.0f} tokens, and its next line, {span(seconds)} later at {clock(until)}, shows them done "
            f"({shown}): {tokens / seconds:,.0f} token/s.")
    evidence = [Evidence("events", row["source_file"], row["source_line"], row["source_offset"], when,
                         excerpt(row["message"])) for row, when in ((gap, at), (gap["next_row"], until))]
    return Finding("long_step", timeline.profile.logs.main_track, gap["component"], at, text, until, evidence,
                   gap["host"], {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
                                 "held_after": gap["next_held"], "rate_after": gap["next_rate"]})


def _stopped_after(stops: pl.DataFrame, component: str | None, host: str | None, at: datetime) -> datetime | None:
    """When the component (else anything on its host) was stopped from outside after `at`."""
    if stops.is_empty():
        return None
    later = stops.filter((pl.col("ts") > at) & pl.col("host").eq_missing(host))
    own = later.filter(pl.col("component").eq_missing(component))
    return earliest((own if own.height else later).get_column("ts"))


def _silent_hang(timeline: Timeline, component: str, host: str | None, where: str, at: datetime,
                 until: datetime | None, stops: pl.DataFrame) -> list[Finding]:
    """Health 200 and an active unit while frozen: the blind spot, until the unit is stopped."""
    unit_stops = stops.filter(pl.col("component").eq_missing(component) & pl.col("host").eq_missing(host)
                              & (pl.col("ts") > at))
    data_end = timeline.last_ts
    blind_end = earliest(unit_stops.get_column("ts")) or until or data_end
    if blind_end is None:
        return []
    # up to the stop or the next progress, not at it; to the end of the data, its last line included
    before_end = (pl.col("ts") <= blind_end) if blind_end == data_end else (pl.col("ts") < blind_end)
    health = timeline.events.filter(pl.col("component").eq_missing(component) & pl.col("host").eq_missing(host)
                                    & pl.col("health_ok") & (pl.col("ts") > at) & before_end)
    if health.height == 0:
        return []
    # only journald says a unit stayed active; a plain log says nothing of the process's state
    unit = "and the unit stayed active " if health.get_column("data_type").ne("log:line").any() else ""
    text = (f"{where} looked healthy while frozen: health checks answered 200 {health.height} times {unit}"
            f"from {clock(at)} to {clock(blind_end)} ({span((blind_end - at).total_seconds())}), "
            "the blind spot of health-based monitoring.")
    return [Finding("silent_hang", timeline.profile.logs.main_track, component, at, text, blind_end,
                    event_evidence(health, 3), host)]


@detector("progress")
def run(ctx: Context) -> list[Finding]:
    """Freezes and last progress per component."""
    return detect(ctx.timeline)
