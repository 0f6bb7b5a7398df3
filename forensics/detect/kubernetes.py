"""What kubectl's rows say about a Kubernetes failure, as facts: the objects, reasons, how often,
when first and last seen (times only against the capture's own "now", else relative ages, said
so), exit codes, restart counts, memory limits and what the scheduler lacked (`forensics.detect.failures`
adds them to the finding of each `k8s_*` kind the layer names)."""

from __future__ import annotations

import re
from typing import Any

import polars as pl


def k8s_facts(group: pl.DataFrame) -> dict[str, Any]:
    """What kubectl's rows of one kind say, as values: the objects, reasons, how often (its event
    counts added), exit codes, restart counts, memory limits and what the scheduler lacked."""
    rows = group.filter(pl.col("K8S_REASON").is_not_null())
    if rows.is_empty():
        return {}

    def values(column: str) -> list[str]:
        return [v for v in dict.fromkeys(rows.get_column(column).drop_nulls().to_list()) if v]

    objects = [f"{k.lower()}/{ns + '/' if ns else ''}{n}" for k, ns, n in
               dict.fromkeys(rows.select("K8S_KIND", "K8S_NAMESPACE", "K8S_NAME").iter_rows()) if n]
    # an event's count is how often kubectl saw it; a container's or a pod's row is one sighting
    counted = rows.get_column("K8S_COUNT").cast(pl.Int64, strict=False).drop_nulls()
    facts: dict[str, Any] = {"objects": objects, "reasons": values("K8S_REASON"),
                             "count": int(counted.sum()) if counted.len() else rows.height}
    for column, name in (("K8S_CONTAINER", "containers"), ("K8S_EXIT_CODE", "exit_codes"),
                         ("K8S_MEMORY_LIMIT", "memory_limits"), ("K8S_FIRST_SEEN", "first_seen_ago"),
                         ("K8S_LAST_SEEN", "last_seen_ago")):
        if found := values(column):
            facts[name] = found
    facts.update(_seen(rows))
    restarts = rows.get_column("K8S_RESTARTS").cast(pl.Int64, strict=False).drop_nulls()
    if restarts.len():
        facts["restarts"] = int(restarts.max())  # type: ignore[arg-type]
    lacking = sorted({m for text in rows.get_column("message").drop_nulls().to_list()
                      for m in re.findall(r"Insufficient ([\w./-]*\w)", text)})
    if lacking:
        facts["insufficient"] = lacking
    return facts


def _seen(rows: pl.DataFrame) -> dict[str, Any]:
    """When kubectl first and last saw what the rows say: times, when the capture gave the "now"
    its ages count back from (and which it was), else said to be relative ages and no more."""
    if "K8S_LAST_AT" in rows.columns and rows.get_column("K8S_LAST_AT").drop_nulls().len():
        at = pl.coalesce("K8S_FIRST_AT", "K8S_LAST_AT").str.to_datetime(time_zone="UTC", strict=False)
        last = pl.col("K8S_LAST_AT").str.to_datetime(time_zone="UTC", strict=False)
        first_at, last_at = rows.select(at.min(), last.max()).row(0)
        said = [v for v in dict.fromkeys(rows.get_column("K8S_AGES_FROM").drop_nulls().to_list()) if v]
        return {"first_seen": first_at.isoformat() if first_at else None,
                "last_seen": last_at.isoformat() if last_at else None,
                "seen_times": ("kubectl's ages counted back from " + "; ".join(said)) if said
                else "the events' own times (kubectl -o json / -o yaml)"}
    ages = [c for c in ("K8S_FIRST_SEEN", "K8S_LAST_SEEN") if c in rows.columns and rows.get_column(c).drop_nulls().len()]
    return {"seen_times": "relative: kubectl's ages, and the capture gives no time to count them back from"} \
        if ages else {}


def k8s_said(facts: dict[str, Any]) -> str:
    """The facts kubectl gave, after the kind's own sentence."""
    parts = []
    if facts.get("objects"):
        shown = facts["objects"][:5]
        parts.append(", ".join(shown) + (f" and {len(facts['objects']) - 5} more" if len(facts["objects"]) > 5 else ""))
    if facts.get("reasons"):
        parts.append("reason " + ", ".join(facts["reasons"]))
    if facts.get("count", 1) > 1:
        parts.append(f"{facts['count']:,} times")
    if facts.get("exit_codes"):
        parts.append("exit code " + ", ".join(facts["exit_codes"]))
    if facts.get("restarts"):
        parts.append(f"restarted {facts['restarts']} time{'' if facts['restarts'] == 1 else 's'}")
    if facts.get("memory_limits"):
        parts.append("memory limit " + ", ".join(facts["memory_limits"]))
    if facts.get("insufficient"):
        parts.append("not enough " + ", ".join(facts["insufficient"]) + " on any node (a capacity incident, not a crash)")
    return f" Kubernetes: {'; '.join(parts)}." if parts else ""
