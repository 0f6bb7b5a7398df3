"""The report's pieces without papermill: figures keep every finding, lifecycle message and
annotation, stay bounded, show the display zone; redaction modes; the data-quality gaps."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots
import pytest

from forensics.render import axis, metric_panels, palette, swimlanes
from forensics.render.sections import ReportSession, source_gaps

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"


@pytest.fixture(scope="module")
def shanghai(tmp_path_factory: pytest.TempPathFactory) -> ReportSession:
    return ReportSession.open(REFERENCE, tmp_path_factory.mktemp("sh"), display_tz="Asia/Shanghai")


def _traces(fig: go.Figure, prefix: str) -> list[go.Scatter]:
    return [t for t in fig.data if (t.name or "").startswith(prefix)]


def test_timeline_keeps_every_finding_lifecycle_message_and_annotation(shanghai: ReportSession) -> None:
    a = shanghai.analysis
    fig = swimlanes.timeline_figure(a)
    drawn = sum(len(t.x) for t in _traces(fig, "findings: "))
    assert drawn == sum(1 for f in a.findings if f.at)
    lifecycle = _traces(fig, "lifecycle")[0]
    systemd = a.timeline.events.filter(a.timeline.events["message_id"].is_in(list(swimlanes.LIFECYCLE_IDS)))
    assert len(lifecycle.x) == systemd.height + 1  # + sudo's systemctl restart
    labels = [ann.text for ann in fig.layout.annotations]
    for note in a.timeline.incident.annotations:
        assert any(note.text[:30] in label for label in labels)
    # the py-spy phases: decode TP0–2 in the collective, TP3 idle, at the capture times
    collective = _traces(fig, "py-spy: collective")[0]
    assert len(collective.x) == 6  # 3 ranks × 2 rounds


def test_each_lifecycle_marker_says_when_and_names_its_neighbours(shanghai: ReportSession) -> None:
    lifecycle = _traces(swimlanes.timeline_figure(shanghai.analysis), "lifecycle")[0]
    for x, text in zip(lifecycle.x, lifecycle.text, strict=True):
        # its own event, with its time to the second in the display zone (the next day there)
        assert f"{x:%H:%M:%S} " in text, (x, text)
    # the decode unit's four events, two seconds apart, are each listed with their times on every
    # one of its markers (they draw on one spot)
    decode = [t for t in lifecycle.text if "Stopping sglang-dsv4-decode" in t]
    assert len(decode) == 4
    for text in decode:
        assert ("05:40:45 stopping" in text and "05:40:47 stopped" in text and "05:40:47 starting" in text
                and "05:40:47 started" in text)


def test_times_are_drawn_and_written_in_the_display_zone(shanghai: ReportSession) -> None:
    out = shanghai.write_outputs()
    page = Path(out["timeline.html"]).read_text()
    assert ">2026-06-19 05:34:47</td>" in page and ">2026-06-19 05:42:00</td>" in page  # the next day there
    assert "time (Asia/Shanghai)" in page
    fig = swimlanes.timeline_figure(shanghai.analysis)
    started = [a for a in fig.layout.annotations if a.text.startswith("started")][0]
    assert started.text == "started 05:34:47"
    assert "05:34:47" in shanghai.key_times().body and "decode froze at 05:34:47" in Path(out["postmortem.md"]).read_text()


def test_figures_stay_bounded_when_lanes_and_series_grow(shanghai: ReportSession, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(swimlanes, "MAX_CELLS", 2_000)
    monkeypatch.setattr(metric_panels, "POINT_BUDGET", 600)
    fig = swimlanes.timeline_figure(shanghai.analysis)
    strip = [t for t in fig.data if t.type == "heatmap"][0]
    assert len(strip.z) * len(strip.z[0]) <= 2_000
    metric_points = sum(len(t.x) for t in fig.data if t.type == "scatter" and (t.legendgroup or "").startswith("panel"))
    assert metric_points <= 600 + 30 * 14  # the budget, or 30 points per series at least


def test_series_past_the_limit_fold_into_a_median_but_keep_involved_hosts(
        shanghai: ReportSession, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metric_panels, "MAX_SERIES", 2)
    time_axis = axis.axis_for(shanghai.analysis)
    frame = metric_panels.metric_frame(shanghai.analysis, ("sglang:num_running_reqs",), (), time_axis, 10_000)
    # the only host is involved (it froze): its series stay, nothing is folded
    assert sorted(frame.get_column("series").unique()) == [
        "decode gpu-node-00:30002 sglang:num_running_reqs", "prefill gpu-node-00:30000 sglang:num_running_reqs"]


def test_redaction_modes(tmp_path: Path) -> None:
    none = ReportSession.open(REFERENCE, tmp_path / "none", redact="none")
    none.write_outputs()
    assert "gpu-node-00" in (tmp_path / "none" / "timeline.html").read_text().split("<h1>", 1)[1]
    everything = ReportSession.open(REFERENCE, tmp_path / "all", redact="all")
    everything.write_outputs()
    for name in ("timeline.html", "postmortem.md", "summary.json"):
        text = (tmp_path / "all" / name).read_text()
        assert "gpu-node-00" not in text.split("<h1>", 1)[-1], name
    assert "host names" in (tmp_path / "all" / "postmortem.md").read_text().splitlines()[-1]
    assert "host names" in everything.redaction_note().body
    summary = json.loads((tmp_path / "all" / "summary.json").read_text())
    assert summary["key_times"]["started"] == "2026-06-18T21:34:47+00:00"  # times survive redaction
    assert "gpu-node-00" not in everything.sources().body + everything.findings().body
    with pytest.raises(Exception, match="redact must be one of none, timeline, all"):
        ReportSession.open(REFERENCE, tmp_path / "bad", redact="some")


def test_gaps_name_the_silent_sources(shanghai: ReportSession) -> None:
    gaps = source_gaps(shanghai.analysis)
    decode = gaps.filter(gaps["source"].str.contains("sglang-dsv4-decode"))
    # decode logged nothing but access lines between the freeze and the restart
    assert decode.height == 0 or decode["gap_s"].max() > 60
    assert set(gaps.columns) == {"source", "from", "to", "gap_s", "median_interval_s"}


def test_users_that_sudo_names_are_redacted_in_free_text_too(shanghai: ReportSession) -> None:
    from forensics.render.outputs import hosts_and_users
    hosts, users = hosts_and_users(shanghai.analysis)
    assert hosts == ["gpu-node-00"] and users == ["sre"]
    redactor = shanghai.redactor()
    assert redactor("paged sre about gpu-node-00; root stays") == "paged user-1 about host-1; root stays"


def test_every_metric_panel_names_its_unit_on_its_axis(shanghai: ReportSession) -> None:
    fig = swimlanes.timeline_figure(shanghai.analysis)
    units = {fig.layout[name].title.text for name in fig.layout if name.startswith("yaxis") and name != "yaxis"}
    assert units == {"token/s", "requests", "fraction of KV tokens"}  # from the title's "(token/s)" or `unit`


def test_one_colour_language_states_apart_from_components_and_fixed_per_name(shanghai: ReportSession) -> None:
    """States (working, frozen, errors, key times, lifecycle) use colours no component, series or
    track uses, and a series or track keeps its colour whatever else the report draws."""
    import polars as pl

    palettes = [*palette.COMPONENT_COLOURS.values(), *palette.OTHER_COLOURS, *palette.TRACK_COLOURS]
    assert not set(palettes) & palette.STATE_COLOURS
    fig = shanghai.timeline().fig
    lines = {t.name: t.line.color for t in fig.data if t.type == "scatter" and t.mode == "lines" and t.name}
    assert lines and all(colour not in palette.STATE_COLOURS for colour in lines.values())
    # one series drawn alone or among others: the same colour
    frame = pl.DataFrame({"series": ["a host-9:1 x", "b host-7:1 x", "b host-7:1 x"],
                          "x": [0.0, 0.0, 1.0], "value": [1.0, 2.0, 3.0]})
    together, alone = make_subplots(rows=1, cols=1), make_subplots(rows=1, cols=1)
    metric_panels.metric_panel(together, frame, 1, None)
    metric_panels.metric_panel(alone, frame.filter(pl.col("series") == "b host-7:1 x"), 1, None)
    assert [t.line.color for t in together.data if t.name == "b host-7:1 x"] == [alone.data[0].line.color]
    tracks = {t.name: t.marker.color for t in fig.data if t.name and t.name.startswith("findings: ")}
    assert tracks[f"findings: {shanghai.analysis.timeline.profile.logs.main_track}"] == palette.TRACK_COLOURS[0]


def test_health_checks_are_drawn_per_minute_in_their_lane(shanghai: ReportSession) -> None:
    """Every health check the journal holds as an access line answered 200 (read here from the
    export itself, not through the suite) is counted in the per-minute markers, in the lanes of the
    components that answered them, frozen minutes included: the blind spot is seen."""
    import re

    import zstandard

    with (REFERENCE / "journal" / "gpu-node-00.export.zst").open("rb") as compressed:
        raw = zstandard.ZstdDecompressor().stream_reader(compressed).read()
    answered = len(re.findall(rb'^MESSAGE=.*"GET /health(?:_generate)?[^"]*" 200', raw, re.M))
    fig = shanghai.timeline().fig
    (ok,) = _traces(fig, "health checks answered OK")
    assert sum(ok.customdata) == answered > 0
    lanes = dict(zip(fig.layout.yaxis.tickvals, fig.layout.yaxis.ticktext, strict=True))
    assert {lanes[y] for y in ok.y} == {"gpu-node-00 · decode · health checks", "gpu-node-00 · prefill · health checks"}
    frozen = [f for f in shanghai.analysis.findings if f.kind == "frozen" and f.component == "decode"][0]
    minutes = {t[-5:] for t in (re.search(r"from (\d\d:\d\d)", text).group(1) for text in ok.text)}
    assert f"{axis.wall_time(frozen.at, 'Asia/Shanghai'):%H:%M}" in minutes


def test_a_typo_in_add_panel_or_mark_warns_with_the_closest_names(shanghai: ReportSession) -> None:
    """A metric the case lacks draws an empty panel: a warning naming the closest metrics. A column
    the events lack cannot be drawn at all: one sentence naming the closest columns."""
    import polars as pl

    from forensics.errors import ForensicsError

    with pytest.warns(UserWarning, match=r"no metric named 'sglang:num_runing_reqs'.*closest: sglang:num_running_reqs"):
        shanghai.add_panel("typo", gauges=["sglang:num_runing_reqs"])
    with pytest.raises(ForensicsError, match=r"no column 'mesage'.*closest: message"):
        shanghai.mark("typo", pl.col("mesage").str.contains("x"))
    shanghai.panels.clear()
    shanghai.marks.clear()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # names the case has: no warning
        shanghai.add_panel("fine", gauges=["sglang:num_running_reqs"])
        shanghai.mark("fine", pl.col("message").str.contains("KV transfer"))
    shanghai.panels.clear()
    shanghai.marks.clear()


def test_every_text_column_of_the_frames_takes_str_as_it_is(shanghai: ReportSession) -> None:
    """A notebook user filters hosts, units and metric names with `.str` with no cast first."""
    import polars as pl

    for name, frame in shanghai.frames().items():
        assert not [c for c, t in frame.schema.items() if t == pl.Categorical], name
        for column in [c for c, t in frame.schema.items() if t == pl.String]:
            frame.select(pl.col(column).str.contains("gpu"))
    samples = shanghai.frames()["samples"]
    assert samples.filter(pl.col("name").str.starts_with("sglang:")).height > 0
    assert samples.filter(pl.col("instance").str.contains("30002")).height > 0
