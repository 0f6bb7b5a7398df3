"""Pull the incident window from a Prometheus-compatible HTTP API into the bundle.

`forensics pull URL --start … --end … (--query Q | --metric NAME)…` calls `/api/v1/query_range`
(Prometheus, Thanos, Mimir, VictoriaMetrics all answer it) for each query, or for all series of
each metric name (a name with `:` also under its `_` spelling, the one Prometheus stores when
prometheus_client escapes names in the OpenMetrics it serves), and writes each answer into `BUNDLE/metrics/api/` as a JSON file that keeps
the API's own response beside what was asked (URL, query, window, step) and the metric metadata
(`/api/v1/metadata`: type, help, unit). `forensics ingest` then reads it into the same `samples`
frame as saved scrapes (`forensics.sources.prometheus.prometheus_api`).

The step is chosen from the window (about 1,000 points, never under 1 s, a round value) unless
given; a window longer than the server's 11,000-points-per-series limit is fetched in pages and
joined. Credentials come from the environment only and are never written: a bearer token in
`FORENSICS_PROMETHEUS_TOKEN`, or `user:password` for basic auth in `FORENSICS_PROMETHEUS_BASIC_AUTH`.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from forensics.capture.http import Failure, fetch
from forensics.errors import ForensicsError
from forensics.sources.prometheus.promtext import name_key

TOKEN_ENV = "FORENSICS_PROMETHEUS_TOKEN"
BASIC_AUTH_ENV = "FORENSICS_PROMETHEUS_BASIC_AUTH"
MAX_POINTS = 11_000  # Prometheus refuses a range query that would return more points per series
TARGET_POINTS = 1_000
NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)
TIMEOUT_S = 30.0  # one request, whole
MAX_ANSWER = 512 * 1024 * 1024  # one range query's JSON


class PullError(ForensicsError):
    """The API could not be reached, refused the credentials, or rejected a query."""


def choose_step(start: datetime, end: datetime) -> float:
    """A round step giving about `TARGET_POINTS` points over the window."""
    seconds = (end - start).total_seconds()
    if seconds <= 0:
        raise PullError(f"the window ends ({end.isoformat()}) before it starts ({start.isoformat()})")
    wanted = seconds / TARGET_POINTS
    return float(next((s for s in NICE_STEPS if s >= wanted), math.ceil(wanted)))


def pages(start: datetime, end: datetime, step: float, max_points: int = MAX_POINTS) -> list[tuple[datetime, datetime]]:
    """Sub-windows of at most `max_points` points each, covering [start, end] on the step grid."""
    span = timedelta(seconds=step * (max_points - 1))
    out = []
    at = start
    while at <= end:
        stop = min(at + span, end)
        out.append((at, stop))
        at = stop + timedelta(seconds=step)
    return out


def _headers() -> dict[str, str]:
    token = os.environ.get(TOKEN_ENV)
    if token:
        return {"Authorization": f"Bearer {token}"}
    basic = os.environ.get(BASIC_AUTH_ENV)
    if basic:
        return {"Authorization": "Basic " + base64.b64encode(basic.encode()).decode()}
    return {}


def _get(base: str, path: str, params: dict[str, str]) -> dict[str, Any]:
    url = f"{base.rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
    answer = fetch(url, headers={"Accept": "application/json", **_headers()}, deadline_s=TIMEOUT_S, max_bytes=MAX_ANSWER)
    if isinstance(answer, Failure):
        if answer.status is None:
            raise PullError(f"{base}: cannot reach the Prometheus API: {answer.why}")
        body = answer.body.decode(errors="replace")
        if answer.status in (401, 403):
            raise PullError(f"{base}: authentication failed (HTTP {answer.status}); set {TOKEN_ENV} or "
                            f"{BASIC_AUTH_ENV} for this server")
        try:
            detail = json.loads(body)
        except json.JSONDecodeError:
            detail = {"error": body.strip()[:200] or answer.why}
        if answer.status in (400, 422):
            raise PullError(f"{base}: query {params.get('query', '')!r} rejected "
                            f"({detail.get('errorType', 'bad request')}): {detail.get('error', '')}")
        raise PullError(f"{base}{path}: HTTP {answer.status}: {detail.get('error', answer.why)}")
    try:
        return json.loads(answer.body)
    except json.JSONDecodeError:
        raise PullError(f"{base}{path}: the answer is not JSON (is this a Prometheus API?)") from None


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def query_range(base: str, query: str, start: datetime, end: datetime, step: float) -> list[dict[str, Any]]:
    """All series of one range query over the window, pages joined (each series' points in order)."""
    series: dict[str, dict[str, Any]] = {}
    for page_start, page_end in pages(start, end, step):
        answer = _get(base, "/api/v1/query_range", {"query": query, "start": _iso(page_start),
                                                      "end": _iso(page_end), "step": f"{step:g}"})
        if answer.get("status") != "success":
            raise PullError(f"{base}: query {query!r} failed: {answer.get('error', answer)}")
        data = answer.get("data", {})
        if data.get("resultType") != "matrix":
            raise PullError(f"{base}: query {query!r} returned {data.get('resultType')}, expected a matrix")
        for item in data.get("result", []):
            key = json.dumps(item["metric"], sort_keys=True)
            series.setdefault(key, {"metric": item["metric"], "values": []})["values"].extend(item["values"])
    return list(series.values())


def metadata(base: str, names: list[str]) -> dict[str, list[dict[str, str]]]:
    """`/api/v1/metadata` (type, help, unit) of these metric families. Asked once for all families
    and matched with `:` read as `_`, since the stored names may be the escaped spellings."""
    wanted = {name_key(n) for n in names}
    everything = _get(base, "/api/v1/metadata", {}).get("data", {})
    return {family: entries for family, entries in everything.items() if name_key(family) in wanted}


def _families(names: list[str]) -> list[str]:
    """The family names a set of sample names may belong to (with and without their suffixes)."""
    out = set(names)
    for name in names:
        out.add(re.sub(r"(_total|_created|_bucket|_count|_sum|_info|_gcount|_gsum)$", "", name))
    return sorted(out)


def metric_selector(name: str) -> str:
    """All series of a metric name, also under the name prometheus_client serves to Prometheus
    (OpenMetrics with `escaping=underscores` turns `sglang:x` into `sglang_x`)."""
    if ":" not in name:
        return name
    spellings = "|".join(re.escape(n) for n in (name, name.replace(":", "_")))
    return f'{{__name__=~"{spellings}"}}'


def pull(base: str, start: datetime, end: datetime, *, queries: list[str] | None = None,
         metrics: list[str] | None = None, step: float | None = None, bundle: Path = Path(".")) -> list[Path]:
    """Pull each query (and each metric name's series) into `bundle/metrics/api/`; returns the files."""
    asked = [*(queries or []), *(metric_selector(m) for m in (metrics or []))]
    if not asked:
        raise PullError("nothing to pull: give --query or --metric")
    step = step or choose_step(start, end)
    out_dir = bundle / "metrics" / "api"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for number, query in enumerate(asked, start=1):
        result = query_range(base, query, start, end, step)
        names = [r["metric"].get("__name__", "") for r in result]
        document = {
            "forensics_pull": {"url": base, "query": query, "start": _iso(start), "end": _iso(end), "step": step,
                               "pulled_at": _iso(datetime.now(UTC)), "points": sum(len(r["values"]) for r in result)},
            "metadata": metadata(base, _families([n for n in names if n])),
            "status": "success",
            "data": {"resultType": "matrix", "result": result},
        }
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", query).strip("_")[:80] or "query"
        path = out_dir / f"{number:02d}-{slug}.json"
        path.write_text(json.dumps(document, indent=1) + "\n")
        written.append(path)
    return written
