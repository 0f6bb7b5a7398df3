"""The live source against a real Prometheus: it scrapes an SGLang-shaped endpoint served by
prometheus_client while the test moves its values; `forensics pull` and saved snapshots of the
same endpoint must tell the same story. Plus step, paging and every way a pull fails."""

from __future__ import annotations

import os
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from forensics.case import ingest, load_case
from forensics.lab.sglang_metrics import SGLangMetrics
from forensics.timeline.metrics import restarts, stalled
from forensics.capture.pull import PullError, choose_step, pages, pull
from tests.conftest import free_port

# bcrypt of "test", as in Prometheus's web configuration documentation
WEB_CONFIG = "basic_auth_users:\n  admin: $2b$12$hNf2lSsxfm0.i4a.1kVpSOVyBCfIB51VRjgBUyv6kdnyTlgWj81Ay\n"
PROGRESS = 'sglang:generation_tokens_total{engine_type="decode",model_name="deepseek-ai/DeepSeek-V4-Flash",tp_rank="0"}'


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _consecutive_distinct(values: list[float]) -> list[float]:
    return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]


def test_live_api_and_saved_snapshots_of_one_endpoint_agree(prometheus_server, tmp_path: Path) -> None:
    engine = SGLangMetrics("decode")
    server, _, port = engine.serve()
    try:
        prometheus = prometheus_server({"sglang-decode": [f"127.0.0.1:{port}"]})
        bundle = tmp_path / "bundle"
        snapshots = bundle / "metrics" / str(port)
        snapshots.mkdir(parents=True)
        start = datetime.now(UTC)
        for step in range(9):
            if step == 4:
                engine.stall()  # requests stay pending, tokens stop
            if step == 7:
                engine.restart()
            engine.step()
            time.sleep(1.6)  # at least one Prometheus scrape (every second) sees this state
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                body = answer.read().decode()
            header = f"# capture ts={_iso(datetime.now(UTC))} host=127.0.0.1 port={port}\n"
            (snapshots / f"scrape-{step:02d}.prom").write_text(header + body)
        end = datetime.now(UTC)
        os.environ["FORENSICS_PROMETHEUS_TOKEN"] = "secret-token-never-written"
        try:
            files = pull(prometheus.url, start - timedelta(seconds=2), end, step=0.5, bundle=bundle,
                         metrics=["sglang:generation_tokens_total", "sglang:num_running_reqs",
                                  "process_start_time_seconds"])
        finally:
            del os.environ["FORENSICS_PROMETHEUS_TOKEN"]
    finally:
        server.shutdown()
    assert all("secret-token-never-written" not in f.read_text() for f in files)

    ingest(bundle, tmp_path / "case")
    samples = load_case(tmp_path / "case").samples.with_columns(pl.col(pl.Categorical).cast(pl.String)).collect()
    api = samples.filter(pl.col("format") == "prometheus:api")
    scraped = samples.filter(pl.col("format") == "prometheus:text")
    assert api.height > 0 and scraped.height > 0
    # The same series from both sources. prometheus_client serves Prometheus OpenMetrics with ':'
    # escaped to '_' in sample names (curl gets the text format with ':'), so names are compared
    # the way forensics compares them.
    def key(frame: pl.DataFrame) -> set[str]:
        return set(frame.get_column("series").str.replace_all(":", "_", literal=True).to_list())

    assert key(api) and key(api) <= key(scraped)
    assert api.filter(pl.col("name") == "sglang_generation_tokens_total").get_column("type").unique().to_list() == [
        "counter"]
    # The same history of the progress counter: 1000 tokens a step, flat while stalled, then a reset.
    history = {fmt: _consecutive_distinct(frame.filter(pl.col("series").str.replace_all(":", "_", literal=True)
                                                       == PROGRESS.replace(":", "_")).sort("ts")
                                          .get_column("value").to_list())
               for fmt, frame in (("api", api), ("scraped", scraped))}
    assert history["scraped"] == [2000.0, 3000.0, 4000.0, 5000.0, 1000.0, 2000.0]
    # The API also holds the state before the first snapshot (the pull starts earlier).
    assert history["api"][history["api"].index(2000.0):] == history["scraped"]
    # Both see the stall and the restart.
    # The stall lasts three steps (~5 s): flat runs between two steps (~1.6 s) are not stalls.
    for frame in (api, scraped):
        window = stalled(frame, min_seconds=3)
        assert window.height == 1 and window.row(0, named=True)["pending_peak"] == 8.0
        assert restarts(frame).height == 1
    api_stall, scraped_stall = (stalled(api, min_seconds=3).row(0, named=True),
                                stalled(scraped, min_seconds=3).row(0, named=True))
    assert abs((api_stall["end"] - scraped_stall["end"]).total_seconds()) < 3


def test_pull_errors_name_the_cause(prometheus_server, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    window = (now - timedelta(minutes=5), now)
    with pytest.raises(PullError, match=r"http://127\.0\.0\.1:\d+: cannot reach the Prometheus API: .*refused"):
        pull(f"http://127.0.0.1:{free_port()}", *window, metrics=["up"], bundle=tmp_path)
    plain = prometheus_server({"self": ["127.0.0.1:1"]})
    with pytest.raises(PullError, match=r"query 'rate\(' rejected \(bad_data\): .*parse error"):
        pull(plain.url, *window, queries=["rate("], bundle=tmp_path)
    guarded = prometheus_server({"self": ["127.0.0.1:1"]}, web_config=WEB_CONFIG)
    with pytest.raises(PullError, match=r"authentication failed \(HTTP 401\); set FORENSICS_PROMETHEUS_TOKEN or "
                                        r"FORENSICS_PROMETHEUS_BASIC_AUTH"):
        pull(guarded.url, *window, metrics=["up"], bundle=tmp_path)
    os.environ["FORENSICS_PROMETHEUS_BASIC_AUTH"] = "admin:test"
    try:
        (written,) = pull(guarded.url, *window, metrics=["up"], bundle=tmp_path / "ok")
    finally:
        del os.environ["FORENSICS_PROMETHEUS_BASIC_AUTH"]
    assert "admin:test" not in written.read_text()
    with pytest.raises(PullError, match="nothing to pull"):
        pull(plain.url, *window, bundle=tmp_path)


def test_step_is_chosen_from_the_window_and_long_windows_are_paged() -> None:
    t0 = datetime(2026, 6, 18, 21, 0, tzinfo=UTC)
    assert choose_step(t0, t0 + timedelta(minutes=10)) == 1.0
    assert choose_step(t0, t0 + timedelta(hours=1)) == 5.0
    assert choose_step(t0, t0 + timedelta(days=1)) == 120.0
    with pytest.raises(PullError, match="before it starts"):
        choose_step(t0, t0)
    parts = pages(t0, t0 + timedelta(hours=6), step=1.0)
    assert len(parts) == 2 and parts[0] == (t0, t0 + timedelta(seconds=10_999))
    assert parts[1] == (t0 + timedelta(seconds=11_000), t0 + timedelta(hours=6))


def test_pages_are_joined_into_one_series(prometheus_server, tmp_path: Path, monkeypatch) -> None:
    engine = SGLangMetrics("prefill")
    server, _, port = engine.serve()
    try:
        prometheus = prometheus_server({"sglang-prefill": [f"127.0.0.1:{port}"]})
        time.sleep(3.5)
        end = datetime.now(UTC)
        monkeypatch.setattr("forensics.capture.pull.MAX_POINTS", 3)  # force several pages over a short window
        (path,) = pull(prometheus.url, end - timedelta(seconds=3), end, step=1.0, bundle=tmp_path,
                       queries=['{__name__=~"sglang[:_]num_running_reqs", tp_rank="0"}'])
    finally:
        server.shutdown()
    ingest(tmp_path, tmp_path / "case")
    rows = load_case(tmp_path / "case").samples.with_columns(pl.col(pl.Categorical).cast(pl.String)).collect()
    times = rows.get_column("ts").to_list()
    assert len(times) == 4 and times == sorted(times)
    assert rows.get_column("series").unique().to_list() == [
        'sglang_num_running_reqs{engine_type="prefill",model_name="deepseek-ai/DeepSeek-V4-Flash",tp_rank="0"}']
    assert '"step": 1.0' in path.read_text()
