"""Our exposition reader against Prometheus's own: what `promtool check metrics` rejects as
malformed we quarantine, at the line it names and in the same words; what it accepts, a real
Prometheus server scrapes into exactly the samples we read."""

from __future__ import annotations

import math
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from forensics.sources.prometheus.prometheus_text import parse
from tests.conftest import write_file

ACCEPTED = {
    "counter and gauge": "# HELP a_total A counter.\n# TYPE a_total counter\na_total{x=\"1\"} 3\n"
                         "# TYPE g gauge\ng -1.5e-3\n",
    "escapes": 'e{path="C:\\\\DIR",msg="say \\"hi\\"\\n"} 1\n',
    "histogram": "# TYPE h histogram\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.7\nh_count 2\n",
    "summary": "# TYPE s summary\ns{quantile=\"0.5\"} 0.1\ns{quantile=\"0.99\"} NaN\ns_sum 4\ns_count 9\n",
    "untyped, specials": "u +Inf\nv -Inf\nw NaN\nx 1e308\n",
    "trailing comma, blanks, comments": "\n# a comment\nt{a=\"1\",} 2\n\n   \n",
    "colons": "sglang:num_running_reqs{tp_rank=\"0\"} 8\nsglang:gen_throughput 512.5\n",
    "duplicate-free many labels": "m{a=\"1\",b=\"2\",c=\"3\",d=\"4\"} 5\nm{a=\"1\",b=\"2\",c=\"3\",d=\"5\"} 6\n",
}

MALFORMED = {
    "bad escape": 'a{b="\\q"} 1\n',
    "quantile": "# TYPE s summary\ns{quantile=\"x\"} 1\n",
    "le": "# TYPE h histogram\nh_bucket{le=\"high\"} 1\n",
    "underscore number": "a 1\nb 1_2\n",
    "hex float": "a 0x1p-3\n",
    "word value": "a one\n",
    "float timestamp": "a 1 1.5\n",
    "spurious": "a 1 2 3\n",
    "unknown type": "# TYPE a gauge2\na 1\n",
    "second type": "# TYPE a gauge\n# TYPE a counter\na 1\n",
    "type after samples": "a 1\n# TYPE a gauge\n",
    "second help": "# HELP a x\n# HELP a y\na 1\n",
    "reserved label": 'a{__name__="b"} 1\n',
    "duplicate label": 'a{b="1",b="2"} 1\n',
    "unquoted value": "a{b=1} 1\n",
    "bad name": "1a 1\n",
    "missing value": "a\n",
    "bad label name": 'a{b:c="1"} 1\n',
    "no name": "{} 3.14\n",
    "quoted metric name": '{"a.b"} 1\n',
    "quoted label name": 'a{"b.c"="1"} 1\n',
    "quoted name in TYPE": '# TYPE "a.b" gauge\n',
}
# promtool accepts these though a Prometheus scrape would not take them all (a series twice):
# checked against promtool only.
PROMTOOL_ACCEPTS = {
    "HELP after samples": "a 1\n# HELP a late\n",
    "a series twice": 'a{x="1"} 1\na{x="1"} 3\n',
    "HELP and TYPE with no text": "# HELP\n# HELP \n# HELP a\n# HELP a \n# TYPE a\na 1\n",
    "blanks before comments": " # HELP  a  doc\n  #    TYPE    a gauge\na 1\n",
}


def _promtool(text: str) -> tuple[int, str]:
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    return done.returncode, (done.stdout + done.stderr).strip()


@pytest.mark.parametrize("text", MALFORMED.values(), ids=MALFORMED.keys())
def test_what_promtool_rejects_we_quarantine_at_its_line_in_its_words(tmp_path: Path, text: str) -> None:
    code, said = _promtool(text)
    assert code == 1 and "text format parsing error in line " in said, said
    where, message = said.split("text format parsing error in line ", 1)[1].split(": ", 1)
    result = parse(write_file(tmp_path, "scrape.prom", text))
    result.check_accounting(tmp_path)
    assert (int(where), message) in result.quarantine.select("line", "reason").rows()


@pytest.mark.parametrize("text", [*ACCEPTED.values(), *PROMTOOL_ACCEPTS.values()],
                         ids=[*ACCEPTED.keys(), *PROMTOOL_ACCEPTS.keys()])
def test_promtool_accepts_what_we_read_cleanly(tmp_path: Path, text: str) -> None:
    code, said = _promtool(text)
    assert code in (0, 3), said  # 3: lint advice only (no HELP, counter naming), not a parse error
    result = parse(write_file(tmp_path, "scrape.prom", text))
    assert result.quarantine.height == 0


class _Corpus(BaseHTTPRequestHandler):
    texts: ClassVar[dict[str, str]] = {}

    def do_GET(self) -> None:
        body = self.texts[self.path.strip("/")].encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _value(text: str) -> float:
    return float(text)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_a_real_prometheus_scrapes_the_samples_we_read(prometheus_server, tmp_path: Path) -> None:
    jobs = {f"case{n}": text for n, text in enumerate(ACCEPTED.values())}
    _Corpus.texts = jobs
    http = ThreadingHTTPServer(("127.0.0.1", 0), _Corpus)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        prometheus = prometheus_server({job: [f"127.0.0.1:{http.server_port}"] for job in jobs},
                                       metrics_paths={job: f"/{job}" for job in jobs})
        time.sleep(1.5)
        for job, text in jobs.items():
            stored = {}
            for item in prometheus.query(f'{{job="{job}"}}'):
                labels = dict(item["metric"])
                name = labels.pop("__name__")
                if name == "up" or name.startswith("scrape_"):
                    continue
                labels.pop("job"), labels.pop("instance")
                stored[(name, tuple(sorted(labels.items())))] = _value(item["value"][1])
            ours = {(r["name"], tuple((label["name"], label["value"]) for label in r["labels"])): r["value"]
                    for r in parse(write_file(tmp_path, f"{job}.prom", text)).rows.iter_rows(named=True)}
            assert stored.keys() == ours.keys(), job
            assert all(_same(stored[k], ours[k]) for k in ours), job
    finally:
        http.shutdown()
