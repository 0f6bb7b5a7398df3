"""What kubectl's rows say about a Kubernetes failure, as facts: the objects, reasons, how often,
exit codes, restart counts, memory limits and what the scheduler lacked (`forensics.detect.failures`
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
    restarts = rows.get_column("K8S_RESTARTS").cast(pl.Int64, strict=False).drop_nulls()
    if restarts.len():
        facts["restarts"] = int(restarts.max())  # type: ignore[arg-type]
    lacking = sorted({m for text in rows.get_column("message").drop_nulls().to_list()
                      for m in re.findall(r"Insufficient ([\w./-]*\w)", text)})
    if lacking:
        facts["insufficient"] = lacking
    return facts


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
        parts.append(f"restarted {facts['restarts']} times")
    if facts.get("memory_limits"):
        parts.append("memory limit " + ", ".join(facts["memory_limits"]))
    if facts.get("insufficient"):
        parts.append("not enough " + ", ".join(facts["insufficient"]) + " on any node (a capacity incident, not a crash)")
    return f" Kubernetes: {'; '.join(parts)}." if parts else ""
