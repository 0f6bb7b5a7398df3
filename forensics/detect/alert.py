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

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from forensics.sources.prometheus.promtext import name_key
from forensics.timeline.metrics import named

from forensics.detect import Finding
from forensics.timeline.align import Timeline

ALERT = "EngineStalledWithRequestsPending"
DOWN_ALERT = "EngineMetricsDown"  # the companion rule: an engine whose /metrics stops answering
WINDOW = timedelta(minutes=1)  # the shortest window; longer when scrapes are sparser (`window_for`)
SCRAPES_PER_WINDOW = 4  # a window holds at least this many scrapes, so a scrape or two late is no stall
FOR = timedelta(minutes=1)
RUNBOOK = "https://runbooks.example/forensics/engine-stalled"  # a placeholder: point it at your own runbook


def window_for(scrape_s: int) -> timedelta:
    """The rule's range: at least `SCRAPES_PER_WINDOW` scrapes of this bundle's interval, never under a minute."""
    return max(WINDOW, timedelta(seconds=SCRAPES_PER_WINDOW * scrape_s))


@dataclass
class AlertRule:
    """The rule, the metric names it uses, and when it would have fired on this incident."""

    progress: list[str]
    pending: list[str]
    fires_at: datetime | None
    instance: str | None  # the instance it fires for first
    scrape_s: int = 10  # the bundle's scrape interval, which sets the window
    instances: tuple[str, ...] = ()  # every engine instance the bundle scrapes (for the companion rule)
    silent_again_at: datetime | None = None  # the first scrape after the firing at which no instance holds

    @property
    def window(self) -> timedelta:
        """The range the rule looks at (`window_for` the bundle's scrape interval)."""
        return window_for(self.scrape_s)

    @property
    def expr(self) -> str:
        """The PromQL expression."""
        # one sum per metric: a regex over names would leave series that differ only by their name
        progress = " + ".join(f"sum by (instance) (increase({name}[{_promql(self.window)}]))" for name in self.progress)
        pending = " or ".join(f"max by (instance) ({name}) > 0" for name in self.pending)
        return f"({progress}) == 0\nand on (instance)\n({pending})"

    def as_dict(self, detected: datetime | None) -> dict[str, Any]:
        """What summary.json keeps: the rule and when it would have fired, against the detection."""
        earlier = (detected - self.fires_at).total_seconds() if detected and self.fires_at else None
        return {"alert": ALERT, "expr": self.expr, "for": _promql(FOR),
                "fires_at": self.fires_at.isoformat() if self.fires_at else None, "instance": self.instance,
                "earlier_than_detection_s": earlier, "scrape_interval_s": self.scrape_s,
                "window": _promql(self.window), "companion": {"alert": DOWN_ALERT, "expr": self.down_expr}}

    @property
    def down_expr(self) -> str:
        """The companion rule's PromQL: an engine's /metrics no longer answering its scrapes."""
        instances = "|".join(promql_label(re.escape(i)) for i in self.instances) or ".+"
        return f'up{{instance=~"{instances}"}} == 0'

    def summary_text(self, instance: str) -> str:
        """The annotation's summary, as Prometheus fills it in for one instance."""
        return f"{instance} made no progress for {_promql(self.window)} while requests were pending"

    def as_yaml(self) -> str:
        """A Prometheus rule file holding the rule, written by a YAML writer (never pasted text)."""
        import yaml

        rule = {"alert": ALERT, "expr": self.expr, "for": _promql(FOR), "labels": {"severity": "page"},
                "annotations": {
                    "summary": self.summary_text("{{ $labels.instance }}"),
                    "description": _description(self),
                    "runbook_url": RUNBOOK}}
        down = {"alert": DOWN_ALERT, "expr": self.down_expr, "for": _promql(FOR), "labels": {"severity": "page"},
                "annotations": {
                    "summary": "{{ $labels.instance }} stopped answering its /metrics scrapes",
                    "description": ("The progress alert cannot see an engine whose /metrics does not answer: "
                                    "treat it as stalled until its scrapes come back."),
                    "runbook_url": RUNBOOK}}
        return ("# Written by forensics: pages when an engine makes no progress while requests wait, the\n"
                "# blind spot of health checks (they kept answering 200 during this incident), and when an\n"
                "# engine's /metrics stops answering. runbook_url is a placeholder: set it to your runbook.\n"
                + yaml.safe_dump({"groups": [{"name": "forensics-progress", "rules": [rule, down]}]}, sort_keys=False,
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
    work = _per_scrape(timeline, progress, pl.col("value").sum())  # read once: interval, instances, firing
    scrape_s = scrape_interval(work)
    fires_at, instance, silent = would_fire(timeline, progress, pending, window_for(scrape_s), work)
    instances = tuple(sorted(work.get_column("instance").unique()))
    return AlertRule(progress, pending, fires_at, instance, scrape_s, instances, silent)


def scrape_interval(times: pl.DataFrame) -> int:
    """The bundle's scrape interval in whole seconds: the median gap between one instance's scrapes
    (`times`: the progress counters per instance and scrape, as `_per_scrape` gives them)."""
    gaps = times.with_columns(pl.col("ts").diff().over("instance").dt.total_seconds().alias("gap")).get_column("gap")
    median = gaps.drop_nulls().median()
    return max(1, int(round(median))) if median else 10  # type: ignore[arg-type]


def _per_scrape(timeline: Timeline, names: list[str], how: pl.Expr) -> pl.DataFrame:
    samples = timeline.samples.filter(named(names))
    return (samples.group_by(pl.col("instance").cast(pl.String), "ts").agg(how.alias("value"))
            .sort("instance", "ts").collect())


def would_fire(timeline: Timeline, progress: list[str], pending: list[str], window_span: timedelta = WINDOW,
               work: pl.DataFrame | None = None) -> tuple[datetime | None, str | None, datetime | None]:
    """When the rule would first fire on the incident's samples (evaluated at every scrape), for which
    instance, and the first scrape after that at which it holds for no instance (silent again)."""
    work = _per_scrape(timeline, progress, pl.col("value").sum()) if work is None else work
    waiting = _per_scrape(timeline, pending, pl.col("value").max()).rename({"value": "pending"})
    if work.is_empty() or waiting.is_empty():
        return None, None, None
    window = f"{int(window_span.total_seconds())}s"
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
        return None, None, None
    first = runs.row(0, named=True)
    held = condition.group_by("ts").agg(pl.col("holds").any()).sort("ts")
    quiet = held.filter((pl.col("ts") > first["ts"]) & ~pl.col("holds"))
    return first["ts"], first["instance"], (quiet.get_column("ts")[0] if quiet.height else None)


def promtool_test(timeline: Timeline, rule: AlertRule, rule_file: str) -> str:
    """A `promtool test rules` file replaying the incident's progress and pending series at the
    bundle's own scrape interval from the first sample, checking that the alert is silent one scrape
    before `rule.fires_at`, fires then for its instance, and is silent again once the engines work
    (`rule.silent_again_at`), when the evidence reaches that far."""
    if rule.fires_at is None or rule.instance is None:
        raise ValueError("the rule never fires on this incident's samples: nothing to test")
    step_s = rule.scrape_s
    samples = (timeline.samples.filter(named(rule.progress + rule.pending))
               .select("ts", pl.col("instance").cast(pl.String), pl.col("name").cast(pl.String), "labels", "value")
               .collect().sort("ts"))
    start = samples.get_column("ts").min()
    last = rule.silent_again_at or rule.fires_at
    steps = int((last - start).total_seconds() // step_s) + 3
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

    def at(when: datetime) -> int:
        seconds = int((when - start).total_seconds())
        return seconds - seconds % step_s

    fires = at(rule.fires_at)
    checks = [{"eval_time": f"{fires - step_s}s", "alertname": ALERT, "exp_alerts": []},
              {"eval_time": f"{fires}s", "alertname": ALERT, "exp_alerts": [
                  {"exp_labels": {"instance": rule.instance, "severity": "page"},
                   "exp_annotations": {"summary": rule.summary_text(rule.instance),
                                       "description": _description(rule), "runbook_url": RUNBOOK}}]}]
    if rule.silent_again_at is not None:
        checks.append({"eval_time": f"{at(rule.silent_again_at) + step_s}s", "alertname": ALERT, "exp_alerts": []})
    test = {"rule_files": [rule_file], "evaluation_interval": f"{step_s}s",
            "tests": [{"interval": f"{step_s}s", "input_series": series, "alert_rule_test": checks}]}
    import yaml

    return yaml.safe_dump(test, sort_keys=False, allow_unicode=True, width=1 << 20)


def _description(rule: AlertRule) -> str:
    return (f"No tokens produced for {_promql(rule.window)} (at least {SCRAPES_PER_WINDOW} scrapes of {rule.scrape_s} s) "
            "while requests were running or queued: the engine is wedged even if its health check answers 200. Take "
            "py-spy dumps of every rank (forensics collect) before restarting it.")
