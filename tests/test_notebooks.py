"""Notebooks people extend: a cell after the report adds a metric panel and a pandas query; the
case and the analysis' frames as pandas with the right dtypes and the same values as polars; every
section reads as text where HTML cannot be shown."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pandas as pd
import polars as pl
import pytest
from nbformat.v4 import new_code_cell

from forensics.case import load_case, to_pandas
from forensics.render.sections import Html, ReportSession
from forensics.report import execute, notebook_path
from tests.test_report import REFERENCE

EXTRA_CELL = """
import json
from IPython.display import JSON
fig = session.add_panel("KV usage", gauges=["sglang:token_usage"])
fig = session.mark("NCCL", pl.col("message").str.contains("NCCL"))
figure = fig.fig
events = session.frames("pandas")["events"]
per_minute = events.set_index("ts").resample("1min")["message"].count()
JSON({"panel": "KV usage" in [a.text for a in figure.layout.annotations],
      "marked": [t.name for t in figure.data if (t.name or "").startswith("mark")],
      "busiest_minute": str(per_minute.idxmax()), "lines": int(per_minute.sum()),
      "ts_dtype": str(events["ts"].dtype)}, metadata={"extra": True})
"""


def test_a_cell_after_the_report_adds_a_panel_and_a_pandas_query(tmp_path: Path) -> None:
    nb = nbformat.read(notebook_path(), as_version=4)
    nb.cells.append(new_code_cell(EXTRA_CELL))
    extended = tmp_path / "extended.ipynb"
    nbformat.write(nb, extended)
    out = execute(extended, tmp_path / "ran.ipynb", {"bundle": str(REFERENCE), "out_dir": str(tmp_path / "out")},
                  progress=False)
    ran = nbformat.read(out, as_version=4)
    (result,) = [o["data"]["application/json"] for c in ran.cells for o in c.get("outputs", [])
                 if o.get("metadata", {}).get("extra") or o.get("metadata", {}).get("application/json", {}).get("extra")]
    assert result["panel"] and result["marked"] == ["mark: NCCL"]
    assert result["ts_dtype"] == "datetime64[us, UTC]" and result["lines"] == 10467


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> ReportSession:
    return ReportSession.open(REFERENCE, tmp_path_factory.mktemp("session"))


def test_to_pandas_keeps_dtypes_and_values(session: ReportSession) -> None:
    case = load_case(session.out_dir / "case")
    events = case.to_pandas("events", columns=["ts", "host", "pid", "priority", "message", "raw_fields"])
    assert str(events["ts"].dtype) == "datetime64[us, UTC]"
    assert str(events["message"].dtype) == "string" and events["message"].dtype.storage == "pyarrow"
    assert str(events["pid"].dtype) == "Int64" and str(events["priority"].dtype) == "Int8"
    polars_events = case.events.select("ts", "host", "pid", "priority", "message").collect()
    assert events["message"].tolist() == polars_events.get_column("message").to_list()
    assert events["pid"].isna().sum() == polars_events.get_column("pid").null_count()
    assert (events["ts"] == pd.Series(polars_events.get_column("ts").to_list(), dtype="datetime64[us, UTC]")).all()
    samples = case.to_pandas("samples", where=pl.col("name").cast(pl.String) == "sglang:num_running_reqs")
    assert str(samples["instance"].dtype) == "category" and isinstance(samples["labels"].dtype, pd.ArrowDtype)
    assert len(samples) == case.samples.filter(pl.col("name").cast(pl.String) == "sglang:num_running_reqs") \
        .select(pl.len()).collect().item()
    whole = load_case(session.out_dir / "case", backend="pandas")
    assert set(whole) == {"events", "samples", "stacks", "quarantine"} and len(whole["events"]) == 10467
    findings = session.frames("pandas")["findings"]
    assert len(findings) == session.analysis.findings_frame().height
    assert to_pandas(pl.DataFrame({"x": [1, None]}))["x"].isna().tolist() == [False, True]


def test_every_section_reads_as_text(session: ReportSession) -> None:
    sections = [session.header(), session.sources(), session.findings(), session.key_times(),
                session.data_quality(), session.postmortem(), session.redaction_note()]
    for section in sections:
        assert isinstance(section, Html)
        text = repr(section)
        assert "<" not in text.replace("<｜", "") and " at 0x" not in text and text.strip()
    assert "started | 21:34:47" in repr(session.key_times())
    assert json.loads(json.dumps(session.summary(), default=str))["key_times"]["started"].startswith("2026-06-18T21:34:47")
