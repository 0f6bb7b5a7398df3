"""`/metrics` scrapes: Prometheus text format 0.0.4 and OpenMetrics 1.0 text, one or many per file.

Where a scrape comes from and when (`forensics.sources.common.snapshot_time`): a bundle keeps a folder per target,
`metrics/<target>/…`, where `<target>` is a port (`30002`) or `host:port` / `host_port`; each
scrape carries its time in a capture header the collector writes before it,

    # capture ts=2026-06-18T21:40:10Z host=gpu-node-00 port=30002

or in its file name (`2026-06-18T21-40-10Z.prom`); plain `curl` output falls back to the file's
mtime, marked low-confidence. One file may hold many scrapes, each after its own header. A scrape
that ends with `# EOF` (or whose header says `format=openmetrics`) is read as OpenMetrics
(timestamps in float seconds, exemplars, `_total`/`_created`/`_info`/`_gcount` suffixes).

Records are the lines that say something (samples, HELP/TYPE/UNIT, `# EOF`, comments): each is read
or quarantined with its line number and a message in the words of Prometheus's own parser, and the
rest of the scrape still loads. Duplicate series in one scrape keep the first. Every line is
classified and cut by one pass of regular expressions over the whole file (polars); only the lines
those refuse go through the exact reader `forensics.sources.prometheus.promtext.parse_line`.
"""

from __future__ import annotations

import mmap
import re
from pathlib import Path

import polars as pl

from forensics.sources.prometheus import promtext
from forensics.sources.common.snapshot_time import (
    HEADER_PREFIX,
    Capture,
    from_header,
    from_path,
    parse_header,
)
from forensics.sources.journal.fields import LATEST_REALTIME_US
from forensics.sources.common.rawio import read_whole_lines, release
from forensics.sources.common.schema import QUARANTINE_SCHEMA, SAMPLES_SCHEMA, empty, excerpt_text
from forensics.sources import ParseResult, register

NAME = "prometheus_text"
TEXT_FORMAT, OPENMETRICS_FORMAT = "prometheus:text", "openmetrics:text"
DATA_TYPE = "prometheus:sample"
# Sample timestamps before 1900 or from 2200 on are damage, not data (the exposition format's own
# example has one from 1969, so the epoch is no bound); they would overflow date arithmetic.
EARLIEST_SAMPLE_US = -2_208_988_800_000_000
_ALLOWED = pl.DataFrame([(t, s) for t, suffixes in promtext.SUFFIXES.items() for s in suffixes],
                        schema={"base_type": pl.String, "suffix": pl.String}, orient="row")
_SNIFF_LINE = re.compile(rf"^(?:# (?:HELP|TYPE|UNIT) |# EOF$|{promtext.METRIC_NAME}(?:\{{.*\}})?[ \t]+(?:{promtext.FLOAT})"
                         rf"(?:[ \t]+\S+)?[ \t]*$)")
# a line with something on it that is not a capture header (`str.strip` and `\S` agree on what is space)
_CONTENT_LINE = re.compile(rf"^(?!{re.escape(HEADER_PREFIX)})[^\n]*?\S", re.MULTILINE)
_TARGET = re.compile(r"^(?:(?P<host>[^:_/]+)[:_])?(?P<port>\d{2,5})$")
# A JSON document's start: `[`, `{"key":`, or `{}` alone (`{} 3.14` is a sample line, if a bad one).
_JSON_START = re.compile(rb'\s*(?:\[|\{\s*"(?:[^"\\]|\\.)*"\s*:|\{\s*\}\s*$)')
_SUFFIXES = (".prom", ".metrics", ".om", ".openmetrics")
CHUNK_BYTES = 2 << 20  # scrapes are read in runs of about this size: memory against per-run cost


def _in_metrics_folder(path: Path) -> bool:
    return path.suffix in _SUFFIXES or any(p.name == "metrics" for p in path.parents)


def sniff(head: bytes, path: Path) -> bool:
    """An exposition: the first line that is not a capture header is HELP/TYPE/UNIT/EOF or a whole
    sample line. Files under a `metrics/` folder or named `*.prom` are claimed whatever they hold,
    so an HTML error page or an empty scrape is reported instead of skipped."""
    if path.is_dir():
        return False
    if _in_metrics_folder(path):
        return not _JSON_START.match(head)  # JSON there is an API answer, not a scrape
    for line in head.decode("utf-8", "replace").splitlines():
        if not line.strip() or line.startswith(HEADER_PREFIX):
            continue
        return bool(_SNIFF_LINE.match(line))
    return False


def target_of(path: Path) -> dict[str, str]:
    """Host and port a `metrics/<target>/…` folder names."""
    for folder in path.parents:
        found = _TARGET.match(folder.name)
        if found and folder.parent.name == "metrics":
            return {k: v for k, v in found.groupdict().items() if v}
    return {}


def _quarantine(source_file: str, fmt: str, rows: pl.DataFrame) -> pl.DataFrame:
    """Quarantine rows from a frame with line, reason and text."""
    return rows.select(
        pl.lit(source_file).alias("source_file"), pl.lit(fmt).alias("format"), pl.lit(None, pl.Int64).alias("offset"),
        pl.col("line").cast(pl.Int64), pl.col("reason"),
        pl.col("text").map_elements(excerpt_text, return_dtype=pl.String).alias("excerpt"),
        pl.lit(None, pl.String).alias("subject"),
    ).cast(dict(QUARANTINE_SCHEMA))  # type: ignore[arg-type]


def _first_content(text: str) -> str | None:
    """The first line of `text` that is neither blank nor a capture header, or None. Searched for:
    `io.StringIO(text)` first copied a whole 3 MB scrape file (as UCS-4) to look at two lines."""
    found = _CONTENT_LINE.search(text)
    if found is None:
        return None
    end = text.find("\n", found.start())
    return text[found.start():] if end < 0 else text[found.start():end + 1]


def _whole_file_problem(text: str) -> str | None:
    """Why a whole file is not a scrape (empty, an HTML page), from its first line of content."""
    line = _first_content(text)
    if line is not None:
        if line.lstrip()[:1] != "<":
            return None
        title = re.search(r"<title>(.*?)</title>", text[:4096], re.IGNORECASE | re.DOTALL)
        return "an HTML page, not a metrics exposition" + (f" ({title[1].strip()[:60]})" if title else "")
    return None


def _captures(lines: pl.DataFrame, fallback: Capture, target: dict[str, str]) -> pl.DataFrame:
    """Per scrape: capture time and target from its header (else the file), and its format."""
    headers = dict(lines.filter(pl.col("kind") == "header").select("scrape", "text").iter_rows())
    scrapes = lines.group_by("scrape").agg((pl.col("kind") == "eof").any().alias("has_eof"))
    rows = []
    for scrape, has_eof in scrapes.sort("scrape").iter_rows():
        labels = parse_header(headers[scrape]) if scrape in headers else None
        capture = from_header(labels, fallback) if labels is not None else fallback
        where = {**target, **capture.labels}
        port = where.get("port")
        host = where.get("host")
        instance = where.get("instance") or (f"{host or 'localhost'}:{port}" if port else host)
        openmetrics = has_eof or where.get("format", "").lower() == "openmetrics"
        rows.append((scrape, capture.ts, capture.ts_source, capture.ts_confidence, instance, host,
                     int(port) if port and port.isdigit() else None,
                     OPENMETRICS_FORMAT if openmetrics else TEXT_FORMAT))
    return pl.DataFrame(rows, schema={"scrape": pl.Int32, "ts": SAMPLES_SCHEMA["ts"], "ts_source": pl.String,
                                      "ts_confidence": pl.String, "instance": pl.String, "host": pl.String,
                                      "port": pl.Int32, "format": pl.String}, orient="row")


def classify(text: str, first_line: int = 1, first_scrape: int = 0) -> pl.DataFrame:
    """Every line with its kind (header, blank, meta, eof, comment, sample), scrape and fields;
    line and scrape numbers start where this part of the file starts."""
    cut = not text.endswith("\n")
    lines = pl.Series("text", [text]).str.split("\n").explode().to_frame()
    if not cut:
        lines = lines.head(lines.height - 1)
    lines = lines.with_row_index("line", offset=first_line).with_columns(pl.col("line").cast(pl.Int64))
    t = pl.col("text")
    kind = (pl.when(t.str.starts_with(HEADER_PREFIX)).then(pl.lit("header"))
            .when(t.str.strip_chars() == "").then(pl.lit("blank"))
            .when(t.str.contains(r"^[ \t]*#[ \t]+(?:HELP|TYPE|UNIT)[ \t]+\S")).then(pl.lit("meta"))
            .when(t.str.contains(r"^# EOF[ \t]*$")).then(pl.lit("eof"))
            .when(t.str.contains(r"^[ \t]*#")).then(pl.lit("comment"))
            .otherwise(pl.lit("sample")))
    return lines.with_columns(kind.alias("kind")).with_columns(
        ((pl.col("kind") == "header").cum_sum() + first_scrape).cast(pl.Int32).alias("scrape"),
        (pl.lit(cut) & (pl.col("line") == pl.col("line").max())).alias("cut"),
    )


def _metadata(lines: pl.DataFrame, first_sample: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The HELP/TYPE/UNIT each family declares per scrape, and the metadata lines that are wrong."""
    meta = (lines.filter(pl.col("kind") == "meta")
            .with_columns(pl.col("raw_text").str.strip_chars_start(" \t").str.extract_groups(promtext.METADATA)
                          .alias("m")).unnest("m"))
    # expfmt reads a name and nothing after it (`# TYPE name`) as a comment it ignores: read, kept
    # out of the declarations and of the checks for repeats
    meta = (meta.filter(pl.col("family").is_null() | pl.col("detail").is_not_null())
            .with_columns(pl.col("family").str.starts_with('"').alias("quoted"), pl.col("family").str.strip_chars('"')))
    meta = meta.join(first_sample, on=["scrape", "family"], how="left")
    keyword, family = pl.col("keyword"), pl.col("family")
    repeated = pl.int_range(pl.len()).over("scrape", "family", "keyword") > 0
    after_samples = pl.col("first_sample_line").is_not_null() & (pl.col("first_sample_line") < pl.col("line"))
    quoted = pl.format('"{}"', family)
    # a quoted (UTF-8) name is an error for the text format's legacy reader that promtool runs;
    # OpenMetrics as Prometheus reads it takes them
    legacy_quoted = pl.col("quoted") & (pl.col("format") != OPENMETRICS_FORMAT)
    reason = (pl.when(family.is_null() | legacy_quoted).then(pl.lit("invalid metric name in comment"))
              .when((keyword == "TYPE") & (repeated | after_samples))
              .then(pl.format("second TYPE line for metric name {}, or TYPE reported after samples", quoted))
              .when((keyword == "TYPE") & ~pl.col("detail").str.to_lowercase().is_in(list(promtext.TYPES)))
              .then(pl.format('unknown metric type "{}"', pl.col("detail").fill_null("")))
              .when((keyword == "HELP") & repeated).then(pl.format("second HELP line for metric name {}", quoted))
              .when((keyword == "HELP") & pl.col("detail").fill_null("").str.contains("\\", literal=True))
              .then(pl.col("detail").map_elements(promtext.help_problem, return_dtype=pl.String)))
    meta = meta.with_columns(reason.alias("reason"))
    bad = meta.filter(pl.col("reason").is_not_null()).select("line", "reason", pl.col("raw_text").alias("text"))
    good = meta.filter(pl.col("reason").is_null())
    declared = (good.group_by("scrape", "family")
                .agg(pl.col("detail").filter(keyword == "TYPE").first().str.to_lowercase().alias("declared_type"),
                     pl.col("detail").filter(keyword == "HELP").first().map_elements(promtext.unescape,
                                                                                    return_dtype=pl.String)
                     .alias("help"),
                     pl.col("detail").filter(keyword == "UNIT").first().alias("unit")))
    return declared, bad


def parse_text(text: str, source_file: str, fallback: Capture, target: dict[str, str],
               first_line: int = 1, first_scrape: int = 0, not_utf8: dict[int, str] | None = None) -> ParseResult:
    """Every scrape in one exposition text (a whole file, or a run of whole scrapes of it that
    starts at `first_line` with scrape number `first_scrape`); `not_utf8` names the lines whose
    bytes were not UTF-8 (the text has U+FFFD there) with their reasons."""
    if _first_content(text) is None:
        # promtool accepts an empty exposition; an empty scrape is still worth a word
        return ParseResult("samples", empty(SAMPLES_SCHEMA), empty(QUARANTINE_SCHEMA), 0, parsed_records=0,
                           notes=["empty: no samples and no metadata (the endpoint answered nothing?)"])
    problem = _whole_file_problem(text)
    if problem is not None:
        bad = pl.DataFrame({"line": [first_line], "reason": [problem], "text": [text[:200]]})
        return ParseResult("samples", empty(SAMPLES_SCHEMA), _quarantine(source_file, TEXT_FORMAT, bad), 1,
                           parsed_records=0)
    lines = classify(text, first_line, first_scrape)
    captures = _captures(lines, fallback, target)
    lines = lines.join(captures.select("scrape", "format"), on="scrape", how="left")
    openmetrics = pl.col("format") == OPENMETRICS_FORMAT
    fast, slow = _split_samples(lines.filter(pl.col("kind") == "sample"))
    # the series key is made once per distinct head on the bulk path; here for the lines read slowly
    samples = pl.concat([fast, _read_slowly(slow).with_columns(promtext.series_key().alias("series"))],
                        how="diagonal")
    base = pl.col("name").str.replace(f"({'|'.join(promtext.METRIC_SUFFIXES)})$", "")
    suffix = pl.col("name").str.extract(f"({'|'.join(promtext.METRIC_SUFFIXES)})$")
    good = samples.filter(pl.col("reason").is_null()).with_columns(base.alias("base"), suffix.alias("suffix"))
    first_sample = (pl.concat([good.select("scrape", pl.col("name").alias("family"), "line"),
                               good.select("scrape", pl.col("base").alias("family"), "line")])
                    .group_by("scrape", "family").agg(pl.col("line").min().alias("first_sample_line")))
    meta_lines = lines.filter(pl.col("kind") == "meta").rename({"text": "raw_text"})
    declared, bad_meta = _metadata(meta_lines, first_sample)
    # A sample belongs to the family its base name declares when the suffix fits that family's type.
    own = declared.select("scrape", pl.col("family").alias("name"), pl.col("declared_type").alias("own_type"))
    base_declared = declared.select("scrape", pl.col("family").alias("base"),
                                    pl.col("declared_type").alias("base_type"))
    good = (good.join(own, on=["scrape", "name"], how="left")
            .join(base_declared, on=["scrape", "base"], how="left")
            .join(_ALLOWED.with_columns(pl.lit(True).alias("fits")), on=["base_type", "suffix"], how="left")
            .with_columns(pl.when(pl.col("fits") & pl.col("own_type").is_null()).then(pl.col("base"))
                          .otherwise(pl.col("name")).alias("family"))
            .drop("own_type", "base_type", "fits"))
    good = good.join(declared, on=["scrape", "family"], how="left").with_columns(
        pl.coalesce("declared_type", pl.when(openmetrics).then(pl.lit("unknown")).otherwise(pl.lit("untyped")))
        .alias("type"))
    bad_samples = _sample_problems(samples.filter(pl.col("reason").is_not_null()), good)
    # One reason per line; what is wrong with the scrape's shape (after EOF, …) comes first.
    encoding = pl.DataFrame({"line": list(not_utf8 or {}), "reason": list((not_utf8 or {}).values())},
                            schema={"line": pl.Int64, "reason": pl.String}).join(
        lines.select("line", "text"), on="line", how="inner")
    quarantine = (pl.concat([encoding, _other_problems(lines), bad_samples, bad_meta])
                  .unique("line", keep="first").sort("line"))
    rows = _finish(good.join(quarantine.select("line"), on="line", how="anti"), captures, source_file)
    records = lines.filter(~pl.col("kind").is_in(["blank", "header"])).height
    fmt = OPENMETRICS_FORMAT if (captures.get_column("format") == OPENMETRICS_FORMAT).all() else TEXT_FORMAT
    return ParseResult("samples", rows, _quarantine(source_file, fmt, quarantine), records,
                       parsed_records=records - quarantine.height)


def _split_samples(samples: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Read the plain sample lines in bulk; return them and the lines left for the exact reader.

    A plain line is `head value [timestamp]` with spaces, no tab, no exemplar: the head (name and
    label set) ends at the first space, or at the first "} " when it has braces. Heads repeat
    from scrape to scrape, so each distinct head is checked and its labels read once."""
    t = pl.col("text")
    raw, end = pl.col("_raw"), pl.col("_end")
    plain = ~pl.col("cut") & ~t.str.contains(r"[\t#]")
    candidates = samples.filter(plain).with_columns(
        t.cast(pl.Binary).alias("_raw"),
        pl.when(t.str.contains("{", literal=True)).then(t.str.find("} ", literal=True) + 1)
        .otherwise(t.str.find(" ", literal=True)).alias("_end"))
    candidates = candidates.with_columns(
        raw.bin.slice(0, end).cast(pl.String).alias("head"),
        raw.bin.slice(end).cast(pl.String).str.strip_chars(" ").str.split(" ").list.eval(
            pl.element().filter(pl.element() != "")).alias("_tokens")).drop("_raw", "_end")
    value, stamp = pl.col("_tokens").list.get(0, null_on_oob=True), pl.col("_tokens").list.get(1, null_on_oob=True)
    openmetrics = pl.col("format") == OPENMETRICS_FORMAT
    heads = _heads(candidates.select("head").unique())
    candidates = candidates.join(heads, on="head", how="left").with_columns(value.alias("value"), stamp.alias("timestamp"))
    fine = (pl.col("head_ok").fill_null(False) & pl.col("_tokens").list.len().is_between(1, 2)
            & pl.col("value").str.contains(f"^(?:{promtext.FLOAT})$").fill_null(False)
            & (stamp.is_null() | pl.when(openmetrics).then(stamp.str.contains(f"^(?:{promtext.FLOAT})$"))
               .otherwise(stamp.str.contains(f"^(?:{promtext.INTEGER})$"))))
    candidates = candidates.with_columns(fine.alias("_fine"))
    fast = (candidates.filter(pl.col("_fine"))
            .select("line", "text", "scrape", "format", "cut", "name", "label_list", "series", "value", "timestamp",
                    pl.lit(None, pl.String).alias("exemplar"), pl.lit(None, pl.String).alias("reason")))
    slow = pl.concat([samples.filter(~plain), candidates.filter(~pl.col("_fine")).select(samples.columns)])
    return fast, slow


def _heads(heads: pl.DataFrame) -> pl.DataFrame:
    """Each distinct `name{labels}`: its metric name, sorted labels, and whether it reads cleanly."""
    found = heads.with_columns(pl.col("head").str.extract_groups(
        rf"^(?P<name>{promtext.METRIC_NAME})?(?P<labels>\{{.*\}})?$").alias("m")).unnest("m")
    found = found.with_columns(
        pl.col("labels").str.contains(f"^{promtext.LABELS}$").fill_null(True).alias("labels_ok"))
    labels = _labels(found.filter(pl.col("labels_ok")).select(pl.col("head").alias("line"), "labels"))
    found = found.join(labels.rename({"line": "head"}), on="head", how="left")
    # the legacy reader promtool runs takes no quoted (UTF-8) names: such lines go to the exact reader
    name = pl.when(pl.col("quoted_name").is_null() & ~pl.col("quoted_label").fill_null(False)).then(pl.col("name"))
    ok = (pl.col("labels_ok") & name.is_not_null() & ~pl.col("bad_labels").fill_null(False)
          & ~(pl.col("name").is_not_null() & pl.col("quoted_name").is_not_null()))
    found = found.select("head", name.alias("name"), pl.col("label_list"), ok.alias("head_ok"))
    return found.with_columns(promtext.series_key().alias("series"))


def _read_slowly(lines: pl.DataFrame) -> pl.DataFrame:
    """The lines the bulk path did not take, read one by one by the exact reader."""
    rows = []
    for line, text, scrape, fmt, cut in lines.select("line", "text", "scrape", "format", "cut").iter_rows():
        name = labels = value = stamp = exemplar = reason = None
        if cut:
            reason = "scrape cut short: the last line has no newline"
        else:
            try:
                sample = promtext.parse_line(text, openmetrics=fmt == OPENMETRICS_FORMAT)
            except ValueError as error:
                reason = str(error)
            else:
                name, value, stamp, exemplar = sample.name, sample.value, sample.timestamp, sample.exemplar
                labels = [{"name": k, "value": v} for k, v in sorted(sample.labels)]
        rows.append((line, text, scrape, fmt, cut, name, labels, value, stamp, exemplar, reason))
    return pl.DataFrame(rows, schema={"line": pl.Int64, "text": pl.String, "scrape": pl.Int32, "format": pl.String,
                                      "cut": pl.Boolean, "name": pl.String,
                                      "label_list": pl.List(pl.Struct({"name": pl.String, "value": pl.String})),
                                      "value": pl.String, "timestamp": pl.String, "exemplar": pl.String,
                                      "reason": pl.String}, orient="row")


def _labels(samples: pl.DataFrame) -> pl.DataFrame:
    """Per sample line with a label set: sorted labels, a metric name given inside the braces,
    and whether the set is unusable (duplicate or reserved names)."""
    with_labels = samples.filter(pl.col("labels").is_not_null()).select("line", "labels")
    pairs = (with_labels.with_columns(pl.col("labels").str.extract_all(promtext.LABEL_PAIR).alias("pair"))
             .explode("pair").drop_nulls("pair")
             .with_columns(pl.col("pair").str.extract_groups(promtext.LABEL_PAIR).alias("g")).unnest("g"))
    unquote = pl.col("qname").str.slice(1, pl.col("qname").str.len_chars() - 2)
    value = pl.col("lvalue").str.slice(1, pl.col("lvalue").str.len_chars() - 2)
    pairs = pairs.with_columns(
        pl.coalesce("lname", unquote).alias("label"),
        pl.when(value.str.contains("\\", literal=True))
        .then(value.map_elements(promtext.unescape, return_dtype=pl.String)).otherwise(value).alias("value"))
    quoted_names = (pairs.filter(pl.col("lvalue").is_null())
                    .group_by("line").agg(pl.col("label").first().alias("quoted_name"),
                                          (pl.len() > 1).alias("two_names")))
    real = pairs.filter(pl.col("lvalue").is_not_null()).sort("line", "label")
    grouped = real.group_by("line").agg(
        pl.struct(pl.col("label").alias("name"), "value").alias("label_list"),
        (pl.col("label").is_duplicated().any() | (pl.col("label") == "__name__").any()).alias("bad_labels"),
        pl.col("qname").is_not_null().any().alias("quoted_label"))
    return (with_labels.select("line").join(grouped, on="line", how="left").join(quoted_names, on="line", how="left")
            .with_columns((pl.col("bad_labels").fill_null(False) | pl.col("two_names").fill_null(False))
                          .alias("bad_labels"))
            .drop("two_names"))


def _sample_problems(refused: pl.DataFrame, good: pl.DataFrame) -> pl.DataFrame:
    """The refused sample lines with their reasons, plus checks on lines that read: `le` /
    `quantile` values that are not floats, and sample timestamps out of any plausible range. (A
    series written twice is no parse error for promtool, so both samples are kept.)"""
    checks = [refused.select("line", "reason", "text")]
    for label, kinds in (("le", ("histogram", "gaugehistogram")), ("quantile", ("summary",))):
        value = pl.col("label_list").list.eval(
            pl.element().filter(pl.element().struct.field("name") == label).struct.field("value")).list.first()
        checks.append(good.filter(pl.col("type").is_in(list(kinds)) & value.is_not_null()
                                  & ~value.str.contains(f"^(?:{promtext.FLOAT})$"))
                      .select("line", pl.format(f"expected float as value for '{label}' label, got \"{{}}\"", value)
                              .alias("reason"), "text"))
    micros = _sample_micros()
    checks.append(good.filter(pl.col("timestamp").is_not_null()
                              & ~micros.is_between(EARLIEST_SAMPLE_US, LATEST_REALTIME_US, closed="left").fill_null(False))
                  .select("line", pl.format("timestamp {} is outside 1900–2199", pl.col("timestamp").str.slice(0, 40))
                          .alias("reason"), "text"))
    return pl.concat(checks).unique("line", keep="first", maintain_order=True)


def _other_problems(lines: pl.DataFrame) -> pl.DataFrame:
    """OpenMetrics has no free comments and nothing after `# EOF`; a cut metadata line."""
    openmetrics = pl.col("format") == OPENMETRICS_FORMAT
    after_eof = (pl.col("kind") == "eof").cast(pl.Int32).cum_sum().over("scrape") > 0
    eof_itself = pl.col("kind") == "eof"
    return lines.filter(~pl.col("kind").is_in(["blank", "header"])).with_columns(
        pl.when(openmetrics & after_eof & ~eof_itself)
        .then(pl.lit("content after '# EOF'"))
        .when(openmetrics & (pl.col("kind") == "comment")).then(pl.lit("OpenMetrics allows no comments"))
        .when(pl.col("cut") & (pl.col("kind") == "meta")).then(pl.lit("scrape cut short: the last line has no newline"))
        .alias("reason")).filter(pl.col("reason").is_not_null()).select("line", "reason", "text")


# NVIDIA DCGM's "blank" values (no reading: not found, not supported, not permitted), written as
# ordinary numbers: int64 blanks from 0x7ffffffffffffff0 on, and fp64 blanks from 2^47.
DCGM_INT_BLANK = 9223372036854775792.0
DCGM_FLOAT_BLANK = (140737488355328.0, 140737488355334.0)


def _missing_when_blank(value: pl.Expr) -> pl.Expr:
    """A sample value, null where a DCGM family writes one of its blank sentinels."""
    dcgm = pl.col("name").str.starts_with("DCGM_")
    blank = (value >= DCGM_INT_BLANK) | value.is_between(*DCGM_FLOAT_BLANK)
    return pl.when(dcgm & blank).then(None).otherwise(value)


def _sample_micros() -> pl.Expr:
    """A sample's own timestamp in µs since the epoch, as a float (OpenMetrics writes seconds, the
    text format milliseconds); null when it has none."""
    stamp = pl.col("timestamp").cast(pl.Float64, strict=False)
    return pl.when(pl.col("format") == OPENMETRICS_FORMAT).then(stamp * 1_000_000).otherwise(stamp * 1_000)


def _finish(good: pl.DataFrame, captures: pl.DataFrame, source_file: str) -> pl.DataFrame:
    """The canonical `samples` frame."""
    sample_us = _sample_micros().cast(pl.Int64)
    frame = (good.drop("format").join(captures, on="scrape", how="left")
             .with_columns(
                 pl.from_epoch(sample_us, time_unit="us").dt.replace_time_zone("UTC").alias("sample_ts"),
                 pl.col("label_list").fill_null([]).alias("label_list"),
                 _missing_when_blank(pl.col("value").cast(pl.Float64)).alias("value"),
                 pl.lit(DATA_TYPE).alias("data_type"),
                 pl.lit(source_file).alias("source_file"),
                 pl.col("line").alias("source_line"))
             .with_columns(pl.col("label_list").alias("labels")))
    return frame.select([pl.col(n).cast(d) for n, d in SAMPLES_SCHEMA.items()])


def _scrape_runs(data: bytes | mmap.mmap, chunk_bytes: int) -> list[tuple[int, int]]:
    """(start, end) byte ranges of runs of whole scrapes, each about `chunk_bytes` or one scrape; a
    file of at most twice that is one run (each run costs ~100 polars steps: a 3 MB file read in
    two took 0.28 CPU-s, in one 0.23)."""
    if len(data) <= 2 * chunk_bytes:
        return [(0, len(data))]
    marker = b"\n" + HEADER_PREFIX.encode()
    runs, start = [], 0
    while start < len(data):
        cut = data.find(marker, start + chunk_bytes) if start + chunk_bytes < len(data) else -1
        end = len(data) if cut < 0 else cut + 1
        runs.append((start, end))
        start = end
    return runs or [(0, 0)]


_QUOTED_VALUE = re.compile(rb'"((?:[^"\\\n]|\\.)*)"')


def _not_utf8(raw: bytes, first_line: int) -> dict[int, str]:
    """The lines of `raw` that are not UTF-8, with expfmt's reason (`invalid label value "\xbd"`)."""
    found = {}
    for number, line in enumerate(raw.split(b"\n"), start=first_line):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            value = next((m[1] for m in _QUOTED_VALUE.finditer(line) if m.start() < error.start < m.end()), None)
            found[number] = (f'invalid label value "{value.decode("utf-8", "backslashreplace")}"' if value is not None
                             else f"not UTF-8 at byte {error.start + 1} of the line")
    return found


def parse(path: Path) -> ParseResult:
    """Read one exposition file, a run of scrapes at a time so that memory follows the run, not
    the file (a file of a thousand scrapes holds hundreds of MB)."""
    data, damage = read_whole_lines(path)
    fallback, target = from_path(path), target_of(path)
    results, line, scrape = [], 1, 0
    for start, end in _scrape_runs(data, CHUNK_BYTES):
        raw = bytes(data[start:end])
        try:
            text, not_utf8 = raw.decode("utf-8"), {}
        except UnicodeDecodeError:
            text, not_utf8 = raw.decode("utf-8", "replace"), _not_utf8(raw, line)
        results.append(parse_text(text, str(path), fallback, target, line, scrape, not_utf8))
        release(data, start, end)  # done with these pages: let them leave memory
        line += text.count("\n")
        scrape += text.startswith(HEADER_PREFIX) + text.count("\n" + HEADER_PREFIX)
    if len(results) == 1:
        results[0].damage = damage
        return results[0]
    # rechunk=False: the runs' frames become chunks of one frame, not a second copy of it.
    return ParseResult("samples", pl.concat([r.rows for r in results], rechunk=False),
                       pl.concat([r.quarantine for r in results]),
                       sum(r.records for r in results), parsed_records=sum(r.parsed for r in results), damage=damage)


register(NAME, sniff, parse, module=__name__)
