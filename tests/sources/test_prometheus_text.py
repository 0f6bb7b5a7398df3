"""Prometheus text 0.0.4 and OpenMetrics 1.0 scrapes: every construct of the specs, capture time
and target, and bad input with exact messages while the rest of the scrape loads."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from forensics import sources
from forensics.sources.prometheus.prometheus_text import parse
from tests.conftest import write_file

HEADER = "# capture ts=2026-06-18T21:40:10Z host=gpu-node-00 port=30002\n"


def _parse(tmp_path: Path, text: str, name: str = "scrape.prom"):
    result = parse(write_file(tmp_path, name, text))
    result.check_accounting(tmp_path)
    return result


def _samples(result) -> list[tuple]:
    return result.rows.select("family", "name", "type", "series", "value").rows()


def test_prometheus_text_format_constructs(tmp_path: Path) -> None:
    text = HEADER + r"""# HELP http_requests_total The total number of HTTP requests.
# TYPE http_requests_total counter
http_requests_total{method="post",code="200"} 1027 1395066363000
http_requests_total{method="post",code="400"}    3 1395066363000

# Escaping in label values:
msdos_file_access_time_seconds{path="C:\\DIR\\FILE.TXT",error="Cannot find file:\n\"FILE.TXT\""} 1.458255915e9

# Minimalistic line:
metric_without_timestamp_and_labels 12.47

# A weird metric from before the epoch:
something_weird{problem="division by zero"} +Inf -3982045

# A histogram, which has a pretty complex representation in the text format:
# HELP http_request_duration_seconds A histogram of the request duration.
# TYPE http_request_duration_seconds histogram
http_request_duration_seconds_bucket{le="0.05"} 24054
http_request_duration_seconds_bucket{le="+Inf"} 144320
http_request_duration_seconds_sum 53423
http_request_duration_seconds_count 144320

# Finally a summary, which has a complex representation, too:
# HELP rpc_duration_seconds A summary of the RPC duration in seconds.
# TYPE rpc_duration_seconds summary
rpc_duration_seconds{quantile="0.01"} 3102
rpc_duration_seconds{quantile="0.99"} 76656
rpc_duration_seconds_sum 1.7560473e+07
rpc_duration_seconds_count 2693
sglang:gen_throughput{tp_rank="0"} NaN
sglang:token_usage{tp_rank="0",} -Inf
"""
    result = _parse(tmp_path, text)
    assert result.quarantine.height == 0
    assert result.records == 26 and result.parsed == 26  # 15 samples, 6 metadata lines, 5 comments
    rows = {r["series"]: r for r in result.rows.iter_rows(named=True)}
    assert rows['http_requests_total{code="400",method="post"}']["value"] == 3
    assert rows['http_requests_total{code="400",method="post"}']["sample_ts"].isoformat() == \
        "2014-03-17T14:26:03+00:00"
    assert rows['http_requests_total{code="400",method="post"}']["type"] == "counter"
    labels = rows['msdos_file_access_time_seconds{error="Cannot find file:\\n\\"FILE.TXT\\"",'
                  'path="C:\\\\DIR\\\\FILE.TXT"}']["labels"]
    assert labels == [{"name": "error", "value": 'Cannot find file:\n"FILE.TXT"'},
                      {"name": "path", "value": "C:\\DIR\\FILE.TXT"}]
    assert rows['something_weird{problem="division by zero"}']["value"] == math.inf
    assert rows['something_weird{problem="division by zero"}']["sample_ts"].year == 1969
    assert math.isnan(rows['sglang:gen_throughput{tp_rank="0"}']["value"])
    assert rows['sglang:token_usage{tp_rank="0"}']["value"] == -math.inf
    histogram = result.rows.filter(pl.col("family") == "http_request_duration_seconds")
    assert histogram.select("name", "type").unique(maintain_order=True).rows() == [
        ("http_request_duration_seconds_bucket", "histogram"), ("http_request_duration_seconds_sum", "histogram"),
        ("http_request_duration_seconds_count", "histogram")]
    assert rows["rpc_duration_seconds_count"]["family"] == "rpc_duration_seconds"
    assert rows["rpc_duration_seconds_count"]["help"] == "A summary of the RPC duration in seconds."
    assert rows["metric_without_timestamp_and_labels"]["type"] == "untyped"
    first = result.rows.row(0, named=True)
    assert (first["ts"].isoformat(), first["ts_source"], first["instance"], first["host"], first["port"]) == (
        "2026-06-18T21:40:10+00:00", "header", "gpu-node-00:30002", "gpu-node-00", 30002)
    assert first["format"] == "prometheus:text" and first["source_line"] == 4


def test_openmetrics_constructs(tmp_path: Path) -> None:
    text = """# TYPE acme_http_router_request_seconds summary
# UNIT acme_http_router_request_seconds seconds
# HELP acme_http_router_request_seconds Latency though all of ACME's HTTP request router.
acme_http_router_request_seconds_sum{path="/api/v1",method="GET"} 9036.32
acme_http_router_request_seconds_count{path="/api/v1",method="GET"} 807283.0
acme_http_router_request_seconds_created{path="/api/v1",method="GET"} 1605281325.0
# TYPE go_goroutines gauge
go_goroutines 69 1605281325.5
# TYPE process_cpu_seconds counter
# UNIT process_cpu_seconds seconds
process_cpu_seconds_total 4.20072246e+06
# TYPE foo histogram
foo_bucket{le="0.01"} 0
foo_bucket{le="1.0"} 2 # {trace_id="KOO5S4vxi0o"} 0.67 1605281325.1
foo_bucket{le="+Inf"} 17
foo_count 17
foo_sum 324789.3
# TYPE gh gaugehistogram
gh_bucket{le="+Inf"} 3
gh_gcount 3
gh_gsum 2
# TYPE build info
build_info{version="1.2.3"} 1
# TYPE state stateset
state{state="a"} 1
state{state="b"} 0
# TYPE mystery unknown
mystery 1
{"my.dotted.metric", "le.label"="x"} 7
# EOF
"""
    result = _parse(tmp_path, text)
    assert result.quarantine.height == 0, result.quarantine.rows()
    rows = {r["series"]: r for r in result.rows.iter_rows(named=True)}
    assert rows["process_cpu_seconds_total"]["family"] == "process_cpu_seconds"
    assert rows["process_cpu_seconds_total"]["type"] == "counter"
    assert rows["process_cpu_seconds_total"]["unit"] == "seconds"
    assert rows['acme_http_router_request_seconds_created{method="GET",path="/api/v1"}']["family"] == \
        "acme_http_router_request_seconds"
    assert rows["go_goroutines"]["sample_ts"].isoformat() == "2020-11-13T15:28:45.500000+00:00"
    assert rows['foo_bucket{le="1.0"}']["exemplar"] == '{trace_id="KOO5S4vxi0o"} 0.67 1605281325.1'
    assert (rows["gh_gcount"]["family"], rows["gh_gcount"]["type"]) == ("gh", "gaugehistogram")
    assert (rows['build_info{version="1.2.3"}']["family"], rows['build_info{version="1.2.3"}']["type"]) == (
        "build", "info")
    assert rows['state{state="b"}']["type"] == "stateset"
    assert rows["mystery"]["type"] == "unknown"
    assert rows['my.dotted.metric{le.label="x"}']["value"] == 7
    assert result.rows.get_column("format").unique().to_list() == ["openmetrics:text"]


def test_many_scrapes_in_one_file_each_after_its_header(tmp_path: Path) -> None:
    scrape = "# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total 1\n"
    text = "".join(HEADER.replace("21:40:10", f"21:40:{s:02d}") + scrape.replace(" 1\n", f" {s}\n")
                   for s in (10, 20, 30))
    rows = _parse(tmp_path, text).rows
    assert rows.select(pl.col("ts").dt.second(), "value", "scrape").rows() == [(10, 10.0, 1), (20, 20.0, 2),
                                                                             (30, 30.0, 3)]


@pytest.mark.parametrize("run_bytes", [64, 200, 1 << 20])
def test_a_file_read_in_runs_of_scrapes_is_read_as_whole(tmp_path: Path, monkeypatch, run_bytes: int) -> None:
    """Runs cut at scrape headers (a small file is one run) give every sample with its scrape's
    time, number and line, as the specs' reading of the whole file does."""
    from forensics.sources.prometheus import prometheus_text

    scrape = "# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total 1\nbad line\n"
    text = "".join(HEADER.replace("21:40:10", f"21:40:{s:02d}") + scrape.replace(" 1\n", f" {s}\n")
                   for s in range(10, 40))
    monkeypatch.setattr(prometheus_text, "CHUNK_BYTES", run_bytes)
    result = _parse(tmp_path, text)
    # 30 scrapes of 4 lines: the sample on each scrape's 3rd line, the bad line quarantined at its 4th
    assert result.rows.select(pl.col("ts").dt.second(), "value", "scrape", "source_line").rows() == [
        (s, float(s), s - 9, 4 * (s - 10) + 3) for s in range(10, 40)]
    assert result.quarantine.get_column("line").to_list() == [4 * n + 4 for n in range(30)]


def test_time_and_target_from_the_bundle_layout(tmp_path: Path) -> None:
    folder = tmp_path / "metrics" / "gpu-node-01_30000"
    folder.mkdir(parents=True)
    named = _parse(folder, "up 1\n", "2026-06-18T21-39-07Z.prom").rows.row(0, named=True)
    assert (named["ts"].isoformat(), named["ts_source"], named["ts_confidence"]) == (
        "2026-06-18T21:39:07+00:00", "file name", "high")
    assert (named["instance"], named["host"], named["port"]) == ("gpu-node-01:30000", "gpu-node-01", 30000)
    plain = _parse(tmp_path / "metrics" / "gpu-node-01_30000", "up 1\n", "curl.out").rows.row(0, named=True)
    assert (plain["ts_source"], plain["ts_confidence"]) == ("file mtime", "low")


BAD_LINES = [
    ('rpc{quantile="x"} 1', "summary", "expected float as value for 'quantile' label, got \"x\""),
    ('h_bucket{le="big"} 1', "histogram", "expected float as value for 'le' label, got \"big\""),
    ('a{b="\\q"} 1', None, "invalid escape sequence '\\q'"),
    ('a{b="x} 1', None, 'label value "x} 1" contains unescaped new-line'),
    ("a{b=x} 1", None, "expected '\"' at start of label value, found 'x'"),
    ('a{b="1",b="2"} 1', None, 'duplicate label names for metric "a"'),
    ('a{__name__="b"} 1', None, 'label name "__name__" is reserved'),
    ('a{b:c="1"} 1', None, "expected '=' after label name, found ':'"),
    ("a", None, 'expected float as value, got ""'),
    ("a{}", None, 'expected float as value, got ""'),
    ("a 1_2", None, 'expected float as value, got "1_2"'),
    ("a 0x1p-3", None, 'expected float as value, got "0x1p-3"'),
    ("a one", None, 'expected float as value, got "one"'),
    ("a 1 1.5", None, 'expected integer as timestamp, got "1.5"'),
    ("a 1 2 3", None, 'spurious string after timestamp: " 3"'),
    ("1a 1", None, "invalid metric name"),
    ("a{b=\"1\"}x 1", None, 'expected float as value, got "x"'),
]


@pytest.mark.parametrize("line, family_type, message", BAD_LINES, ids=[b[0] for b in BAD_LINES])
def test_bad_sample_lines_are_quarantined_with_expfmt_words(tmp_path: Path, line: str, family_type: str | None,
                                                            message: str) -> None:
    family = line.split("{")[0].split(" ")[0].removesuffix("_bucket")
    typed = f"# TYPE {family} {family_type}\n" if family_type else ""
    text = f"good 1\n{typed}{line}\nalso_good 2\n"
    result = _parse(tmp_path, text)
    assert result.quarantine.select("line", "reason").rows() == [(2 + bool(typed), message)]
    assert result.rows.get_column("name").to_list() == ["good", "also_good"]


BAD_FILES = [
    ("second TYPE", "# TYPE a gauge\n# TYPE a counter\na 1\n",
     [(2, 'second TYPE line for metric name "a", or TYPE reported after samples')]),
    ("TYPE after samples", "a 1\n# TYPE a gauge\n",
     [(2, 'second TYPE line for metric name "a", or TYPE reported after samples')]),
    ("unknown TYPE", "# TYPE a gauge2\na 1\n", [(1, 'unknown metric type "gauge2"')]),
    ("second HELP", "# HELP a one\n# HELP a two\na 1\n", [(2, 'second HELP line for metric name "a"')]),
    ("bad HELP escape", "# HELP a bad \\t escape\na 1\n", [(1, "invalid escape sequence '\\t'")]),
    ("truncated scrape", "a 1\nb 2", [(2, "scrape cut short: the last line has no newline")]),
    ("OpenMetrics: a comment", "a 1\n# just a note\n# EOF\n", [(2, "OpenMetrics allows no comments")]),
    ("OpenMetrics: after EOF", "a 1\n# EOF\n# HELP a x\nb 2\n",
     [(3, "content after '# EOF'"), (4, "content after '# EOF'")]),
    ("HTML error page", "<html><head><title>502 Bad Gateway</title></head></html>\n",
     [(1, "an HTML page, not a metrics exposition (502 Bad Gateway)")]),
]


@pytest.mark.parametrize("text", ["a 1\n# HELP a late\n", 'a{x="1"} 1\na{x="2"} 2\na{x="1"} 3\n',
                                  "# HELP\n# HELP \n# HELP a\n# HELP a \n# TYPE a\na 1\n"],
                         ids=["HELP after samples", "a series written twice", "HELP and TYPE with no text"])
def test_what_promtool_accepts_loads_whole(tmp_path: Path, text: str) -> None:
    result = _parse(tmp_path, text)
    assert result.quarantine.height == 0 and result.parsed == result.records
    assert result.rows.height == text.count(" 1\n") + text.count(" 2\n") + text.count(" 3\n")


@pytest.mark.parametrize("text", ["", HEADER], ids=["empty file", "only a header"])
def test_an_empty_scrape_is_said_not_quarantined(tmp_path: Path, text: str) -> None:
    result = _parse(tmp_path, text)
    assert (result.records, result.quarantine.height) == (0, 0)
    assert result.notes == ["empty: no samples and no metadata (the endpoint answered nothing?)"]


@pytest.mark.parametrize("text, expected", [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES])
def test_bad_scrapes(tmp_path: Path, text: str, expected: list[tuple[int, str]]) -> None:
    result = _parse(tmp_path, text)
    assert result.quarantine.select("line", "reason").rows() == expected


def test_sniffing_takes_expositions_and_anything_in_a_metrics_folder(tmp_path: Path) -> None:
    assert sources.detect(write_file(tmp_path, "scrape.txt", HEADER + "# HELP a x\na 1\n")).name == "prometheus_text"
    assert sources.detect(write_file(tmp_path, "bare.txt", "up 1\n")).name == "prometheus_text"
    (tmp_path / "metrics").mkdir()
    assert sources.detect(write_file(tmp_path / "metrics", "error.html", "<html></html>")).name == "prometheus_text"
    with pytest.raises(sources.WrongFormat):
        sources.detect(write_file(tmp_path, "notes.txt", "restarted at 21:40\n"))
    pyspy = "Process 12: sglang::scheduler_TP0\nPython v3.11.7 (/usr/bin/python3)\n\nThread 12 (idle)\n"
    assert sources.detect(write_file(tmp_path, "dump.txt", pyspy)).name == "pyspy_text"


def test_randomly_damaged_scrapes_never_lose_a_line(tmp_path: Path) -> None:
    import random

    from forensics.lab.sglang_metrics import SGLangMetrics
    clean = SGLangMetrics().exposition()
    rng = random.Random(7)
    for case in range(150):
        damaged = list(clean)
        for _ in range(rng.randint(1, 12)):
            at = rng.randrange(len(damaged))
            damaged[at] = rng.choice(['"', "{", "}", "\\", " ", "\n", "#", "=", ",", "x", "1", "\t", "é"])
        text = "".join(damaged)[: rng.randint(len(clean) // 2, len(clean))]
        result = parse(write_file(tmp_path, f"d{case}.prom", text))
        result.check_accounting(tmp_path)  # records seen = parsed + quarantined
        assert result.rows.height <= result.parsed
