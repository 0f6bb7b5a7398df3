"""Derived series from scrapes: rates across resets, restarts with their brackets, histogram
quantiles per interval, gauge steps and stalled windows."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from forensics.timeline.metrics import (
    counter_rates,
    gauge_steps,
    histogram_quantiles,
    label,
    named,
    restarts,
    stalled,
)
from forensics.sources.prometheus.prometheus_text import parse
from tests.conftest import write_file


def scrapes(tmp_path: Path, states: list[dict[str, float]], every_s: int = 15) -> pl.DataFrame:
    """Scrapes of a decode engine, one per state, `every_s` seconds apart from 21:30:00 UTC."""
    text = []
    for n, state in enumerate(states):
        minute, second = divmod(n * every_s, 60)
        text.append(f"# capture ts=2026-06-18T21:{30 + minute:02d}:{second:02d}Z host=gpu-node-00 port=30002\n"
                    "# TYPE sglang:generation_tokens counter\n"
                    f'sglang:generation_tokens_total{{tp_rank="0"}} {state["tokens"]}\n'
                    "# TYPE sglang:num_running_reqs gauge\n"
                    f'sglang:num_running_reqs{{tp_rank="0"}} {state["running"]}\n'
                    "# TYPE process_start_time_seconds gauge\n"
                    f"process_start_time_seconds {state['started']}\n"
                    "# TYPE lat histogram\n"
                    f'lat_bucket{{le="0.1"}} {state["b1"]}\nlat_bucket{{le="1"}} {state["b2"]}\n'
                    f'lat_bucket{{le="+Inf"}} {state["b3"]}\nlat_sum 1\nlat_count {state["b3"]}\n')
    result = parse(write_file(tmp_path, "decode.prom", "".join(text)))
    assert result.quarantine.height == 0
    return result.rows


START = 1781810000.0
RUN = [  # tokens flow, then stop while 8 requests wait, then a restart at 21:31:20
    {"tokens": 0, "running": 4, "started": START, "b1": 0, "b2": 0, "b3": 0},
    {"tokens": 1500, "running": 4, "started": START, "b1": 10, "b2": 90, "b3": 100},
    {"tokens": 3000, "running": 8, "started": START, "b1": 10, "b2": 90, "b3": 100},
    {"tokens": 3000, "running": 8, "started": START, "b1": 10, "b2": 90, "b3": 100},
    {"tokens": 3000, "running": 8, "started": START, "b1": 10, "b2": 90, "b3": 100},
    {"tokens": 3000, "running": 8, "started": START, "b1": 10, "b2": 90, "b3": 100},
    {"tokens": 600, "running": 2, "started": 1781810480.0, "b1": 5, "b2": 5, "b3": 5},
]


def test_rates_and_resets(tmp_path: Path) -> None:
    rates = counter_rates(scrapes(tmp_path, RUN)).filter(pl.col("name") == "sglang:generation_tokens_total")
    assert rates.select("increase", "rate", "reset").rows() == [
        (1500.0, 100.0, False), (1500.0, 100.0, False), (0.0, 0.0, False), (0.0, 0.0, False), (0.0, 0.0, False),
        (600.0, 40.0, True)]


def test_restart_bracket_and_start_time(tmp_path: Path) -> None:
    (restart,) = restarts(scrapes(tmp_path, RUN)).iter_rows(named=True)
    assert (restart["after"].strftime("%H:%M:%S"), restart["before"].strftime("%H:%M:%S")) == ("21:31:15", "21:31:30")
    assert restart["started_at"] == datetime.fromtimestamp(1781810480, UTC)
    assert restart["evidence"].startswith("5 counter series went down")  # tokens, 3 buckets, count
    assert "process_start_time_seconds changed from 2026-06-18 19:13:20 UTC to 2026-06-18 19:21:20 UTC (process start times)" in restart["evidence"]


def test_stalled_window_needs_pending_work_and_enough_time(tmp_path: Path) -> None:
    rows = scrapes(tmp_path, RUN)
    (window,) = stalled(rows).iter_rows(named=True)
    assert (window["start"].strftime("%H:%M:%S"), window["end"].strftime("%H:%M:%S")) == ("21:30:30", "21:31:15")
    assert (window["intervals"], window["pending_peak"]) == (3, 8.0)
    assert stalled(rows, min_seconds=60).height == 0
    idle = [{**state, "running": 0} for state in RUN]
    assert stalled(scrapes(tmp_path, idle)).height == 0  # nothing pending: idle, not stalled


def test_histogram_quantile_per_interval(tmp_path: Path) -> None:
    quantiles = histogram_quantiles(scrapes(tmp_path, RUN), 0.5).filter(pl.col("family") == "lat")
    first = quantiles.row(0, named=True)
    # 100 observations: 10 under 0.1 s, 80 in (0.1, 1]: the median is 40/80 of the way into (0.1, 1].
    assert first["observations"] == 100 and first["value"] == pytest.approx(0.1 + 0.9 * 40 / 80)
    assert quantiles.get_column("value").to_list()[1] is None  # nothing observed in the second interval
    with pytest.raises(ValueError, match="outside"):
        histogram_quantiles(scrapes(tmp_path, RUN), 1.5)


def test_gauges_are_steps(tmp_path: Path) -> None:
    steps = gauge_steps(scrapes(tmp_path, RUN)).filter(pl.col("name") == "sglang:num_running_reqs")
    assert steps.height == len(RUN)
    assert steps.row(0, named=True)["until"] == steps.row(1, named=True)["from"]
    assert steps.row(-1, named=True)["until"] is None


def test_a_label_as_a_column(tmp_path: Path) -> None:
    rows = scrapes(tmp_path, RUN[:1]).with_columns(label("tp_rank"), label("le"))
    by_name = {r["name"]: (r["tp_rank"], r["le"]) for r in rows.iter_rows(named=True)}
    assert by_name["sglang:num_running_reqs"] == ("0", None)
    assert by_name["process_start_time_seconds"] == (None, None)
    assert rows.filter(pl.col("le") == "+Inf").height == 1


@pytest.mark.parametrize("q, expected", [(0.05, 0.05), (0.5, 0.55), (0.9, 1.0), (0.95, 1.0), (0.0, 0.0)])
def test_histogram_quantile_in_each_kind_of_bucket(tmp_path: Path, q: float, expected: float) -> None:
    # first interval: 10 observations <= 0.1, 80 in (0.1, 1], 10 above 1
    first = histogram_quantiles(scrapes(tmp_path, RUN[:2]), q).filter(pl.col("family") == "lat").row(0, named=True)
    assert first["value"] == pytest.approx(expected)


# The rule `named` keeps (promtext.name_key's docstring): a colon in a metric name reads as an
# underscore, as prometheus_client writes colons for curl and escapes them for Prometheus.
NAMES = ["sglang:num_running_reqs", "sglang_num_running_reqs", "sglang:num:running:reqs", "sglang_num_running",
         "xsglang_num_running_reqs", "sglang__num_running_reqs", "a_b_c_d_e_f_g_h_i_j_k_l", "a:b_c_d_e_f_g_h_i_j_k:l"]


@pytest.mark.parametrize("asked", [["sglang_num_running_reqs"], ["sglang:num_running_reqs", "sglang_num_running"],
                                   ["a_b_c_d_e_f_g_h_i_j_k_l"], ["nothing"]])
@pytest.mark.parametrize("dtype", [pl.String, pl.Categorical])
def test_named_reads_a_colon_as_an_underscore(asked: list[str], dtype: pl.DataType) -> None:
    frame = pl.DataFrame({"name": NAMES}, schema={"name": dtype})
    expected = [n for n in NAMES if n.replace(":", "_") in {a.replace(":", "_") for a in asked}]
    assert frame.filter(named(asked)).get_column("name").cast(pl.String).to_list() == expected
