"""Plain-text server logs: what `kubectl logs`, `docker logs`, `nohup … > server.log` and a paste
into a ticket give, for services that do not run under systemd (most SGLang and vLLM deployments).

A record is a line that carries a time of its own, with the lines after it that carry none
(tracebacks, `server_args=…` continuations) folded into its message. Times are found in the forms
servers write them, after any wrapper is taken off:

- wrappers: colour codes; `docker logs -t` / Docker Desktop times (`2025-02-04T21:29:17.1Z `,
  `2025-02-04 21:29:17 `) kept in `DOCKER_TIMESTAMP`; `kubectl logs --prefix` (`[pod/x/c] `);
  `docker compose logs` (`vllm-1  | `, when nearly every line has it; the name kept as the process);
  `grep -n`'s line numbers (`67:Feb 26 17:41:24 host …`, when nearly every line has one);
  Ray / SkyPilot / vLLM process prefixes (`(head, rank=0, pid=18260) `, `(APIServer pid=7) `),
  whose `pid=` becomes the pid; a `# ` a write-up put in front of a stamped line;
- stamps: the forms of `profiles/stamps/forms.toml`, each with real samples (read by `stamps`):
  SGLang's `[2025-02-17 05:27:24 TP0] …` (the message keeps it, so the profile reads the tag and
  the line's local time as it does in journald); vLLM's `INFO 07-27 05:32:14 [core.py:58]` and
  glog's `E710 18:00:32.421467 1234 ProcessGroupNCCL.cpp:632]` (PyTorch's C++ side, behind torch's
  own `[rank3]:` prefix, whose rank is kept as `LOG_RANK`), syslog's `Jun 18 21:34:47 host
  ident[pid]: …`, all without a year: the year is the one of the file's latest full date, else of
  its modification time, and the note says which; ISO times; `dmesg -T`'s `[Sat Dec  5 00:43:41
  2026] …` (plain `dmesg`'s seconds since boot are no wall-clock time, so such a file is read as a
  log without stamps, below); the fabric manager's `[Jul 23 2024 07:53:55] [ERROR] …`; Go's `log`
  package's `2021/08/27 23:03:50 …`. A new form is an entry there, not code;
- uvicorn's `INFO:     10.0.0.7:51234 - "GET /health …" 200` lines carry no time: each is a record
  timed by the record before it (`LOG_TIME_SOURCE` says so).

A log with no time stamp anywhere (a test harness's output, a paste of a traceback) is still read:
each line that does not start with a space is a record, with the indented lines after it (and a
traceback's exception line) folded in, and its time is unknown (`ts` null, `LOG_TIME_SOURCE`
"none in the file"): its errors are reported, placed at no time.

Progress bars (tqdm), blank lines, `...` elisions and a Docker time alone on its line are passed
over and counted in the input's notes, as are lines before the first time. Times are read as
written, without a zone; `forensics.timeline.clocks` places them in the host's zone (incident.toml) as it
does SGLang's stamps in journald. Host: a syslog line's own, else the folder under `logs/`
(`logs/gpu-node-00/decode.log`); unit: the file's name, so `incident.toml` components can list
`units = ["decode*.log"]` and the profile's words (`decode`) find the component.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from forensics.sources.common.compose import COMPOSE, COMPOSE_SHARE, LEVEL_WORDS
from forensics.sources.common.rawio import MAX_LINE_ENV, cut_long_lines, read_whole_lines
from forensics.sources.common.schema import EVENTS_SCHEMA, QUARANTINE_SCHEMA, as_events, empty, excerpt_text
from forensics.sources import ParseResult, register
from forensics.sources.logs import stamps

NAME = "server_log"
FORMAT = "server_log"
DATA_TYPE = "log:line"
_SUFFIXES = (".log", ".out", ".err")

ANSI = r"\x1b\[[0-9;?]*[A-Za-z]"  # a terminal colour or cursor code (kubectl_logs reads them too)
_DOCKER = r"^(?P<docker>[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?Z?)(?: |$)"
_KUBE = r"^\[(?:pod|deployment|statefulset|job)/[^\]]+\] "
# `kubectl logs --prefix`: `[pod/NAME/CONTAINER] `, kept as the record's pod and container
_KUBE_PARTS = r"^\[(?P<kube_kind>pod|deployment|statefulset|job)/(?P<kube_name>[^/\]]+)(?:/(?P<kube_container>[^\]]+))?\] "
_GREP_NUMBER = r"^[0-9]+[:-]"
_NUMBER_IS_TIME = r"^[0-9]{4}-[0-9]{2}-|^[0-9]{1,2}:[0-9]{2}(?::[0-9]{2})?\b"
_PROCESS = r"^\(([^()]*)\) "
_TORCH_RANK = r"^\[rank(?P<torch_rank>[0-9]+)\]:"
_MARKDOWN = r"^# (\[[0-9]{4}-)"
# The stamp forms tried on what is left after the wrappers are data: profiles/stamps/forms.toml (`stamps`).
_UVICORN = r"^(?P<uvicorn>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s"
# a level written in lower case right after an ISO stamp (Ascend memfabric: `2026-01-04 03:23:20.5 error 33677 …`)
_ISO_LEVEL = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.,]+Z? +(?P<iso_level>critical|fatal|error|warning|warn|info|debug)"
              r"\b")
_LOWER_LEVEL = r"^(critical|fatal|error|warning|warn|info|debug) "
LEVEL_WORD = r"\b(?P<level>CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG)\b"
_NOISE = r"^\s*$|^\s*(?:\.\.\.|…)\s*$|[0-9]+%\|[^|]*\|\s*[0-9]+/[0-9]+|\[[0-9:<?]+, *[^\]]*(?:it/s|s/it)\]"
PRIORITY = {"CRITICAL": 2, "FATAL": 2, "ERROR": 3, "WARNING": 4, "WARN": 4, "INFO": 6, "DEBUG": 7}
# A file is known as a server log by a line, within its first 4 KiB, that starts (after a Docker time,
# a process prefix, a write-up's `# ` or torch's `[rankN]:`) with a stamp of a form marked `sniff`.
_SNIFF = re.compile(
    rb"(?m)^(?:(?:\x1b\[[0-9;]*m)*[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+Z? )?(?:\([^()\n]*\) )?(?:# )?(?:\[rank[0-9]+\]:)?"
    + f"(?:{stamps.sniff_pattern()})".encode())


def sniff(head: bytes, path: Path) -> bool:
    """A server log: a line stamped the way SGLang or vLLM stamp theirs within the first 4 KiB,
    or any text file under a `logs/` folder or named `*.log` (its lines are then read as they come)."""
    if path.is_dir():
        return False
    if _SNIFF.search(head):
        return True
    in_logs = path.suffix in _SUFFIXES or any(p.name == "logs" for p in path.parents)
    return in_logs and b"\x00" not in head[:1024] and bool(head.strip())


def host_of(path: Path) -> str | None:
    """The folder right under `logs/` that holds the file, if any: `logs/<host>/decode.log`."""
    parts = path.parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i - 1] == "logs" and i < len(parts) - 1:
            return parts[i]
    return None


def _lines(text: str) -> pl.DataFrame:
    """Every line with its wrappers taken off and its stamp found."""
    frame = pl.Series("raw", [text]).str.split("\n").explode().to_frame()
    if text.endswith("\n"):
        frame = frame.head(frame.height - 1)
    frame = frame.with_row_index("line", offset=1).with_columns(pl.col("line").cast(pl.Int64))
    body = pl.col("raw").str.replace_all(ANSI, "").str.strip_chars_end("\r")
    frame = frame.with_columns(body.alias("body"))
    frame = frame.with_columns(pl.col("body").str.extract(_DOCKER, 1).alias("docker"))
    after_docker = pl.when(pl.col("docker").is_not_null()).then(
        pl.col("body").str.replace(_DOCKER, "")).otherwise(pl.col("body"))
    frame = frame.with_columns(after_docker.alias("body"))
    frame = frame.with_columns(pl.col("body").str.extract_groups(_KUBE_PARTS).alias("kube")).unnest("kube")
    frame = frame.with_columns(pl.col("body").str.replace(_KUBE, ""))
    named = pl.col("body").str.extract(COMPOSE, 1)
    compose = frame.select(pl.when(named.str.to_uppercase().is_in(LEVEL_WORDS)).then(None).otherwise(named)
                           .alias("compose")).to_series()  # "INFO | …" is a level, not a container
    written = frame.select((pl.col("body") != "").sum()).item()
    if written and compose.is_not_null().sum() >= COMPOSE_SHARE * written:
        frame = frame.with_columns(pl.col("body").str.replace(COMPOSE, ""))  # docker compose's prefix
    else:
        compose = compose.clear(frame.height)
    # `grep -n` (or `grep -n` with context) before each line: taken off when nearly every line has
    # it (COMPOSE_SHARE), so that the stamp after it is read; a date or a time is no such number
    numbered = (pl.col("body").str.contains(_GREP_NUMBER) & ~pl.col("body").str.contains(_NUMBER_IS_TIME))
    if written and frame.select(numbered.sum()).item() >= COMPOSE_SHARE * written:
        frame = frame.with_columns(pl.col("body").str.replace(_GREP_NUMBER, ""))
    process = pl.coalesce(pl.col("body").str.extract(_PROCESS, 1), compose)
    frame = frame.with_columns(process.alias("process"), process.str.extract(r"pid=([0-9]+)", 1).alias("process_pid"))
    frame = frame.with_columns(pl.col("body").str.replace(_PROCESS, "").str.replace(_MARKDOWN, "$1").alias("body"))
    # torch's `[rank3]:` before a glog stamp (the message keeps it: it names the rank)
    frame = frame.with_columns(pl.col("body").str.extract(_TORCH_RANK, 1).alias("torch_rank"))
    after_rank = pl.col("body").str.replace(_TORCH_RANK, "")
    frame = frame.with_columns(*stamps.extract(after_rank))
    frame = frame.with_columns(stamps.any_stamp().alias("own_stamp"), stamps.needs_year().alias("yearless"),
                               stamps.stated_year().alias("stated_year"), stamps.carried("level").alias("stamp_level"),
                               *[stamps.carried(g).alias(f"sys_{g}") for g in ("host", "ident", "pid")])
    frame = frame.with_columns(pl.col("body").str.extract(_UVICORN, 1).alias("uvicorn"),
                               pl.coalesce(pl.col("body").str.extract(_ISO_LEVEL, 1),  # after a stamp taken off as
                                           pl.when(pl.col("docker").is_not_null())  # a Docker time, at the start
                                           .then(pl.col("body").str.extract(_LOWER_LEVEL, 1)))
                               .str.to_uppercase().alias("iso_level"),
                               pl.col("body").str.contains(_NOISE).alias("noise"))
    # A Docker time over a line of its own (Docker Desktop writes one before a progress bar) is noise;
    # a Docker time over a line without a stamp of its own is that line's time.
    return frame.with_columns(
        (pl.col("docker").is_not_null() & (pl.col("body").str.strip_chars() == "")).alias("docker_alone"),
        pl.when(~pl.col("own_stamp") & pl.col("docker").is_not_null() & (pl.col("body").str.strip_chars() != ""))
        .then(pl.col("docker")).alias("docker_stamp"))


def _year(frame: pl.DataFrame, path: Path) -> tuple[int, str | None]:
    """The year for stamps written without one: the latest full date in the file, else the file's
    modification year; and a note when such stamps exist."""
    if not frame.get_column("yearless").any():
        return 1970, None
    docker_year = pl.col("docker_stamp").str.slice(0, 4).cast(pl.Int32, strict=False)
    dated = frame.select(pl.coalesce("stated_year", docker_year).max()).item()
    if dated:
        return int(dated), f"stamps without a year read as {dated}, the year of the file's latest full date"
    year = datetime.fromtimestamp(path.stat().st_mtime, UTC).year
    return year, f"stamps without a year read as {year}, the year of the file's modification time (a guess)"


def _written(year: int) -> pl.Expr:
    """A line's own stamp, whatever form it has, as `YYYY-MM-DD HH:MM:SS[.f]` text (null: none);
    else the Docker time over it."""
    docker = pl.col("docker_stamp").str.replace("T", " ").str.replace(",", ".").str.strip_suffix("Z")
    return pl.coalesce(stamps.written(year), docker)


def _records(body_lines: pl.DataFrame) -> pl.DataFrame:
    """Lines gathered into records (a stamped line and the lines after it), each timed by its own
    stamp or, without one (uvicorn's), by the record before it."""
    records = (body_lines.group_by("record", maintain_order=True).agg(
        pl.col("line").first(), pl.col("body").str.join("\n").alias("message"),
        *[pl.col(c).first() for c in ("written", "uvicorn", "docker", "process", "process_pid", "stamp_level",
                                      "iso_level", "torch_rank", "sys_host", "sys_ident", "sys_pid", "kube_kind", "kube_name",
                                      "kube_container")]))
    parsed_time = pl.coalesce([pl.col("written").str.to_datetime(f, strict=False, time_unit="us")
                               for f in ("%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M:%S")])
    records = records.with_columns(parsed_time.alias("own_ts"))
    return records.with_columns(pl.col("own_ts").forward_fill().alias("ts_naive"),
                                pl.when(pl.col("own_ts").is_not_null()).then(pl.lit("own stamp"))
                                .when(pl.col("written").is_null()).then(pl.lit("the record before it"))
                                .alias("LOG_TIME_SOURCE"))


def _event_rows(good: pl.DataFrame, path: Path) -> pl.DataFrame:
    """Readable records as the canonical events frame (before the file's own zone is applied)."""
    level = pl.coalesce("stamp_level", "iso_level",
                        "uvicorn",
                        pl.col("message").str.extract(LEVEL_WORD, 1))
    host = pl.coalesce("sys_host", pl.lit(host_of(path), pl.String))
    return good.select(
        pl.col("ts_naive").dt.replace_time_zone("UTC").alias("ts"),
        pl.lit(None, pl.Int64).alias("__REALTIME_TIMESTAMP"), pl.lit(None, pl.Int64).alias("__MONOTONIC_TIMESTAMP"),
        pl.lit(None, pl.String).alias("_BOOT_ID"), pl.lit(None, pl.String).alias("__CURSOR"),
        host.alias("host"), pl.coalesce("sys_ident", pl.lit(path.name)).alias("unit"),
        pl.coalesce("sys_ident", pl.lit(path.stem)).alias("identifier"),
        pl.coalesce("sys_pid", "process_pid").cast(pl.Int64).alias("pid"),
        level.replace_strict(PRIORITY, default=None, return_dtype=pl.Int8).alias("priority"),
        pl.lit(None, pl.String).alias("message_id"), pl.lit(None, pl.String).alias("invocation_id"),
        "message", pl.lit(DATA_TYPE).alias("data_type"), pl.lit(FORMAT).alias("format"),
        pl.lit(str(path)).alias("source_file"), pl.lit(None, pl.Int64).alias("source_offset"),
        pl.col("line").alias("source_line"), pl.lit(None, pl.List(EVENTS_SCHEMA["raw_fields"].inner)).alias("raw_fields"),
        pl.col("docker").alias("DOCKER_TIMESTAMP"), pl.col("process").alias("LOG_PROCESS"), "LOG_TIME_SOURCE",
        pl.col("torch_rank").alias("LOG_RANK"),
        pl.col("written").alias("LOG_STAMP"),
        *_pod_columns(good))


def _pod_columns(good: pl.DataFrame) -> list[pl.Expr]:
    """`kubectl logs --prefix`'s pod and container as the `K8S_*` columns kubectl's readers give
    (only when a line had the prefix: other logs carry no such columns)."""
    if good.get_column("kube_name").null_count() == good.height:
        return []
    return [pl.col("kube_kind").str.to_titlecase().alias("K8S_KIND"), pl.col("kube_name").alias("K8S_NAME"),
            pl.col("kube_container").alias("K8S_CONTAINER")]


def _quarantine(bad: pl.DataFrame, too_long: list[tuple[int, int]], path: Path) -> pl.DataFrame:
    """Records whose time cannot be read, and lines too long to read, each with its reason."""
    quarantine = bad.select(
        pl.lit(str(path)).alias("source_file"), pl.lit(FORMAT).alias("format"), pl.lit(None, pl.Int64).alias("offset"),
        pl.col("line"),
        pl.when(pl.col("written").is_null()).then(pl.lit("no time: a line without a stamp before any stamped line"))
        .otherwise(pl.format("time stamp {} is not a date", "written")).alias("reason"),
        pl.col("message").map_elements(excerpt_text, return_dtype=pl.String).alias("excerpt"),
        pl.lit(None, pl.String).alias("subject")).cast(dict(QUARANTINE_SCHEMA))  # type: ignore[arg-type]
    if too_long:  # each a record that could not be read: quarantined with its length, never silently dropped
        quarantine = pl.concat([quarantine, pl.DataFrame({
            "source_file": [str(path)] * len(too_long), "format": [FORMAT] * len(too_long),
            "offset": [None] * len(too_long), "line": [line for line, _ in too_long],
            "reason": [f"a line of {length:,} bytes, over the longest a line may be ({MAX_LINE_ENV}): not read"
                       for _, length in too_long],
            "excerpt": [""] * len(too_long), "subject": [None] * len(too_long)}).cast(dict(QUARANTINE_SCHEMA))])  # type: ignore[arg-type]
    return quarantine


def _zone_notes(good: pl.DataFrame, offset: int, anchor: str | None) -> list[str]:
    """What the reader says of the zone its stamps were read in."""
    if anchor:
        return [f"its stamps carry no zone; the file's own epoch ({anchor}) places them at {_utc_offset(offset)}: read so"]
    if good.height and good.get_column("written").drop_nulls().len():
        return ["its stamps carry no zone: read as UTC unless incident.toml gives the host's time_zone"]
    return []


def read_lines(text: str, path: Path, year: int | None = None) -> tuple[pl.DataFrame, str | None]:
    """Every line of `text` as this reader reads a line, for readers of wrappers around server logs
    (`kubectl logs`): `line`, `body` (the wrappers taken off), `written` (its stamp as
    `YYYY-MM-DD HH:MM:SS[.f]` text, else null), `level` (what its stamp or the word after an ISO
    stamp says), `uvicorn`, `process`, `process_pid`, `torch_rank`, `noise`, `docker_alone`; and the
    note on the year of stamps written without one (`year`, when given, is that year)."""
    frame = _lines(text)
    note = None
    if year is None:
        year, note = _year(frame, path)
    return frame.with_columns(_written(year).alias("written"),
                              pl.coalesce("stamp_level", "iso_level").alias("level")), note


def parse(path: Path) -> ParseResult:
    """Read one plain-text server log into `events` and `quarantine` rows."""
    data, damage = read_whole_lines(path)
    data, too_long = cut_long_lines(data)
    return parse_text(bytes(data).decode("utf-8", "replace"), path, too_long, damage)


def parse_text(text: str, path: Path, too_long: list[tuple[int, int]] | None = None,
               damage: str | None = None) -> ParseResult:
    """`text`, the file at `path` (or the lines of it another reader leaves to this one, the others
    blank so that each keeps its number), read into `events` and `quarantine` rows; `too_long`,
    the lines `cut_long_lines` cut, and the file's `damage` said with them."""
    too_long = too_long or []
    frame, year_note = read_lines(text, path)
    stamped = pl.col("written").is_not_null()
    starts = (stamped | pl.col("uvicorn").is_not_null()) & ~pl.col("docker_alone")
    frame = frame.with_columns(starts.cast(pl.Int32).cum_sum().alias("record"))
    passed_over = frame.filter(~starts & ((pl.col("record") == 0) | pl.col("noise") | pl.col("docker_alone")))
    records = _records(frame.filter(starts | ((pl.col("record") > 0) & ~pl.col("noise") & ~pl.col("docker_alone"))))
    bad = records.filter(pl.col("ts_naive").is_null() | (pl.col("written").is_not_null() & pl.col("own_ts").is_null()))
    good = records.join(bad.select("record"), on="record", how="anti")
    events = _event_rows(good, path)
    offset, anchor = _zone_from_epoch(good)
    if offset:
        events = events.with_columns((pl.col("ts") - pl.duration(seconds=offset)).alias("ts"),
                                     pl.lit(_utc_offset(offset)).alias("LOG_ZONE"))
    events = as_events(events)
    quarantine = _quarantine(bad, too_long, path)
    notes = [n for n in (year_note,) if n] + _zone_notes(good, offset, anchor)
    before = passed_over.filter(pl.col("record") == 0).height
    noise = passed_over.height - before
    if before:
        notes.append(f"{before} lines before the first time stamp passed over (commands, prose, progress bars)")
    if noise:
        notes.append(f"{noise} lines passed over between records (blank lines, progress bars, '...', Docker times "
                     "alone on a line)")
    if frame.get_column("written").null_count() == frame.height:  # no line has a time of its own
        unstamped = _without_time(frame, path)
        if unstamped.height:
            quarantine = quarantine.filter(pl.lit(bool(too_long)))
            return ParseResult("events", unstamped, quarantine, unstamped.height + len(too_long), damage=damage,
                               notes=[n for n in notes if not n.startswith(f"{before} lines before")]
                               + ["no line has a time stamp: every record is read with its time unknown"])
    if records.height == 0:
        return ParseResult("events", empty(EVENTS_SCHEMA), quarantine.filter(pl.lit(bool(too_long))), len(too_long),
                           damage=damage, notes=notes or ["no line with a time stamp: nothing read"])
    return ParseResult("events", events, quarantine, records.height + len(too_long), damage=damage, notes=notes)


#: A line that gives the true time as seconds since the epoch beside a stamp in local time: absl's
#: failure signal handler (`*** SIGABRT received at time=1763469143 on cpu 138 ***`), which PyTorch,
#: Ray and vLLM processes print as they die.
EPOCH_ANCHOR = re.compile(r"\*\*\* SIG[A-Z]+ received at time=(?P<epoch>[0-9]{9,11})\b")
ANCHOR_SLACK_S = 120  # the stamp before it and the epoch agree to within this, past a whole zone offset


def _zone_from_epoch(records: pl.DataFrame) -> tuple[int, str | None]:
    """The offset (seconds, a multiple of 15 min) of the file's zone-less stamps from UTC, when a
    record gives the epoch beside a stamp (its own or the record's before it); 0 and None otherwise."""
    for message, at in records.select("message", "ts_naive").iter_rows():
        found = EPOCH_ANCHOR.search(message or "")
        if found is None or at is None:
            continue
        true = datetime.fromtimestamp(int(found["epoch"]), UTC).replace(tzinfo=None)
        gap = (at - true).total_seconds()
        offset = round(gap / 900) * 900
        if abs(gap - offset) <= ANCHOR_SLACK_S and abs(offset) <= 14 * 3600:
            return offset, found.group(0).strip("* ")
    return 0, None


def _utc_offset(seconds: int) -> str:
    sign, seconds = ("+" if seconds >= 0 else "-"), abs(seconds)
    return f"UTC{sign}{seconds // 3600:02d}:{seconds % 3600 // 60:02d}"


def _without_time(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    """The records of a log without any time stamp: a line that does not start with a space starts
    one, except a traceback's exception line (unindented, right after the indented frames of a
    record that began `Traceback`), which ends its record."""
    lines = frame.filter(~pl.col("noise"))
    indented = pl.col("body").str.contains(r"^\s")
    lines = lines.with_columns(indented.alias("indented"), indented.shift(1, fill_value=False).alias("after_indented"))
    starts = ~pl.col("indented")
    lines = lines.with_columns(starts.cast(pl.Int32).cum_sum().alias("record"))
    opener = lines.group_by("record", maintain_order=True).agg(pl.col("body").first().alias("opener"))
    lines = lines.join(opener.with_columns(pl.col("record") + 1), on="record", how="left")
    # an exception line closes the traceback before it rather than starting a record of its own
    closes = starts & pl.col("after_indented") & pl.col("opener").str.starts_with("Traceback (most recent call last)")
    lines = lines.with_columns((starts & ~closes.fill_null(False)).cast(pl.Int32).cum_sum().alias("record"))
    records = lines.group_by("record", maintain_order=True).agg(
        pl.col("line").first(), pl.col("body").str.join("\n").alias("message"),
        *[pl.col(c).first() for c in ("kube_kind", "kube_name", "kube_container")])
    events = records.select(
        pl.lit(None, EVENTS_SCHEMA["ts"]).alias("ts"),
        pl.lit(None, pl.Int64).alias("__REALTIME_TIMESTAMP"), pl.lit(None, pl.Int64).alias("__MONOTONIC_TIMESTAMP"),
        pl.lit(None, pl.String).alias("_BOOT_ID"), pl.lit(None, pl.String).alias("__CURSOR"),
        pl.lit(host_of(path), pl.String).alias("host"), pl.lit(path.name).alias("unit"),
        pl.lit(path.stem).alias("identifier"), pl.lit(None, pl.Int64).alias("pid"),
        pl.col("message").str.extract(LEVEL_WORD, 1).replace_strict(PRIORITY, default=None, return_dtype=pl.Int8)
        .alias("priority"),
        pl.lit(None, pl.String).alias("message_id"), pl.lit(None, pl.String).alias("invocation_id"),
        "message", pl.lit(DATA_TYPE).alias("data_type"), pl.lit(FORMAT).alias("format"),
        pl.lit(str(path)).alias("source_file"), pl.lit(None, pl.Int64).alias("source_offset"),
        pl.col("line").alias("source_line"), pl.lit(None, pl.List(EVENTS_SCHEMA["raw_fields"].inner)).alias("raw_fields"),
        pl.lit("none in the file").alias("LOG_TIME_SOURCE"), *_pod_columns(records))
    return as_events(events)


register(NAME, sniff, parse, module=__name__)
