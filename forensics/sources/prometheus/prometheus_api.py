"""Range-query answers of a Prometheus-compatible HTTP API, as `forensics pull` saves them.

Format: the API's JSON (`{"status": "success", "data": {"resultType": "matrix", "result":
[{"metric": {...}, "values": [[unix_seconds, "value"], ...]}]}}`,
https://prometheus.io/docs/prometheus/latest/querying/api/#range-queries), wrapped with what was
asked (`forensics_pull`) and the metric metadata (`metadata`: type, help, unit per family). A bare
API answer saved with `curl` reads too (without types).

Records are points; a point whose value is not a float is quarantined. Series are read one by
one (their labels vary); their points in bulk by polars. Each point becomes a
`samples` row with the evaluation time as `ts` (exact: `ts_source` "prometheus api"), `instance`
from the series' `instance` label, and the other labels except the target's `job` and `instance`,
so a series reads the same as in a scrape of the target itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

from forensics.sources.prometheus import promtext
from forensics.sources.common.rawio import read_all
from forensics.sources.common.schema import (
    EXCERPT_CHARS,
    QUARANTINE_SCHEMA,
    SAMPLES_SCHEMA,
    empty,
    excerpt_text,
)
from forensics.sources import ParseResult, register

NAME = "prometheus_api"
FORMAT = "prometheus:api"
DATA_TYPE = "prometheus:sample"
TARGET_LABELS = ("instance", "job")
_PLAIN_LABELS = pl.List(pl.Struct({"name": pl.String, "value": pl.String}))
_SNIFF = re.compile(rb'"(?:forensics_pull|resultType)"\s*:')


def sniff(head: bytes, path: Path) -> bool:
    """A JSON object holding an API answer (`resultType`) or a `forensics pull` wrapper."""
    return not path.is_dir() and head.lstrip().startswith(b"{") and bool(_SNIFF.search(head))


def _family_and_type(name: str, metadata: dict[str, list[dict[str, str]]]) -> tuple[str, str | None, dict]:
    """A sample name's family and its metadata. Names are compared with `:` read as `_`: recent
    prometheus_client escapes `sglang:x_total` to `sglang_x_total` in the OpenMetrics it serves to
    Prometheus but keeps `sglang:x` in the metadata."""
    by_key = {promtext.name_key(family): (family, entries[0]) for family, entries in metadata.items() if entries}
    key = promtext.name_key(name)
    if key in by_key:
        return name, by_key[key][1].get("type"), by_key[key][1]
    for suffix in promtext.METRIC_SUFFIXES:
        if key.endswith(suffix) and key[: -len(suffix)] in by_key:
            info = by_key[key[: -len(suffix)]][1]
            if suffix in promtext.SUFFIXES.get(info.get("type", ""), ()):
                return name[: -len(suffix)], info.get("type"), info
    return name, None, {}


def parse(path: Path) -> ParseResult:
    """Read one saved API answer."""
    source_file = str(path)
    try:
        document = json.loads(bytes(read_all(path)))
        result = document["data"]["result"]
        if document["data"].get("resultType") != "matrix":
            raise ValueError(f"resultType {document['data'].get('resultType')!r}, expected 'matrix'")
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, RecursionError) as error:
        why = "JSON nested too deeply" if isinstance(error, RecursionError) else str(error)
        bad = {"source_file": [source_file], "format": [FORMAT], "offset": [None], "line": [1],
               "reason": [f"not a range-query answer: {why}"], "excerpt": [excerpt_text(why)],
               "subject": [None]}
        return ParseResult("samples", empty(SAMPLES_SCHEMA), pl.DataFrame(bad, schema=dict(QUARANTINE_SCHEMA)), 1,
                           parsed_records=0)
    metadata = document.get("metadata", {})
    series = _series_table(result, metadata, document.get("forensics_pull", {}).get("query", ""))
    # Points in bulk: polars reads each [time, "value"] pair as two strings, kept exactly as written.
    points = (pl.DataFrame({"series_index": range(len(result)),
                            "point": pl.Series([item.get("values", []) for item in result],
                                               dtype=pl.List(pl.List(pl.String)), strict=False)})
              .explode("point").drop_nulls("point")
              .with_columns(pl.int_range(pl.len()).over("series_index").alias("point_index"),
                            pl.col("point").list.get(0, null_on_oob=True).cast(pl.Float64, strict=False).alias("at"),
                            pl.col("point").list.get(1, null_on_oob=True).alias("value")))
    ok = (pl.col("point").list.len() == 2) & pl.col("at").is_not_null() & pl.col("value").str.contains(
        f"^(?:{promtext.FLOAT})$").fill_null(False)
    bad = points.filter(~ok)
    quarantine = bad.select(
        pl.lit(source_file).alias("source_file"), pl.lit(FORMAT).alias("format"), pl.lit(None, pl.Int64).alias("offset"),
        pl.lit(None, pl.Int64).alias("line"),
        pl.format('series {} point {}: expected [time, "float"], got {}', "series_index", "point_index",
                  pl.col("point").list.join(", ")).alias("reason"),
        pl.col("point").list.join(", ").str.slice(0, EXCERPT_CHARS).alias("excerpt"),
        pl.lit(None, pl.String).alias("subject")).cast(dict(QUARANTINE_SCHEMA))  # type: ignore[arg-type]
    good = points.filter(ok)
    records = points.height
    if good.height == 0:
        return ParseResult("samples", empty(SAMPLES_SCHEMA), quarantine, records, parsed_records=0)
    at = pl.from_epoch((pl.col("at") * 1e6).round().cast(pl.Int64), time_unit="us").dt.replace_time_zone("UTC")
    frame = (good.join(series, on="series_index", how="left")
             .with_columns(at.alias("ts"), at.alias("sample_ts"), pl.lit("prometheus api").alias("ts_source"),
                           pl.lit("high").alias("ts_confidence"), pl.col("value").cast(pl.Float64),
                           pl.lit(None, pl.String).alias("exemplar"), pl.lit(FORMAT).alias("format"),
                           pl.lit(DATA_TYPE).alias("data_type"), pl.lit(source_file).alias("source_file"),
                           pl.lit(None, pl.Int64).alias("source_line"), pl.lit(0, pl.Int32).alias("scrape"),
                           pl.col("labels").alias("label_list"))
             .with_columns(promtext.series_key().alias("series")))
    samples = frame.select([pl.col(n).cast(d) for n, d in SAMPLES_SCHEMA.items()])
    return ParseResult("samples", samples, quarantine, records, parsed_records=good.height)


def _series_table(result: list[dict], metadata: dict[str, list[dict[str, str]]], query: str) -> pl.DataFrame:
    """One row per series of the answer (not per point): its name, target, labels and metadata."""
    rows = []
    for index, item in enumerate(result):
        metric = dict(item.get("metric", {}))
        name = metric.pop("__name__", None) or query
        instance = metric.get("instance")
        host, _, port = (instance or "").rpartition(":")
        family, kind, info = _family_and_type(name, metadata)
        rows.append({"series_index": index, "instance": instance, "host": host or None,
                     "port": int(port) if port.isdigit() else None, "family": family, "name": name,
                     "type": kind or "unknown", "unit": info.get("unit") or None, "help": info.get("help"),
                     "labels": [{"name": k, "value": v} for k, v in sorted(metric.items()) if k not in TARGET_LABELS]})
    return pl.DataFrame(rows, schema={"series_index": pl.Int64, "instance": pl.String, "host": pl.String,
                                      "port": pl.Int32, "family": pl.String, "name": pl.String, "type": pl.String,
                                      "unit": pl.String, "help": pl.String, "labels": _PLAIN_LABELS})


register(NAME, sniff, parse, module=__name__)
