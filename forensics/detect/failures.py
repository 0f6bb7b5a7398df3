"""Failure modes beyond the silent hang, from the layer profiles' line kinds (`profiles/layers/`).

Each line kind of PyTorch distributed, the kernel and driver, and systemd becomes one finding per
component and host, in words that say what the lines show: a collective timeout with the
collective in flight per rank and process group, an Xid with what its code means, the OOM
killer's victim, a crash loop's restart counter and interval, an operator's stop (no fault).
The families real fleets meet say their facts (`Finding.facts`, read by `forensics.detect.families`
with the layers' tables):
each Xid's meaning and NVIDIA's action, each NVSwitch SXid's class and recovery, torchrun's
ChildFailedError table (ranks, pids, exit codes, signals; every rank failing alike is one failure of
the job), the signal that ended a process (a SIGKILL told beside the OOM killer's report of its host,
or that there is none), a hung task's pid and the subsystem of its call trace, NCCL's error kind and
what it points at, and for a CUDA out-of-memory the server, start-up or serving, and the numbers.
A non-fatal device error (`fault = ""`, its own track) is reported, never taken for a cause, and
says so in its facts (`non_fatal`): a bundle holding only such errors holds no incident.
Beside them:

- `error_records`: log records at error priority or worse that no other finding explains, so that
  an error line is never "no incident";
- how a process's start-up ended, per unit whose log starts up (the profile's `[logs] starting`)
  and never becomes ready or does work: a start-up failure (its first error), a start-up stall
  (stopped from outside while still starting, or ranks that began distributed init and never
  ended it), or a silent death (the log ends during start-up with no error and no shutdown line);
- `consequences_of_stop`: what an operator's stop brings with it (tracebacks, failed exits, error
  lines at or after the stop) is said as that, not as a fault; so is what a process says as it
  exits after its own orderly end (the profile's `run_finished` kind: vLLM's "Shutdown complete"
  after an offline run), and a run that ended so is neither a start-up failure nor a death.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from forensics.detect import Finding, between, clock, earliest, event_evidence, excerpt, kind_sentence, latest_time, one_unit, span
from forensics.detect import watchdog
from forensics.detect.errors import raised_line
from forensics.detect.families import (
    SIGNAL_KINDS, children_said, cuda_oom_facts, elastic_children, elastic_facts, elastic_in, elastic_said, hung_said,
    hung_tasks, killed_and_oom, layer_table, nccl_facts, nccl_said, oom_said, signal_facts, signal_said, sxid_words,
    xid_words,
)
from forensics.detect.kubernetes import k8s_facts, k8s_said
from forensics.detect.registry import Context, detector
from forensics.profiles import NOTHING, LogEvent, available, layers, load_profile, matches_nothing
from forensics.sources.kubernetes.kubectl import K8S_COLUMNS
from forensics.timeline.align import Timeline

ERROR = 3  # syslog priority: error and worse
# An exception raised or a traceback begun (an error in a start-up whatever its level says): a
# traceback's header, or "SomethingError: …". Searched as separate patterns, each with a fixed text
# the regex engine looks for first: in one alternation, the exception branch (whose start is any
# word) left it reading every line whole, 3× slower.
RAISED = (r"Traceback \(most recent call last\)", r"\b[A-Za-z]*Error: ", r"\b[A-Za-z]*Exception: ")
STOP_SLACK = timedelta(seconds=1)  # lines stamped this much before a stop's own line still follow it
# A collective timeout line's numbers, as ProcessGroupNCCL / ProcessGroupGloo write them.
UNIT_IN_MESSAGE = re.compile(r"(?:^|: )([\w@.\\-]+\.(?:service|scope|socket|timer|mount|slice)): ")
OOM = re.compile(r"Killed process (?P<pid>[0-9]+) \((?P<name>[^)]*)\)")
RESTARTS = re.compile(r"restart counter is at (?P<n>[0-9]+)")
# What a stop from outside brings about, said as its consequence when at or after it: these kinds,
# and every layer kind that is evidence of a process ending (its `fault`), e.g. the shell's Killed
# when the stop's grace ran out.
STOP_CONSEQUENCES = ("error_records", "traceback", "process_group_abort", "http_5xx", "new_template", "engine_dead",
                     "worker_died", "child_failed")
PROCESS_ENDED = "process ended"
# A line kind a profile gives the engine's own orderly end (vLLM's "Shutdown complete"): a run that
# ended is no death, and what its process says as it exits is the exit's consequence, not a fault.
RUN_FINISHED = "run_finished"


def _stop_consequences() -> set[str]:
    """The kinds an operator's stop explains when at or after it."""
    return set(STOP_CONSEQUENCES) | {e.kind for layer in layers() for e in layer.events if e.fault == PROCESS_ENDED}


def raised(message: pl.Expr) -> pl.Expr:
    """Whether `message` is a raised exception's line (`RAISED`)."""
    return pl.any_horizontal(message.str.contains(pattern) for pattern in RAISED)


def _layer_events(timeline: Timeline) -> dict[str, LogEvent]:
    return {e.kind: e for e in timeline.profile.logs.events if e.layer is not None}


def _rows(timeline: Timeline, kinds: list[str]) -> pl.DataFrame:
    columns = [c for c in ("ts", "host", "unit", "component", "pid", "priority", "event", "track", "source_file",
                           "source_line", "source_offset", "message", "LOG_RANK", *K8S_COLUMNS)
               if c in timeline.events.columns]
    return timeline.events.lazy().filter(pl.col("event").is_in(kinds)).select(columns).sort("ts").collect()


def _where(component: str | None, host: str | None, several_hosts: bool) -> str:
    if component is None:
        return host or "the host"
    return f"{component} on {host}" if several_hosts and host else component


def detect(timeline: Timeline) -> list[Finding]:
    """A finding per layer line kind, component and host; error records no finding explains; and
    how start-ups ended."""
    layer = _layer_events(timeline)
    rows = _rows(timeline, list(layer))
    several_hosts = len(timeline.hosts) > 1
    tables = elastic_in(timeline)
    told: set[int] = set()
    out: list[Finding] = []
    for (kind, track, component, host), group in rows.group_by("event", "track", "component", "host",
                                                                maintain_order=True):
        event = layer[str(kind)]
        where = _where(component or one_unit(group), host, several_hosts)
        first, last = earliest(group.get_column("ts")), latest_time(group.get_column("ts"))
        text, facts = _kind_words(timeline, str(kind), event, group, where)
        if kind == "distributed_launch_failure":
            files = set(group.get_column("source_file").cast(pl.String).to_list()) \
                if "source_file" in group.columns else set()
            mine = [n for n, t in enumerate(tables) if n not in told and t["row"].get("host") == host
                    and t["row"].get("source_file") in files]
            told.update(mine)
            facts.update(elastic_facts([tables[n]["table"] for n in mine]))
            if facts:
                text += elastic_said(facts)
            else:  # no table in the evidence: what elastic's agent said of each child
                facts = elastic_children(group)
                text += children_said(facts)
        if kind in SIGNAL_KINDS:
            facts["signals"] = list(dict.fromkeys([*facts.get("signals", []),
                                                   *signal_facts(group).get("signals", [])]))
            text += signal_said(facts)
        if event.fault == "" and track != timeline.profile.logs.main_track:
            # a device error the device survived (a corrected PCIe error, an Xid NVIDIA says to
            # ignore), on its own track: a finding, never an incident by itself
            facts["non_fatal"] = True
        out.append(Finding(str(kind), str(track), component, first, text, last, event_evidence(group), host,
                           facts))
    out += _untold_tables(timeline, [t for n, t in enumerate(tables) if n not in told], several_hosts)
    killed_and_oom(out)
    out += _error_records(timeline, several_hosts)
    out += _startups(timeline, several_hosts)
    out += _died_serving(timeline, several_hosts)
    return out


def _kind_words(timeline: Timeline, kind: str, event: LogEvent, group: pl.DataFrame,
                where: str) -> tuple[str, dict[str, Any]]:
    """A layer kind's sentence and facts: its own words where the kind has some (an Xid's meaning and
    NVIDIA's action, the OOM killer's victim, a collective in flight, …), else the generic sentence,
    followed by what its family's lines add (a hung task's subsystem, NCCL's error kind, the server
    out of memory)."""
    text: str | None = None
    facts: dict[str, Any] = {}
    if kind in ("gpu_xid_error", "gpu_xid_nonfatal"):
        text, facts = xid_words(group, where, nonfatal=kind == "gpu_xid_nonfatal")
    elif kind in ("nvswitch_error", "nvswitch_nonfatal_error"):
        text, facts = sxid_words(group, where, nonfatal=kind == "nvswitch_nonfatal_error")
    elif kind == "oom_kill":
        text, facts = _oom(group, where)
    elif kind == "crash_loop":
        text = f"{_crash_loop(group, where)}{_first_errors(timeline, group)}"
    elif kind == "operator_stop":
        text = _operator_stop(group, where)
    elif kind == "collective_timeout":
        text, facts = watchdog.collective_timeout(group, where, watchdog.status_lines(timeline, group))
    elif kind.startswith("k8s_") and "K8S_REASON" in group.columns:
        facts = k8s_facts(group)
        text = f"{kind_sentence(group, event.text, where, event.pattern)}{k8s_said(facts)}"
    text = text or kind_sentence(group, event.text, where, event.pattern)
    if kind == "hung_task":
        facts = hung_tasks(timeline, group)
        text += hung_said(facts)
    elif kind == "distributed_transport_failure":
        facts = nccl_facts(timeline, group)
        text += nccl_said(facts)
    elif kind == "cuda_oom":
        facts = cuda_oom_facts(timeline, group)
        text += oom_said(facts)
    elif kind == "fabric_manager_down":
        reasons = [words for pattern, words in layer_table("fabric_manager_reason").items()
                   if group.get_column("message").drop_nulls().str.contains(pattern).any()]
        facts = {"reasons": reasons} if reasons else {}
        text += "".join(f" Why: {reason}." for reason in reasons)
    return text, facts


def _untold_tables(timeline: Timeline, tables: list[dict[str, Any]], several_hosts: bool) -> list[Finding]:
    """torchrun's tables no line of the launch-failure kind led to (a table a log reader folded into a
    collective timeout's record): a finding each, per host and file."""
    out = []
    by_file: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for t in tables:
        by_file.setdefault((t["row"].get("host"), t["row"].get("source_file")), []).append(t)
    for (host, _), found in by_file.items():
        row = found[0]["row"]
        facts = elastic_facts([t["table"] for t in found])
        facts["signals"] = list(dict.fromkeys(facts.get("signals", [])))
        where = _where(row.get("component") or row.get("unit"), host, several_hosts)
        text = (f"torchrun reported failed workers on {where}, {between(row.get('ts'), row.get('ts'))} (its table "
                f"follows another record):{elastic_said(facts)}{signal_said(facts)}")
        out.append(Finding("distributed_launch_failure", timeline.profile.logs.main_track, row.get("component"),
                           row.get("ts"), text, None, event_evidence(pl.DataFrame([row])), host, facts))
    return out


def _numbers(messages: list[str], pattern: re.Pattern[str]) -> list[dict[str, str]]:
    return [m.groupdict() for text in messages if (m := pattern.search(text or ""))]


def _oom(group: pl.DataFrame, where: str) -> tuple[str, dict[str, Any]]:
    victims = _numbers(group.get_column("message").to_list(), OOM)
    named = ", ".join(sorted({f"{v['name']} (pid {v['pid']})" for v in victims})) or "a process"
    texts = " ".join(group.get_column("message").drop_nulls().to_list())
    # the kernel says which limit was hit: a memory cgroup's (a container's, a unit's MemoryMax) or the host's
    cgroup = "Memory cgroup out of memory" in texts or "CONSTRAINT_MEMCG" in texts
    limit = ("its memory cgroup's limit was reached (a container's or a unit's memory limit), not the host's memory"
             if cgroup else "host memory ran out")
    facts = {"victims": [{"pid": int(v["pid"]), "name": v["name"]} for v in
                         {(v["pid"], v["name"]): v for v in victims}.values()], "limit": "cgroup" if cgroup else "host"}
    text = (f"the kernel's OOM killer killed {named} on {where} at {clock(earliest(group.get_column('ts')))}: "
            f"{limit}; a process killed so ends without an error of its own.")
    return text, facts


def _named_units(group: pl.DataFrame) -> list[str]:
    """The units systemd's own lines name ("openclaw-vllm.service: Scheduled restart job, …"): in a
    pasted `journalctl` the record's unit is only the writer's name (systemd), not the unit."""
    return sorted({m[1] for text in group.get_column("message").drop_nulls().to_list()
                   if (m := UNIT_IN_MESSAGE.search(text))})


def _crash_loop(group: pl.DataFrame, where: str) -> str:
    counts = [int(n["n"]) for n in _numbers(group.get_column("message").to_list(), RESTARTS)]
    times = group.get_column("ts").drop_nulls()
    gaps = times.diff().drop_nulls().dt.total_seconds() if times.len() > 1 else pl.Series([], dtype=pl.Int64)
    units = ", ".join(_named_units(group) or sorted(set(group.get_column("unit").drop_nulls().to_list()))) or where
    text = (f"crash loop: {units} restarted again and again — systemd's restart counter at {max(counts)}"
            if counts else f"crash loop: {units} could not stay up ({group.height} lines)")
    text += f" at {clock(latest_time(times))}"
    if gaps.len():
        text += f", one restart every {span(float(gaps.median()))} over the {times.len()} restarts in the evidence"
    return text + "."


FIRST_ERRORS_SHOWN = 3


def _first_errors(timeline: Timeline, group: pl.DataFrame) -> str:
    """The first error each start of the looping unit logged before its restart (an error-priority
    record, or a raised exception's line), the same ones counted together: why it kept dying."""
    units = group.get_column("unit").drop_nulls().unique().to_list()
    restarts = group.get_column("ts").drop_nulls().sort()
    if not units or restarts.is_empty():
        return ""
    same = pl.col("unit").cast(pl.String).is_in(units)
    named = _named_units(group)
    if named and not set(named) & set(units) and "source_file" in group.columns:
        # a pasted journal: the looping unit's own lines carry its process's name, not the unit's, so
        # every line of the same paste but systemd's is the starts' own output
        same = pl.col("source_file").cast(pl.String).is_in(group.get_column("source_file").cast(pl.String).unique()
                                                           .to_list()) & ~same
    lines = (timeline.events.filter(same & (pl.col("ts") <= restarts.max())
                                    & pl.col("event").ne_missing("crash_loop")
                                    & ((pl.col("priority") <= ERROR) | raised(pl.col("message"))))
             .sort("ts").select("ts", "message"))
    # a start runs from one restart line to the next (the first from the start of the evidence)
    starts = lines.with_columns(restarts.search_sorted(lines.get_column("ts"), side="left").alias("start"))
    firsts = starts.group_by("start", maintain_order=True).agg(pl.col("message").first())
    if firsts.is_empty():
        return (" No start logged an error line before it died: the evidence holds systemd's restarts only "
                "(the unit's own output, or the kernel's log, would say why).")
    tallies = (firsts.with_columns(pl.col("message").str.split("\n").list.last().str.strip_chars().alias("line"))
               .group_by("line", maintain_order=True).agg(pl.len().alias("starts")).sort("starts", descending=True))
    shown = "; ".join(f"“{excerpt(line, 140)}” ({n} of {firsts.height} start{'s' if firsts.height > 1 else ''})"
                      for line, n in tallies.head(FIRST_ERRORS_SHOWN).iter_rows())
    more = f"; and {tallies.height - FIRST_ERRORS_SHOWN} other errors" if tallies.height > FIRST_ERRORS_SHOWN else ""
    return f" First error of each start: {shown}{more}."


def stop_time_logged(message: str | None) -> bool:
    """Whether a stop line has a time of its own: not when it is the end of a traceback folded
    under an earlier record (vLLM's `KeyboardInterrupt: terminated`), whose time is that record's."""
    first = (message or "").splitlines()[:1]
    return bool(first) and bool(re.search(r"SIGTERM|signal 15", first[0])) and "Traceback" not in (message or "")


def _operator_stop(group: pl.DataFrame, where: str) -> str:
    row = group.row(0, named=True)
    when = (f"at {clock(row['ts'])}" if stop_time_logged(row["message"])
            else f"after {clock(row['ts'])} (the stop's own time is not logged)")
    return (f"{where} was stopped from outside {when} (SIGTERM: an operator's or orchestrator's stop, not a fault); "
            "what follows it in the logs is the shutdown.")


def _error_records(timeline: Timeline, several_hosts: bool) -> list[Finding]:
    """Records at error priority or worse that no line kind explains, per component and host."""
    columns = [c for c in ("ts", "host", "component", "priority", "event", "source_file", "source_line",
                           "source_offset", "message") if c in timeline.events.columns]
    errors = (timeline.events.lazy().filter((pl.col("priority") <= ERROR) & pl.col("event").is_null()
                                            & pl.col("progress").is_null())
              .select(columns).sort("ts").collect())
    out = []
    for (component, host), rows in errors.group_by("component", "host", maintain_order=True):
        first = rows.row(0, named=True)
        line = ((first["message"] or "").splitlines() or [""])[0]
        out.append(Finding("error_records", timeline.profile.logs.main_track, component, first["ts"],
                           f"{rows.height} log record{'s' if rows.height > 1 else ''} at error priority or worse on "
                           f"{_where(component, host, several_hosts)}, the first at {clock(first['ts'])}"
                           + (f": “{excerpt(line, 160)}”" if line else "") + ".",
                           latest_time(rows.get_column("ts")), event_evidence(rows), host))
    return out


def _every_stack(attribute: str) -> str:
    """One pattern for what any shipped stack writes as `attribute` (`starting`, `ready`): a bundle's
    logs may come from a stack other than the profile chosen for it."""
    patterns = {getattr(load_profile(name).logs, attribute) for name in available()}
    return "|".join(f"(?:{p})" for p in sorted(patterns) if not matches_nothing(p)) or NOTHING


def _startups(timeline: Timeline, several_hosts: bool) -> list[Finding]:
    """How start-ups ended, per host and unit whose log starts up and never becomes ready."""
    rules = timeline.profile.logs
    events = timeline.events
    starting_pattern, ready_pattern = _every_stack("starting"), _every_stack("ready")
    faults = [e.kind for e in rules.events if e.fault]
    if events.is_empty():
        return []
    columns = [c for c in ("ts", "host", "unit", "component", "priority", "event", "progress", "ready",
                           "health_ok", "source_file", "source_line", "source_offset", "message")
               if c in events.columns]
    lines = events.lazy().select(columns)
    serving = (lines.group_by("host", "unit").agg(
        (pl.col("progress").is_not_null() | pl.col("ready") | pl.col("health_ok")
         | pl.col("message").fill_null("").str.contains(ready_pattern)).any().alias("served")))
    # only the units that never served and logged a start-up line: a sidecar's chatter is not read
    begun = lines.filter(pl.col("message").fill_null("").str.contains(starting_pattern)).select("host", "unit").unique()
    candidates = serving.filter(~pl.col("served")).select("host", "unit").join(begun, on=["host", "unit"],
                                                                               nulls_equal=True)
    starting = lines.join(candidates, on=["host", "unit"], nulls_equal=True).sort("ts").collect()
    out = []
    main = rules.main_track
    for (host, unit), rows in starting.group_by("host", "unit", maintain_order=True):
        finished = earliest(rows.filter(pl.col("event") == RUN_FINISHED).get_column("ts"))
        rows = rows.filter(pl.col("ts") <= finished) if finished else rows  # after its own end: its exit's
        message = pl.col("message").fill_null("")
        started = rows.filter(message.str.contains(starting_pattern))
        if started.is_empty():
            continue
        component = rows.get_column("component").drop_nulls().head(1).to_list()
        component = component[0] if component else None
        where = _where(component or unit, host, several_hosts)
        began = earliest(started.get_column("ts"))
        stop = rows.filter(pl.col("event") == "operator_stop")
        logged = not stop.is_empty() and stop_time_logged(stop.get_column("message")[0])
        before_stop = (rows if stop.is_empty() else
                       rows.filter(pl.col("ts") < stop.get_column("ts").min() if logged
                                   else pl.col("ts") <= stop.get_column("ts").min()))
        errors = before_stop.filter(((pl.col("priority") <= ERROR) | pl.col("event").is_in(faults)
                                     | raised(message)) & (pl.col("event") != "operator_stop").fill_null(True))
        begun = rows.filter(message.str.contains(r"Init torch distributed begin")).height
        ended = rows.filter(message.str.contains(r"Init torch distributed ends")).height
        last = rows.filter(message != "").tail(1)
        last_line = ((last.get_column("message").to_list() or [""])[0].splitlines() or [""])[0]
        last_at = latest_time(rows.get_column("ts"))
        if begun > ended:
            init = rows.filter(message.str.contains(r"Init torch distributed begin"))
            out.append(Finding("startup_stall", main, component, earliest(init.get_column("ts")),
                               f"{where} stalled in distributed init: {begun} rank{'s' if begun > 1 else ''} logged "
                               f"“Init torch distributed begin” ({clock(earliest(init.get_column('ts')))}–"
                               f"{clock(latest_time(init.get_column('ts')))}) and {ended} “Init torch distributed "
                               "ends”: the rendezvous (NCCL/HCCL/Gloo) never completed; look at the peers that "
                               "should have joined.", last_at, event_evidence(init), host))
        if not errors.is_empty():
            first = errors.row(0, named=True)
            line, later = raised_line(first["message"] or "")
            when = f"{clock(first['ts'])} or later (its lines carry no time of their own)" if later else clock(first["ts"])
            out.append(Finding("startup_failure", main, component, first["ts"],
                               f"{where} failed during start-up (begun {clock(began)}, never ready): the first error "
                               f"at {when}: “{excerpt(line, 160)}”.", None, event_evidence(errors, 3), host))
        elif not stop.is_empty():
            at = stop.get_column("ts").min()
            last_start = before_stop.filter(message != "").tail(1)
            said = ((last_start.get_column("message").to_list() or [""])[0].splitlines() or [""])[0]
            out.append(Finding("startup_stall", main, component, latest_time(before_stop.get_column("ts")) or began,
                               f"{where} never became ready: start-up began at {clock(began)}, its last start-up line "
                               f"at {clock(latest_time(before_stop.get_column('ts')))}"
                               + (f" (“{excerpt(said, 120)}”)" if said else "")
                               + ", then it was stopped from outside "
                               + (f"at {clock(at)}" if logged else "(SIGTERM; when is not logged)")
                               + ": the start-up hung there (or took longer than whoever stopped it would wait).", at,
                               event_evidence(pl.concat([last_start, stop.head(1)], how="diagonal_relaxed")), host))
        elif begun <= ended and finished is None:
            out.append(Finding("silent_death", main, component, last_at,
                               f"the log of {where} ends at {clock(last_at)} during start-up"
                               + (f" (“{excerpt(last_line, 120)}”)" if last_line else "")
                               + ", with no error and no shutdown line: the process was most likely killed from "
                               "outside — look for the OOM killer or an Xid in the kernel log of that minute.",
                               None, event_evidence(last), host))
    return out


SILENT_AFTER_S = 120.0  # evidence that goes on this long after a serving log's last line makes its end a death
END_SAYS_WHY_S = 10.0  # an error, a stop or systemd's lines this close to a log's end explain it


def _died_serving(timeline: Timeline, several_hosts: bool) -> list[Finding]:
    """A unit that served (batch lines, health answers, ready) whose log then ends with no error and
    no shutdown, while another source of its host that was logging alongside goes on for
    SILENT_AFTER_S, and nothing after shows it alive (its metrics still scraped, its stacks
    dumped): it most likely died from outside."""
    events, end = timeline.events, timeline.last_ts
    if events.is_empty() or end is None:
        return []
    text = [pl.col("host").cast(pl.String), pl.col("unit").cast(pl.String)]  # the lean and full timelines alike
    served = (events.lazy().filter(pl.col("progress").is_not_null() | pl.col("ready") | pl.col("health_ok"))
              .select(text).unique().collect())  # lazily: the filter copies two columns, not every one
    ends = (timeline.activity.with_columns(text).join(served, on=["host", "unit"], nulls_equal=True)
            .group_by("host", "unit").agg(pl.col("last").max(), pl.col("component").drop_nulls().first()))
    out = []
    # what else was logging: per host and source, from its first line to its last
    spans = (timeline.activity.with_columns(text)
             .group_by("host", "unit", "identifier").agg(pl.col("first").min(), pl.col("last").max()))
    for host, unit, last_at, component in ends.iter_rows():
        if last_at is None or (end - last_at).total_seconds() < SILENT_AFTER_S:
            continue
        # another source of the same host (any, when this log names none) that was logging before
        # this log's end and went on SILENT_AFTER_S past it: the capture did not simply stop there
        went_on = spans.filter(~(pl.col("unit").eq_missing(unit) & pl.col("host").eq_missing(host))
                               & (pl.col("host").eq_missing(host) if host is not None else pl.lit(True))
                               & (pl.col("first") <= last_at)
                               & (pl.col("last") >= last_at + timedelta(seconds=SILENT_AFTER_S)))
        if went_on.is_empty():
            continue
        mine = events.filter(pl.col("host").eq_missing(host) & pl.col("unit").eq_missing(unit))
        tail = mine.filter(pl.col("ts") >= last_at - timedelta(seconds=END_SAYS_WHY_S))
        said_why = tail.filter((pl.col("priority") <= ERROR) | pl.col("event").is_not_null()
                               | pl.col("message_id").is_not_null() | raised(pl.col("message")))
        if not said_why.is_empty() or _alive_after(timeline, host, component, last_at):
            continue
        last = mine.filter(pl.col("ts") == mine.get_column("ts").max()).tail(1)
        line = ((last.get_column("message").to_list() or [""])[0] or "").splitlines()[:1]
        where = _where(component or unit, host, several_hosts)
        out.append(Finding("silent_death", timeline.profile.logs.main_track, component, last_at,
                           f"the log of {where} ends at {clock(last_at)} while it was serving"
                           + (f" (“{excerpt(line[0], 120)}”)" if line else "")
                           + f", with no error and no shutdown line, and nothing after shows it alive though the "
                           f"evidence goes on until {clock(end)}: the process most likely died from outside — look "
                           "for the OOM killer or an Xid in the kernel log of that minute.", None,
                           event_evidence(last), host))
    return out


def _alive_after(timeline: Timeline, host: str | None, component: str | None, at: datetime) -> bool:
    """Whether a scrape of the component's metrics or a py-spy dump of it comes after `at`."""
    if component is None:
        return False
    later = at + timedelta(seconds=timeline.profile.logs.progress_rules.freeze_gap_s)
    stacks = timeline.stacks
    if not stacks.is_empty() and not stacks.filter((pl.col("group") == component) & (pl.col("ts") > at)).is_empty():
        return True
    ports = timeline.incident.components.get(component)
    if ports is None or not ports.ports:
        return False
    scraped = timeline.samples.filter(pl.col("port").is_in(list(ports.ports)) & (pl.col("ts") > later))
    return scraped.select(pl.len()).collect().item() > 0


# The failure modes a report leads with, most telling first: what a first screen says when no engine
# froze. Every layer kind that is evidence of a failure mode is here (tests/test_profiles.py).
HEADLINE = ("collective_verdict", "collective_timeout", "stuck_process", "watchdog_timeout", "hung_task",
            "gpu_fallen_off_bus", "pcie_uncorrected_error", "gpu_xid_error", "nvswitch_error", "fabric_manager_down",
            "cuda_system_not_ready", "npu_device_error", "cuda_error", "oom_kill", "k8s_oom_killed",
            "unit_oom_killed", "ray_oom_kill", "cuda_oom", "segfault", "fatal_signal", "disk_full", "crash_loop",
            "k8s_crash_loop", "startup_stall", "startup_failure", "rendezvous_failure", "silent_death",
            "process_killed", "shell_killed", "container_exited", "process_failed", "worker_died", "child_failed",
            "ray_actor_died", "process_group_abort", "distributed_transport_failure", "distributed_launch_failure",
            "k8s_device_admission", "k8s_node_not_ready", "k8s_error_exit", "k8s_failed_scheduling",
            "k8s_node_pressure", "k8s_evicted", "k8s_preempted", "k8s_image_pull", "k8s_sandbox_failed", "k8s_volume",
            "k8s_probe_failed", "gpu_device_plugin_failed")


def headline(findings: list[Finding]) -> list[Finding]:
    """The failure-mode findings in the order a first screen names them (most telling first, then
    by time)."""
    modes = [f for f in findings if f.kind in HEADLINE and not f.facts.get("consequence_of")]
    return sorted(modes, key=lambda f: (HEADLINE.index(f.kind), f.at is None, f.at))


#: What a process group's abort brings with it: once the watchdog has caught a collective timeout,
#: the peers' connections close as the ranks go down (Gloo's "Connection closed by peer", NCCL's
#: remote errors). Such lines at or after the timeout are its consequence, not a cause of their own.
TIMEOUT_CONSEQUENCES = ("distributed_transport_failure",)


def consequences_of_timeout(findings: list[Finding]) -> None:
    """Marks the findings a collective timeout explains (`facts["consequence_of"]`) and says so in
    their sentence: they stay in the evidence, out of the causes."""
    timeouts: dict[str | None, datetime] = {}
    for f in findings:
        if f.kind == "collective_timeout" and f.at is not None:
            timeouts[f.host] = min(f.at, timeouts.get(f.host, f.at))
    for f in findings:
        at = timeouts.get(f.host) or (min(timeouts.values()) if timeouts and (f.host is None or None in timeouts)
                                      else None)
        if f.kind in TIMEOUT_CONSEQUENCES and at is not None and f.at is not None and f.at >= at:
            f.facts["consequence_of"] = "collective_timeout"
            f.text = (f"after the collective timeout at {clock(at)} (its consequence as the ranks abort, not a cause "
                      f"of its own): {f.text}")


def consequences_of_stop(findings: list[Finding]) -> list[Finding]:
    """The findings an operator's stop, or a run's own orderly end, explains (tracebacks, failed
    exits, error lines at or after it on the same host) said as consequences of it, not as faults;
    the rest unchanged."""
    ends: dict[tuple[str, str | None], datetime] = {}
    for f in findings:
        if f.kind in ("operator_stop", RUN_FINISHED) and f.at is not None:
            key = (f.kind, f.host)
            ends[key] = min(f.at, ends.get(key, f.at))
    if not ends:
        return findings
    consequences = _stop_consequences()
    for f in findings:
        if f.kind not in consequences or f.at is None:
            continue
        for kind, said in (("operator_stop", "the stop"), (RUN_FINISHED, "the run's own orderly end")):
            mine = {host: at for (k, host), at in ends.items() if k == kind}
            end = mine.get(f.host) or (min(mine.values()) if mine and (f.host is None or None in mine) else None)
            if end is not None and f.at >= end - STOP_SLACK:
                f.text = f"after {said} at {clock(end)} (a consequence of it, not a fault): {f.text}"
                f.kind = "after_stop"
                break
    return findings


@detector("failures")
def run(ctx: Context) -> list[Finding]:
    """Every profile's and layer's failure modes."""
    return detect(ctx.timeline)


@detector("timeout_consequences")
def run_timeout_consequences(ctx: Context) -> list[Finding]:
    """Re-tells what a collective timeout brought with it as its consequence; adds none."""
    consequences_of_timeout(ctx.found)
    return []


@detector("stop_consequences")
def run_stop_consequences(ctx: Context) -> list[Finding]:
    """Re-tells the findings an operator's stop explains as its consequences; adds none."""
    consequences_of_stop(ctx.found)
    return []
