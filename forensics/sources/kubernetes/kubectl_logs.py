"""Container logs as `kubectl logs` and stern print them: each line with the pod and container it
came from (`K8S_NAME`, `K8S_CONTAINER`, the columns `forensics.sources.kubernetes.kubectl` defines)
and its own time, the rest of the line read as the server log reader reads a line
(`forensics.sources.logs.server_log`: its level, an engine's own stamp), so that SGLang's and
vLLM's lines keep their meaning.

The wrappers, as kubectl and stern write them before the container's own line:

- `kubectl logs --timestamps`: an RFC 3339 stamp (RFC3339Nano: up to 9 digits of the second, `Z`)
  the kubelet put on the line as it received it (`PodLogOptions.timestamps`), then a space. It is
  the line's time in UTC, true to the node's clock; the engine's own stamp stays in the message.
- `kubectl logs --prefix`: `[pod/NAME/CONTAINER] ` (kubectl 1.17, kubernetes/kubernetes#76471);
  with `--timestamps` too, the prefix comes first and the stamp after it.
- `--previous`: the same lines, of the container's last run; a capture header (below) says so.
- stern: `POD CONTAINER ` before each line (its default template; the names coloured with ANSI
  codes, which are taken off), a stamp after them with `--timestamps`, and `+ POD › CONTAINER` /
  `- POD › CONTAINER` lines when a container is added or removed (passed over, counted in the notes).
- a capture header (`# capture ts=… namespace=… pod=… container=… previous=true`, as `forensics
  collect` writes before each container's logs) names the pod and container of lines without a
  prefix.

Which lines are records: in a container's stream (its pod and container) a line with an engine
stamp starts one and the lines after it without one (a traceback) fold into it, as in a server
log; in a stream whose lines carry no engine stamp each line that does not start with a space is
one. A record's time is kubectl's stamp of its first line; without one (`--prefix` or stern
alone) the engine's own stamp, read as a server log's is (zone-less: placed in the host's zone
later), else the record's before it in its stream; a stream with no time at all is read at no
time (its errors are still reported), and the notes say so. Lines that are none of these shapes
(a command, a prompt, prose) are quarantined with their line.

The reader takes a file when its first 4 KiB show kubectl's prefix, stern's shape, or kubectl's
stamps with a sign that kubectl printed them (a `kubectl logs` / `stern` command, a capture header
naming a pod, a `kubernetes/` folder): `docker logs -t` writes the same stamps, and its files stay
with the server log reader.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from forensics.sources import register
from forensics.sources.common.rawio import cut_long_lines, read_whole_lines
from forensics.sources.common.schema import EVENTS_SCHEMA, ParseResult, as_events, empty, quarantine_rows
from forensics.sources.common.snapshot_time import parse_header
from forensics.sources.kubernetes.kubectl import K8S_COLUMNS
from forensics.sources.logs import server_log

NAME = "kubectl_logs"
FORMAT = "kubectl_logs"
DATA_TYPE = "kubectl:log"  # a line timed by kubectl's stamp (true UTC); lines timed by the engine's are "log:line"

_PREFIX = r"^\[pod/(?P<pod>[^/\]\s]+)/(?P<container>[^/\]\s]+)\] "
_STAMP = (r"^(?P<kube_ts>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
          r"(?:Z|[+-][0-9]{2}:[0-9]{2}))(?: |$)")
# a pod name as controllers make them: a ReplicaSet's or DaemonSet's `-xxxxx`, a StatefulSet's `-N`
_POD = r"[a-z0-9](?:[a-z0-9.-]{0,240}[a-z0-9])?-(?:[a-z0-9]{5}|[0-9]{1,5})"
_CONTAINER = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_STERN = rf"^(?P<stern_pod>{_POD}) (?P<stern_container>{_CONTAINER})(?: |$)"
_STERN_CHANGE = rf"^[+-] {_POD} › {_CONTAINER}\s*$"  # a container added or removed
_COMMAND = re.compile(rb"(?m)(?:^|[\s$#>] ?)(?:kubectl|k|oc|stern|kubetail)\b[^\n]*?(?:\blogs\b|\bstern\b)|"
                      rb"^\$? ?stern\b|^# capture [^\n]*\bpod=")
_HEAD_STAMP = re.compile(_STAMP.encode())
_HEAD_PREFIX = re.compile(_PREFIX.encode())
_HEAD_STERN = re.compile(_STERN.encode())
_HEAD_CHANGE = re.compile(_STERN_CHANGE.encode())
_HEAD_ANSI = re.compile(server_log.ANSI.encode())
SHARE = 0.6  # of a head's lines that must have kubectl's stamp or stern's shape


def _head_lines(head: bytes) -> list[bytes]:
    lines = [_HEAD_ANSI.sub(b"", line).rstrip(b"\r") for line in head.split(b"\n")[:-1] or head.split(b"\n")]
    return [line for line in lines if line.strip()]


def sniff(head: bytes, path: Path) -> bool:
    """Container logs with kubectl's `[pod/…/…]` prefix, in stern's shape, or with kubectl's stamps
    and a sign kubectl printed them (see the module's docstring)."""
    if path.is_dir() or not head or b"\x00" in head[:1024]:
        return False
    lines = _head_lines(head)
    if not lines:
        return False
    if any(_HEAD_PREFIX.match(line) for line in lines) or any(_HEAD_CHANGE.match(line) for line in lines):
        return True
    stern = sum(1 for line in lines if _HEAD_STERN.match(line))
    if stern >= 2 and stern >= SHARE * len(lines):
        return True
    stamped = sum(1 for line in lines if _HEAD_STAMP.match(line))
    said = bool(_COMMAND.search(head)) or any(p.name == "kubernetes" for p in path.parents)
    return said and stamped >= 2


def _header(lines: list[str]) -> dict[str, str]:
    """The first capture header's words (pod, container, namespace, previous) if the file has one."""
    for line in lines[:5]:
        if (words := parse_header(line)) is not None:
            return words
    return {}


def _wrappers(text: str, stern: bool) -> pl.DataFrame:
    """Every line with kubectl's and stern's wrappers taken off: pod, container, kubectl's stamp,
    the rest of the line, and whether the line is one kubectl or stern printed at all."""
    frame = pl.Series("raw", text.split("\n")).to_frame()
    if text.endswith("\n"):
        frame = frame.head(frame.height - 1)
    frame = frame.with_row_index("line", offset=1).with_columns(
        pl.col("line").cast(pl.Int64), pl.col("raw").str.replace_all(server_log.ANSI, "").str.strip_chars_end("\r").alias("body"))
    frame = frame.with_columns(pl.col("body").str.extract_groups(_PREFIX).alias("p")).unnest("p")
    frame = frame.with_columns(pl.col("body").str.replace(_PREFIX, ""))
    if stern:
        frame = frame.with_columns(pl.col("body").str.extract_groups(_STERN).alias("s")).unnest("s").with_columns(
            pl.coalesce("pod", "stern_pod").alias("pod"), pl.coalesce("container", "stern_container").alias("container"),
            pl.col("body").str.replace(_STERN, ""))
    frame = frame.with_columns(pl.col("body").str.extract(_STAMP, 1).alias("kube_ts"))
    return frame.with_columns(
        pl.col("body").str.replace(_STAMP, "").alias("rest"),
        pl.col("body").str.contains(_STERN_CHANGE).alias("change"),
        (pl.col("raw").str.strip_chars() == "").alias("blank"),
        pl.col("raw").str.starts_with("# capture ").alias("header"))


def _read_rest(lines: pl.DataFrame, path: Path) -> tuple[pl.DataFrame, str | None]:
    """The rest of each line read as the server log reader reads a line: its stamp (`written`),
    level, process, torch rank; and the note on the year of stamps written without one. The one
    place this reader leans on the server log reader (`server_log.read_lines`)."""
    kube_year = lines.get_column("kube_ts").drop_nulls().str.slice(0, 4).cast(pl.Int32, strict=False).max()
    rest, note = server_log.read_lines("\n".join(lines.get_column("rest").to_list()) + "\n", path,
                                       None if kube_year is None else int(kube_year))  # type: ignore[arg-type]
    read = rest.select(pl.col("body").alias("engine_body"), "written", "level",
                       *[(pl.col(c) if c in rest.columns else pl.lit(None, pl.String)).alias(c)
                         for c in ("uvicorn", "process", "process_pid", "torch_rank")])
    return pl.concat([lines, read], how="horizontal"), note


def _records(lines: pl.DataFrame) -> pl.DataFrame:
    """Lines gathered into records per stream (pod, container): a line with an engine stamp starts
    one, and in a stream without engine stamps every line that does not start with a space."""
    stream = ["pod", "container"]
    lines = lines.with_columns(
        pl.col("written").is_not_null().any().over(stream).alias("engine_stamps"),
        (pl.col("line") == pl.col("line").min().over(stream)).alias("first"))
    starts = (pl.col("first") | pl.col("written").is_not_null() | pl.col("uvicorn").is_not_null()
              | (~pl.col("engine_stamps") & ~pl.col("rest").str.contains(r"^\s")))
    lines = lines.sort(*stream, "line", nulls_last=True).with_columns(starts.cast(pl.Int32).cum_sum().alias("record"))
    records = lines.group_by("record", maintain_order=True).agg(
        pl.col("line").first(), pl.col("engine_body").str.join("\n").alias("message"),
        *[pl.col(c).first() for c in ("pod", "container", "kube_ts", "written", "uvicorn", "process", "process_pid",
                                      "level", "torch_rank")])
    kube = pl.col("kube_ts").str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%#z", strict=False, time_unit="us",
                                             time_zone="UTC")
    own = pl.coalesce([pl.col("written").str.to_datetime(f, strict=False, time_unit="us")
                       for f in ("%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M:%S")]).dt.replace_time_zone("UTC")
    records = records.with_columns(kube.alias("kube_at"), own.alias("own_at"))
    return records.sort("line").with_columns(
        pl.coalesce("kube_at", pl.col("own_at").forward_fill().over(["pod", "container"])).alias("ts"),
        pl.when(pl.col("kube_at").is_not_null()).then(pl.lit("kubectl --timestamps"))
        .when(pl.col("own_at").is_not_null()).then(pl.lit("own stamp"))
        .when(pl.col("own_at").forward_fill().over(["pod", "container"]).is_not_null())
        .then(pl.lit("the record before it")).otherwise(pl.lit("none in the file")).alias("LOG_TIME_SOURCE"))


def _events(records: pl.DataFrame, path: Path, header: dict[str, str]) -> pl.DataFrame:
    """Records as the canonical events frame: the pod as the unit, the container as the identifier."""
    level = pl.coalesce("level", "uvicorn", pl.col("message").str.extract(server_log.LEVEL_WORD, 1))
    pod = pl.coalesce("pod", pl.lit(header.get("pod"), pl.String))
    container = pl.coalesce("container", pl.lit(header.get("container"), pl.String))
    previous = header.get("previous") in ("true", "1", "yes")
    k8s = {"K8S_KIND": pl.when(pod.is_not_null()).then(pl.lit("Pod")),
           "K8S_NAMESPACE": pl.lit(header.get("namespace"), pl.String), "K8S_NAME": pod, "K8S_CONTAINER": container,
           "K8S_STATE": pl.lit("previous run" if previous else None, pl.String)}
    events = records.select(
        "ts", pl.lit(None, pl.Int64).alias("__REALTIME_TIMESTAMP"), pl.lit(None, pl.Int64).alias("__MONOTONIC_TIMESTAMP"),
        pl.lit(None, pl.String).alias("_BOOT_ID"), pl.lit(None, pl.String).alias("__CURSOR"),
        pl.lit(server_log.host_of(path), pl.String).alias("host"),
        pl.coalesce(pod, pl.lit(path.name)).alias("unit"), pl.coalesce(container, pl.lit(path.stem)).alias("identifier"),
        pl.col("process_pid").cast(pl.Int64).alias("pid"),
        level.replace_strict(server_log.PRIORITY, default=None, return_dtype=pl.Int8).alias("priority"),
        pl.lit(None, pl.String).alias("message_id"), pl.lit(None, pl.String).alias("invocation_id"), "message",
        # kubectl's stamp is true UTC; an engine's own stamp is zone-less, placed later as a server log's
        pl.when(pl.col("kube_at").is_not_null()).then(pl.lit(DATA_TYPE)).otherwise(pl.lit(server_log.DATA_TYPE))
        .alias("data_type"),
        pl.lit(FORMAT).alias("format"), pl.lit(str(path)).alias("source_file"),
        pl.lit(None, pl.Int64).alias("source_offset"), pl.col("line").alias("source_line"),
        pl.lit(None, EVENTS_SCHEMA["raw_fields"]).alias("raw_fields"),
        pl.col("kube_ts").alias("KUBECTL_TIMESTAMP"), pl.col("process").alias("LOG_PROCESS"), "LOG_TIME_SOURCE",
        pl.col("torch_rank").alias("LOG_RANK"), pl.col("written").alias("LOG_STAMP"),
        *[(k8s[c] if c in k8s else pl.lit(None, pl.String)).cast(pl.String).alias(c) for c in K8S_COLUMNS])
    return as_events(events)


def parse(path: Path) -> ParseResult:
    """One `events` row per record of each container's stream; lines kubectl and stern did not
    print quarantined with their line, and the records with no time at all."""
    data, damage = read_whole_lines(path)
    data, too_long = cut_long_lines(data)
    text = bytes(data).decode("utf-8", "replace")
    head_lines = text.split("\n", 8)[:8]
    header = _header(head_lines)
    stern = not any(re.match(_PREFIX, re.sub(server_log.ANSI, "", line)) for line in head_lines) and \
        bool(re.search(rf"(?m)^(?:{server_log.ANSI})*{_POD}(?:{server_log.ANSI})* (?:{server_log.ANSI})*{_CONTAINER}", text[:4096]))
    frame = _wrappers(text, stern)
    wrapped = pl.col("pod").is_not_null() | pl.col("kube_ts").is_not_null()
    skipped = frame.filter(pl.col("blank") | pl.col("header") | pl.col("change"))
    ours = frame.filter(wrapped & ~pl.col("blank") & ~pl.col("change"))
    outside = frame.filter(~wrapped & ~pl.col("blank") & ~pl.col("header") & ~pl.col("change"))
    bad = [(line, "not a line kubectl logs or stern prints (no pod prefix, no kubectl stamp): a command, a prompt "
            "or prose", raw, None) for line, raw in outside.select("line", "raw").iter_rows()]
    bad += [(line, f"a line of {length:,} bytes, over the longest a line may be ({server_log.MAX_LINE_ENV}): not read",
             "", None) for line, length in too_long]
    notes = []
    if skipped.filter(pl.col("change")).height:
        notes.append(f"{skipped.filter(pl.col('change')).height} lines of stern's saying a container was added or "
                     "removed passed over")
    if ours.height == 0:
        quarantine = quarantine_rows(str(path), FORMAT, bad)
        return ParseResult("events", empty(EVENTS_SCHEMA), quarantine, len(bad), damage=damage, notes=notes)
    lines, year_note = _read_rest(ours, path)
    records = _records(lines)
    events = _events(records, path, header)
    quarantine = quarantine_rows(str(path), FORMAT, bad)
    timed_by = events.get_column("LOG_TIME_SOURCE").value_counts(sort=True).iter_rows()
    notes += [f"{n} records timed by {how}" if how != "none in the file" else
              f"{n} records with no time (neither kubectl's stamp nor one of the container's own): read at no time"
              for how, n in timed_by]
    if year_note:
        notes.append(year_note)
    if events.filter(pl.col("LOG_TIME_SOURCE").is_in(["own stamp", "the record before it"])).height:
        notes.append("records without kubectl's stamp are timed by the container's own zone-less stamps: read as UTC "
                     "unless incident.toml gives the host's time_zone")
    if header.get("previous") in ("true", "1", "yes"):
        notes.append("the container's previous run (`kubectl logs --previous`)")
    return ParseResult("events", events, quarantine, events.height + len(bad), damage=damage, notes=notes)


register(NAME, sniff, parse, module=__name__)
