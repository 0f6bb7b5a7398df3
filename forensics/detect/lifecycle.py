"""Lifecycle: restarts, stops, failures, and how long until healthy again.

From systemd's own journal messages, read by `MESSAGE_ID` (sd-messages.h: unit starting,
started, stopping, stopped, failed, restart scheduled) with their `UNIT`, `JOB_RESULT`, and the
change of `_SYSTEMD_INVOCATION_ID`; from Kubernetes' pod events (the kubelet's `Killing` is a
container stopping, its `Started` a container started: the pod named by `K8S_NAME`, its component
by incident.toml's units or the profile's words, on whatever node it ran); the command that asked for it (sudo's `COMMAND=…systemctl
restart …`, or an annotation); counter resets and start-time changes in the metrics; and the
first health check answered 200 after the unit started again.
"""

from __future__ import annotations

import re
from datetime import datetime

import polars as pl

from forensics.timeline.align import Timeline
from forensics.detect import (
    Evidence,
    Finding,
    clock,
    earliest,
    event_evidence,
    excerpt,
    latest_time,
    span,
)
from forensics.timeline.metrics import restarts as metric_restarts
from forensics.detect.registry import Context, detector

STARTING, STARTED = "7d4958e842da4a758f6c1cdc7b36dcc5", "39f53479d3a045ac8e11786248231fbf"
STOPPING, STOPPED = "de5b426a63be47a7b6ac3eaac82e2f6f", "9d1aaa27d60140bd96365438aad20286"
FAILED, RESTART_SCHEDULED = "be02cf6855d2428ba40df7e9d022f03d", "5eb03494b6584870a536b337290809b3"
# the kubelet's event reasons for a container stopping and started (pkg/kubelet/events/event.go)
K8S_TRANSITIONS = {"Killing": STOPPING, "Started": STARTED}
SYSTEMCTL = re.compile(r"COMMAND=\S*systemctl\s+(restart|stop|start|kill|reload-or-restart|try-restart)\s+(.*)$")


def restart_commands(timeline: Timeline) -> pl.DataFrame:
    """Commands that restarted or stopped units (sudo's log of systemctl), with the units named."""
    # a plain substring first: the pattern then runs over the few lines that name systemctl
    rows = (timeline.events.filter(pl.col("message").str.contains("systemctl", literal=True))
            .filter(pl.col("message").str.contains(SYSTEMCTL.pattern)))
    return rows.with_columns(pl.col("message").str.extract(SYSTEMCTL.pattern, 1).alias("verb"),
                             pl.col("message").str.extract(SYSTEMCTL.pattern, 2).alias("targets"))


def mitigation_time(timeline: Timeline) -> tuple[datetime | None, str, list[Evidence]]:
    """When the fix was issued: the first restart command, else an annotation saying restart,
    else the first stopping message of an engine unit."""
    commands = restart_commands(timeline).sort("ts")
    if commands.height:
        row = commands.row(0, named=True)
        return row["ts"], f"`systemctl {row['verb']} {row['targets']}`", event_evidence(commands, 1)
    for note in timeline.incident.annotations:
        if re.search(r"\brestart", note.text, re.IGNORECASE):
            return note.at, f"annotation: {note.text}", [Evidence("annotations", None, None, None, note.at, note.text)]
    stops = timeline.events.filter(pl.col("message_id") == STOPPING).sort("ts")
    if stops.height:
        return stops.row(0, named=True)["ts"], "systemd stopping the unit", event_evidence(stops, 1)
    if "K8S_REASON" in timeline.events.columns:
        killed = timeline.events.filter(pl.col("K8S_REASON") == "Killing").sort("ts")
        if killed.height:
            return killed.row(0, named=True)["ts"], "the kubelet stopping the container", event_evidence(killed, 1)
    return None, "", []


def _transitions(timeline: Timeline) -> pl.DataFrame:
    """Units and containers starting, started, stopping, stopped, failed: systemd's messages, and a
    pod's Killing / Started events with the pod's component (its node unknown: host null)."""
    events = timeline.events
    systemd = events.filter(pl.col("message_id").is_in([STARTING, STARTED, STOPPING, STOPPED, FAILED,
                                                       RESTART_SCHEDULED]))
    if "K8S_REASON" not in events.columns:
        return systemd.sort("ts")
    pods = events.filter(pl.col("K8S_REASON").is_in(list(K8S_TRANSITIONS)) & pl.col("K8S_NAME").is_not_null()
                         & pl.col("ts").is_not_null())
    if pods.is_empty():
        return systemd.sort("ts")
    names = pods.get_column("K8S_NAME").cast(pl.String).unique().to_list()
    components = {name: timeline.incident.component_of_unit(name, timeline.profile) for name in names}
    pods = pods.with_columns(
        pl.col("K8S_REASON").cast(pl.String).replace_strict(K8S_TRANSITIONS, default=None).alias("message_id"),
        pl.col("K8S_NAME").cast(pl.String).replace_strict(components, default=None, return_dtype=pl.String)
        .alias("component"), pl.lit(None, pl.String).alias("host"))
    return pl.concat([systemd, pods.select(systemd.columns)], how="vertical_relaxed").sort("ts")


def detect(timeline: Timeline) -> list[Finding]:
    """One finding per restart of a component (stop → start → healthy), plus failures."""
    events = timeline.events
    track = timeline.profile.logs.main_track
    findings: list[Finding] = []
    systemd = _transitions(timeline)
    issued, how, issued_evidence = mitigation_time(timeline)
    several_hosts = len(timeline.hosts) > 1
    places = systemd.select("host", "component").filter(pl.col("component").is_not_null()).unique()
    for host, component in places.sort("host", "component", nulls_last=True).rows():
        mine = systemd.filter(pl.col("component").eq_missing(component) & pl.col("host").eq_missing(host))
        where = f"{component} on {host}" if several_hosts and host else component
        started = mine.filter(pl.col("message_id") == STARTED)
        stopping = mine.filter(pl.col("message_id") == STOPPING)
        for row in started.iter_rows(named=True):
            stop_rows = stopping.filter(pl.col("ts") <= row["ts"])
            if stop_rows.height == 0:
                continue  # a first start, not a restart
            stop_at = latest_time(stop_rows.get_column("ts"))
            # a pod's events name no node: its component's health answers on any host count
            on_host = pl.col("host").eq_missing(host) if host is not None else pl.lit(True)
            ready = events.filter(pl.col("component").eq_missing(component) & on_host & (pl.col("ts") > row["ts"])
                                  & (pl.col("health_ok") | pl.col("ready"))).sort("ts")
            healthy = ready.filter(pl.col("health_ok"))
            healthy_at = earliest(healthy.get_column("ts"))
            if stop_at is None:
                continue
            begin = issued if issued is not None and issued <= stop_at else stop_at
            text = (f"{where} restarted: stopping at {clock(stop_at)}, started at {clock(row['ts'])}"
                    + (f", healthy again at {clock(healthy_at)} ({span((healthy_at - begin).total_seconds())} after "
                       f"the restart was issued at {clock(begin)})" if healthy_at else ", not healthy again in the data")
                    + ".")
            evidence = (issued_evidence + event_evidence(stop_rows.tail(1), 1) + event_evidence(
                started.filter(pl.col("ts") == row["ts"]), 1) + event_evidence(healthy, 1))
            findings.append(Finding("restart", track, component, begin, text, healthy_at, evidence, host))
        for row in mine.filter(pl.col("message_id") == FAILED).iter_rows(named=True):
            findings.append(Finding("unit_failed", track, component, row["ts"], f"{where}: {row['message']}",
                                    None, event_evidence(mine.filter(pl.col("ts") == row["ts"]), 1), host))
    findings += _metric_restarts(timeline)
    if issued is not None:
        findings.append(Finding("mitigation", track, None, issued, f"restart issued at {clock(issued)}: {how}.",
                                None, issued_evidence))
    return findings


def _metric_restarts(timeline: Timeline) -> list[Finding]:
    """Restarts the metrics show (start-time gauge changed, counters reset), per instance."""
    out = []
    table = metric_restarts(timeline.samples, timeline.profile)
    for row in table.iter_rows(named=True):
        component = timeline.incident.component_of_instance(row["instance"], timeline.profile)
        out.append(Finding("metrics_restart", timeline.profile.logs.main_track, component, row["before"],
                           f"{row['instance']} restarted between scrapes at {clock(row['after'])} and "
                           f"{clock(row['before'])}: {row['evidence']}.", None,
                           [Evidence("samples", row["instance"], None, None, row["before"], excerpt(row["evidence"]))]))
    return out


@detector("lifecycle")
def run(ctx: Context) -> list[Finding]:
    """Restarts, stops and health answers."""
    return detect(ctx.timeline)
