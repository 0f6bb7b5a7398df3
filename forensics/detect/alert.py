"""The alert that would have caught it: a Prometheus alerting rule on progress, not on health.

For a silent hang (progress stopped while health checks answered 200), the rule pages when the
profile's progress counters (`[metrics] progress`, e.g. generated and prompt tokens) do not move
for `WINDOW` while its pending gauges (`[metrics] pending`, running and queued requests) are above
zero, for `FOR` more — written with the metric names this bundle actually has. `would_fire`
evaluates the same rule on the incident's own samples, as Prometheus would at each scrape (a
range `(t - WINDOW, t]` holding two samples or more, flat, with work pending, for `FOR`), so the
report can say when it would have paged and how much earlier than the detection that is.
`promtool_test` writes a `promtool test rules` file from the same samples that checks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from forensics.formats.promtext import name_key
from forensics.timeline.metrics import named

from forensics.detect import Finding
from forensics.timeline.align import Timeline

ALERT = "EngineStalledWithRequestsPending"
WINDOW = timedelta(minutes=1)
FOR = timedelta(minutes=1)


@dataclass
class AlertRule:
    """The rule, the metric names it uses, and when it would have fired on this incident."""

    progress: list[str]
    pending: list[str]
    fires_at: datetime | None
    instance: str | None  # the instance it fires for first

    @property
    def expr(self) -> str:
        """The PromQL expression."""
        # one sum per metric: a regex over names would leave series that differ only by their name
        progress = " + ".join(f"sum by (instance) (increase({name}[{_promql(WINDOW)}]))" for name in self.progress)
        pending = " or ".join(f"max by (instance) ({name}) > 0" for name in self.pending)
        return f"({progress}) == 0\nand on (instance)\n({pending})"

    def as_dict(self, detected: datetime | None) -> dict[str, Any]:
        """What summary.json keeps: the rule and when it would have fired, against the detection."""
        earlier = (detected - self.fires_at).total_seconds() if detected and self.fires_at else None
        return {"alert": ALERT, "expr": self.expr, "for": _promql(FOR),
                "fires_at": self.fires_at.isoformat() if self.fires_at else None, "instance": self.instance,
                "earlier_than_detection_s": earlier}

    def as_yaml(self) -> str:
        """A Prometheus rule file holding the rule, written by a YAML writer (never pasted text)."""
        import yaml

        rule = {"alert": ALERT, "expr": self.expr, "for": _promql(FOR), "labels": {"severity": "page"},
                "annotations": {"summary": f"{{{{ $labels.instance }}}} made no progress for {_promql(WINDOW)} "
                                           "while requests were pending"}}
        return ("# Written by forensics: pages when an engine makes no progress while requests wait, the\n"
                "# blind spot of health checks (they kept answering 200 during this incident).\n"
                + yaml.safe_dump({"groups": [{"name": "forensics-progress", "rules": [rule]}]}, sort_keys=False,
                                 allow_unicode=True, width=1000))


def promql_label(value: str) -> str:
    """A label value as a PromQL string literal holds it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _promql(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def _present(timeline: Timeline, names: tuple[str, ...]) -> list[str]:
    """The names of `names` the bundle has, spelt as the bundle spells them (`:` or `_`)."""
    found = (timeline.samples.filter(named(list(names))).select(pl.col("name").cast(pl.String).unique())
             .collect().get_column("name").to_list())
    return sorted(found, key=lambda n: [name_key(m) for m in names].index(name_key(n)))


def alert_rule(timeline: Timeline, findings: list[Finding]) -> AlertRule | None:
    """The progress alert for this incident, or None when it had no silent hang or freeze, or the
    bundle lacks the profile's progress or pending metrics."""
    if not any(f.kind in ("silent_hang", "frozen") for f in findings):
        return None
    metrics = timeline.profile.metrics
    progress, pending = _present(timeline, metrics.progress), _present(timeline, metrics.pending)
    if not progress or not pending:
        return None
    fires_at, instance = would_fire(timeline, progress, pending)
    return AlertRule(progress, pending, fires_at, instance)


def _per_scrape(timeline: Timeline, names: list[str], how: pl.Expr) -> pl.DataFrame:
    samples = timeline.samples.filter(named(names))
    return (samples.group_by(pl.col("instance").cast(pl.String), "ts").agg(how.alias("value"))
            .sort("instance", "ts").collect())


def would_fire(timeline: Timeline, progress: list[str], pending: list[str]) -> tuple[datetime | None, str | None]:
    """When the rule would first fire on the incident's samples (evaluated at every scrape), and
    for which instance."""
    work = _per_scrape(timeline, progress, pl.col("value").sum())
    waiting = _per_scrape(timeline, pending, pl.col("value").max()).rename({"value": "pending"})
    if work.is_empty() or waiting.is_empty():
        return None, None
    window = f"{int(WINDOW.total_seconds())}s"
    # Prometheus 2.x (the promtool the tests run) takes a range's both ends, [t - WINDOW, t];
    # 3.x leaves the start out, which fires one scrape earlier at most
    flat = work.with_columns(
        pl.col("value").rolling_min_by("ts", window, closed="both").over("instance").alias("low"),
        pl.col("value").rolling_max_by("ts", window, closed="both").over("instance").alias("high"),
        pl.col("ts").rolling_min_by("ts", window, closed="both").over("instance").alias("first"))
    # two samples or more in the range, none of them different, and work pending at that scrape
    condition = (flat.sort("instance", "ts").join_asof(waiting.sort("instance", "ts"), on="ts", by="instance",
                                                       strategy="backward", check_sortedness=False)
                 .with_columns(((pl.col("first") < pl.col("ts")) & (pl.col("low") == pl.col("high"))
                                & (pl.col("pending").fill_null(0) > 0)).alias("holds")))
    runs = (condition.with_columns((pl.col("holds") != pl.col("holds").shift(1).over("instance")).fill_null(True)
                                   .cum_sum().over("instance").alias("run"))
            .filter(pl.col("holds"))
            .with_columns(pl.col("ts").min().over("instance", "run").alias("since"))
            .filter(pl.col("ts") - pl.col("since") >= FOR)
            .sort("ts"))
    if runs.is_empty():
        return None, None
    first = runs.row(0, named=True)
    return first["ts"], first["instance"]


def promtool_test(timeline: Timeline, rule: AlertRule, rule_file: str, step_s: int = 10) -> str:
    """A `promtool test rules` file replaying the incident's progress and pending series at a
    `step_s` grid from the first sample, checking the alert fires at `rule.fires_at` for its
    instance and not one step before."""
    if rule.fires_at is None or rule.instance is None:
        raise ValueError("the rule never fires on this incident's samples: nothing to test")
    samples = (timeline.samples.filter(named(rule.progress + rule.pending))
               .select("ts", pl.col("instance").cast(pl.String), pl.col("name").cast(pl.String), "labels", "value")
               .collect().sort("ts"))
    start = samples.get_column("ts").min()
    steps = int((rule.fires_at - start).total_seconds() // step_s) + 3
    series = []
    for (instance, name, labels), rows in samples.group_by("instance", "name", "labels", maintain_order=True):
        values = []
        points = rows.select("ts", "value").iter_rows()
        current: Any = None
        pending_row = next(points, None)
        for step in range(steps):
            at = start + timedelta(seconds=step * step_s)
            while pending_row is not None and pending_row[0] <= at:
                current = pending_row[1]
                pending_row = next(points, None)
            values.append("_" if current is None else f"{current:.17g}")
        label_text = ",".join([f'instance="{promql_label(instance)}"']
                              + [f'{item["name"]}="{promql_label(item["value"])}"' for item in labels])
        series.append({"series": f"{name}{{{label_text}}}", "values": " ".join(values)})
    fires = int((rule.fires_at - start).total_seconds())
    fires -= fires % step_s
    summary = f"{rule.instance} made no progress for {_promql(WINDOW)} while requests were pending"
    test = {"rule_files": [rule_file], "evaluation_interval": f"{step_s}s", "tests": [{
        "interval": f"{step_s}s", "input_series": series,
        "alert_rule_test": [
            {"eval_time": f"{fires - step_s}s", "alertname": ALERT, "exp_alerts": []},
            {"eval_time": f"{fires}s", "alertname": ALERT, "exp_alerts": [
                {"exp_labels": {"instance": rule.instance, "severity": "page"},
                 "exp_annotations": {"summary": summary}}]}]}]}
    import yaml

    return yaml.safe_dump(test, sort_keys=False, allow_unicode=True, width=1 << 20)
