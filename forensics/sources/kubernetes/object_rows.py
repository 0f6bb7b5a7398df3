"""The rows the Kubernetes objects of `kubectl get … -o json|yaml` give: what an Event, a Pod (with
its container statuses) and a Node say, as `events` rows with their `K8S_*` columns.

The rows and their messages are the ones `kubectl.py` writes for the same facts in kubectl's tables
and `describe`, so a failure is named the same from either. `kubectl_objects.py` frames the
documents and hands each object here; this module never sees text, only objects as a JSON or YAML
loader built them (a name may be a number, a time a datetime: YAML types what it can).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:?\d{2})$")
_FIELD_PATH = re.compile(r"spec\.(?:initContainers|containers|ephemeralContainers)\{([^}]+)\}")
_STATES = ("running", "waiting", "terminated")
_PRESSURES = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


def condition_out_of_order(kind: str, status: str) -> bool:
    """Whether a node condition is a Warning: Ready that is not True, or a pressure that is True."""
    return (kind == "Ready" and status != "True") or (kind in _PRESSURES and status == "True")


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: object) -> str | None:
    """A scalar as text (YAML may have made a name a number, a date or a boolean); None otherwise."""
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, datetime):
        return _time(value)[0]
    return str(value)


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() and len(value) < 19 else None


def _time(value: object) -> tuple[str | None, datetime | None]:
    """A time as written (RFC 3339; YAML may have read it as a datetime already) and as a UTC
    datetime; (text, None) when it is not RFC 3339."""
    if isinstance(value, datetime):
        try:
            when = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        except OverflowError:  # year 1 east of UTC, 9999 west of it: no UTC time
            return value.isoformat(), None
        return when.isoformat().replace("+00:00", "Z"), when
    if not isinstance(value, str) or not value:
        return None, None
    m = _TIME.match(value)
    if m is None:
        return value, None
    zone = "+00:00" if m[4] in "Zz" else (m[4] if ":" in m[4] else f"{m[4][:3]}:{m[4][3:]}")
    try:
        return value, datetime.fromisoformat(f"{m[1]}T{m[2]}{'.' + m[3][:6] if m[3] else ''}{zone}").astimezone(UTC)
    except (ValueError, OverflowError):  # no such date, or none in UTC (year 1 east of it, 9999 west)
        return value, None


def _where(kind: str, namespace: str | None, name: str | None) -> str:
    if not name:
        return f"the {kind.lower()} (its name is not in the object)"
    return f"{kind.lower()}/{namespace + '/' if namespace else ''}{name}"


class ObjectRows:
    """The rows read from an input's objects so far, and the first few times among them that are
    not RFC 3339 (kept as written, so their rows have no time: the input's notes say which)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, object]] = []
        self.times_unread: list[str] = []

    def read(self, item: object, line: int) -> tuple[str, str] | None:
        """The rows of one object (`line`: where it starts); else why it gives none and what of it
        to quarantine."""
        if not isinstance(item, dict):
            said = f"a {type(item).__name__} of {len(item)}" if isinstance(item, list) else str(item)[:80]
            return "not a Kubernetes object (no mapping)", said
        kind = item.get("kind")
        if kind == "Event" or (kind is None and ("involvedObject" in item or "regarding" in item)):
            self._event(item, line)
        elif kind == "Pod":
            self._pod(item, line)
        elif kind == "Node":
            self._node(item, line)
        else:
            name = _text(_dict(item.get("metadata")).get("name"))
            why = (f"a Kubernetes {kind}: not read (only Events, Pods and Nodes are)" if isinstance(kind, str) else
                   "an object without a `kind` (not a Kubernetes object, or cut short before its kind)")
            return why, f"{kind}/{name}" if name else json.dumps(item, default=str)[:80]
        return None

    def _when(self, value: object) -> tuple[str | None, datetime | None]:
        text, when = _time(value)
        if text is not None and when is None and len(self.times_unread) < 3 and text not in self.times_unread:
            self.times_unread.append(text)
        return text, when

    def _event(self, e: dict[str, Any], line: int) -> None:
        """An Event, core/v1 or events.k8s.io/v1, as the table reader writes an event row."""
        obj = _dict(e.get("involvedObject")) or _dict(e.get("regarding"))
        series = _dict(e.get("series"))
        source = _dict(e.get("source")) or _dict(e.get("deprecatedSource"))
        kind = _text(obj.get("kind")) or "object"
        namespace, name = _text(obj.get("namespace")), _text(obj.get("name"))
        etype, reason = _text(e.get("type")), _text(e.get("reason"))
        message = _text(e.get("message")) if e.get("message") is not None else _text(e.get("note"))
        # a series, when there is one, is what kubectl describe counts and dates the event by
        count = next((c for c in (_int(series.get("count")), _int(e.get("count")), _int(e.get("deprecatedCount")))
                      if c is not None), None)
        last_text, last = None, None
        for value in (series.get("lastObservedTime"), e.get("lastTimestamp"), e.get("deprecatedLastTimestamp"),
                      e.get("eventTime"), _dict(e.get("metadata")).get("creationTimestamp")):
            last_text, last = self._when(value)
            if last_text:
                break
        first_text, first = next((w for w in (self._when(e.get(k)) for k in (
            "firstTimestamp", "deprecatedFirstTimestamp", "eventTime")) if w[0]), (None, None))
        component = _text(source.get("component")) or _text(e.get("reportingController")) or \
            _text(e.get("reportingComponent"))
        host = _text(source.get("host"))
        container = _FIELD_PATH.search(_text(obj.get("fieldPath")) or "")
        said = ""
        if count is not None and count > 1:
            said = f" (x{count} since {first_text})" if first_text else f" (x{count})"
        head = f"{etype} {reason}" if etype else f"{reason}"
        self.rows.append({
            "source_line": line, "ts": last, "K8S_KIND": kind, "K8S_NAMESPACE": namespace, "K8S_NAME": name,
            "K8S_TYPE": etype, "K8S_REASON": reason, "K8S_COUNT": str(count or 1),
            "K8S_FIRST_AT": first.isoformat() if first else None, "K8S_LAST_AT": last.isoformat() if last else None,
            "K8S_SOURCE": ", ".join(x for x in (component, host) if x) or None,
            "K8S_CONTAINER": container[1] if container else None,
            "priority": 4 if etype == "Warning" else 6 if etype else 5,
            "message": f"{head} {_where(kind, namespace, name)}{said}: {message or ''}".rstrip()})

    def _pod(self, p: dict[str, Any], line: int) -> None:
        """A Pod: a row per container status, and one for the pod when it says more than they do."""
        meta, spec, status = _dict(p.get("metadata")), _dict(p.get("spec")), _dict(p.get("status"))
        name, namespace = _text(meta.get("name")), _text(meta.get("namespace"))
        limits = {_text(c.get("name")): _dict(_dict(c.get("resources")).get("limits"))
                  for group in ("initContainers", "containers") for c in _list(spec.get(group)) if isinstance(c, dict)}
        made = sum(self._container(c, limits, name, namespace, line)
                   for group in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")
                   for c in _list(status.get(group)) if isinstance(c, dict))
        unscheduled = next((c for c in _list(status.get("conditions")) if isinstance(c, dict) and
                            c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
        if made and not status.get("reason") and unscheduled is None:
            return
        phase, reason = _text(status.get("phase")), _text(status.get("reason"))
        node = f" on node {_text(spec.get('nodeName'))}" if spec.get("nodeName") else ""
        where = _where("Pod", namespace, name)
        times = [self._when(c.get("lastTransitionTime"))[1] for c in _list(status.get("conditions")) if isinstance(c, dict)]
        ts = max((t for t in times if t), default=None) or self._when(status.get("startTime"))[1]
        if reason:
            said = f"phase {phase}{node}" + (f": {_text(status.get('message'))}" if status.get("message") else "")
        elif unscheduled is not None:
            reason = _text(unscheduled.get("reason")) or "Unschedulable"
            since, ts = self._when(unscheduled.get("lastTransitionTime"))
            said = (f"PodScheduled False{' since ' + since if since else ''} "
                    f"({reason}: {_text(unscheduled.get('message')) or ''})")
        else:
            said = f"phase {phase or 'not in the object'}{node}" + ("" if status else "; no status in the object")
        if not made:  # what its containers ask for, when no container row says it
            said += "".join(f"; container {c} limit {k} {_text(v)}" for c, limit in limits.items()
                            for k, v in limit.items() if k == "memory" or re.fullmatch(r"[\w.-]+/gpu", str(k)))
        bad = reason is not None
        self.rows.append({
            "source_line": line, "ts": ts, "K8S_KIND": "Pod", "K8S_NAMESPACE": namespace, "K8S_NAME": name,
            "K8S_TYPE": "Warning" if bad else "Normal", "K8S_REASON": reason or phase, "K8S_STATE": phase,
            "priority": 4 if bad else 6,
            "message": f"{'Warning' if bad else 'Normal'} {reason or phase or 'Pod'} {where}: {said}"})

    def _container(self, c: dict[str, Any], limits: dict[str | None, dict[str, Any]], pod: str | None,
                   namespace: str | None, line: int) -> int:
        """One container status as describe's container block is read: its row, or 0 rows when it
        has no state yet."""
        states: list[str] = []
        got: dict[str, dict[str, Any]] = {}
        for which, key in (("State", "state"), ("Last State", "lastState")):
            block = _dict(c.get(key))
            label = next((s for s in _STATES if s in block), None)
            if label is None:
                continue
            d = _dict(block[label])
            got[which] = dict(d, label=label.capitalize())
            parts = [x for x in (_text(d.get("reason")),) if x]
            parts += [f"exit code {d['exitCode']}"] if _int(d.get("exitCode")) is not None else []
            parts += [f"signal {d['signal']}"] if _int(d.get("signal")) is not None else []
            parts += [f"{k[:-2]} {self._when(d.get(k))[0]}" for k in ("startedAt", "finishedAt") if d.get(k)]
            states.append(f"{which} {label.capitalize()}" + (f" ({', '.join(parts)})" if parts else ""))
        if "State" not in got:
            return 0
        last, now = got.get("Last State", {}), got["State"]
        reason = _text(last.get("reason")) or _text(now.get("reason"))
        code = next((str(x) for x in (_int(last.get("exitCode")), _int(now.get("exitCode"))) if x is not None), None)
        finished = self._when(last.get("finishedAt"))[1] or self._when(now.get("finishedAt"))[1]
        started = self._when(now.get("startedAt"))[1]
        bad = (now["label"] != "Running" or code not in (None, "0")) and bool(reason or code) and \
            not (reason == "Completed" and code in (None, "0"))
        name = _text(c.get("name")) or "?"
        limit = limits.get(name, {})
        extra = [f"restart count {c['restartCount']}"] if _int(c.get("restartCount")) is not None else []
        extra += [f"memory limit {_text(limit['memory'])}"] if limit.get("memory") is not None else []
        extra += [f"{k} limit {_text(v)}" for k, v in limit.items() if re.fullmatch(r"[\w.-]+/gpu", k)]
        self.rows.append({
            "source_line": line, "ts": finished or started, "K8S_KIND": "Pod", "K8S_NAMESPACE": namespace,
            "K8S_NAME": pod, "K8S_CONTAINER": name, "K8S_TYPE": "Warning" if bad else "Normal", "K8S_REASON": reason,
            "K8S_STATE": now["label"], "K8S_EXIT_CODE": code, "K8S_RESTARTS": _text(c.get("restartCount")),
            "K8S_MEMORY_LIMIT": _text(limit.get("memory")), "K8S_READY": _text(c.get("ready")),
            "priority": 3 if bad else 6,
            "message": f"{'Warning' if bad else 'Normal'} {reason or now['label']} {_where('Pod', namespace, pod)} "
                       f"container {name}: {'; '.join(states + extra)}"})
        return 1

    def _node(self, n: dict[str, Any], line: int) -> None:
        """A Node: its conditions out of order, each a Warning; else one row with taints and GPUs."""
        name = _text(_dict(n.get("metadata")).get("name"))
        spec, status = _dict(n.get("spec")), _dict(n.get("status"))
        conditions = [c for c in _list(status.get("conditions")) if isinstance(c, dict)]
        before = len(self.rows)
        for c in conditions:
            ctype, cstatus = _text(c.get("type")), _text(c.get("status"))
            if not condition_out_of_order(ctype, cstatus):
                continue
            reason = "NodeNotReady" if ctype == "Ready" else ctype
            since, ts = self._when(c.get("lastTransitionTime"))
            self.rows.append({
                "source_line": line, "ts": ts, "K8S_KIND": "Node", "K8S_NAME": name, "K8S_TYPE": "Warning",
                "K8S_REASON": reason, "K8S_STATE": f"{ctype}={cstatus}", "priority": 4,
                "message": f"Warning {reason} {_where('Node', None, name)}: {ctype} {cstatus} since {since} "
                           f"({_text(c.get('reason'))}: {_text(c.get('message'))})"})
        if len(self.rows) > before:
            return
        taints = ", ".join(f"{_text(t.get('key'))}{'=' + str(_text(t.get('value'))) if t.get('value') else ''}:"
                           f"{_text(t.get('effect'))}" for t in _list(spec.get("taints")) if isinstance(t, dict))
        gpus = "; ".join(f"{k} {section} {_text(v)}" for section in ("allocatable", "capacity")
                         for k, v in _dict(status.get(section)).items() if re.fullmatch(r"[\w.-]+/gpu", str(k)))
        said = [f"taints {taints}" if taints else "", gpus, "cordoned (spec.unschedulable)" if spec.get("unschedulable")
                else "", "" if conditions else "its conditions are not in the object"]
        beats = [self._when(c.get("lastHeartbeatTime"))[1] for c in conditions]
        self.rows.append({
            "source_line": line, "ts": max((b for b in beats if b), default=None), "K8S_KIND": "Node",
            "K8S_NAME": name, "K8S_TYPE": "Normal", "K8S_REASON": "Described", "priority": 6,
            "message": f"Normal Described {_where('Node', None, name)}: "
                       f"{'; '.join(x for x in said if x) or 'no condition out of order'}"})
