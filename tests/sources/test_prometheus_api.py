"""Saved range-query answers: points in bulk, labels per series, bad points quarantined."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from forensics.sources.prometheus.prometheus_api import parse
from tests.conftest import write_file


def test_points_metadata_and_bad_points(tmp_path: Path) -> None:
    answer = {
        "metadata": {"sglang:generation_tokens": [{"type": "counter", "help": "Tokens.", "unit": ""}]},
        "status": "success",
        "data": {"resultType": "matrix", "result": [
            {"metric": {"__name__": "sglang_generation_tokens_total", "instance": "gpu-node-00:30002", "job": "d",
                        "tp_rank": "0"},
             "values": [[1781818487.5, "1000"], [1781818488, "NaN"], [1781818489, "lots"], [1781818490]]},
            {"metric": {"__name__": "up", "instance": "gpu-node-00:30002", "job": "d"},
             "values": [[1781818487.5, "1"]]},
        ]}}
    result = parse(write_file(tmp_path, "answer.json", json.dumps(answer)))
    result.check_accounting(tmp_path)
    assert (result.records, result.parsed) == (5, 3)
    rows = result.rows.with_columns(pl.col(pl.Categorical).cast(pl.String))
    first = rows.row(0, named=True)
    assert (first["family"], first["type"], first["help"], first["instance"], first["port"]) == (
        "sglang_generation_tokens", "counter", "Tokens.", "gpu-node-00:30002", 30002)
    assert first["series"] == 'sglang_generation_tokens_total{tp_rank="0"}'
    assert first["ts"].isoformat() == "2026-06-18T21:34:47.500000+00:00" and first["value"] == 1000
    assert rows.get_column("name").to_list() == ["sglang_generation_tokens_total"] * 2 + ["up"]
    assert result.quarantine.get_column("reason").to_list() == [
        'series 0 point 2: expected [time, "float"], got 1781818489, lots',
        'series 0 point 3: expected [time, "float"], got 1781818490']


def test_not_an_answer_is_one_quarantined_record(tmp_path: Path) -> None:
    result = parse(write_file(tmp_path, "x.json", '{"resultType": "vector"'))
    assert (result.records, result.quarantine.height) == (1, 1)
    assert result.quarantine.get_column("reason").item().startswith("not a range-query answer:")
