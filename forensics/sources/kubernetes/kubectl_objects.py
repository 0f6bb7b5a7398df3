"""What `kubectl get … -o json` and `-o yaml` print: the cluster's objects themselves, with full
RFC 3339 times instead of ages.

- Events: `kubectl get events -o json|yaml` (a `v1 List` of `Event` objects, or one Event), in the
  core/v1 shape (involvedObject, reason, message, type, count, firstTimestamp, lastTimestamp,
  source.component/host) and the events.k8s.io/v1 shape (regarding, note, eventTime,
  series.count/lastObservedTime, reportingController, deprecatedCount, deprecated…Timestamp).
- Pods: `kubectl get pods -o json|yaml`, `get pod X -o yaml`: one row per container status (state,
  last state, reason, exit code, signal, started, finished, restart count, readiness, memory and GPU
  limits); a row for the pod itself when it has no container status, was not scheduled
  (PodScheduled False) or has a reason of its own (Evicted, UnexpectedAdmissionError, …).
- Nodes: `kubectl get nodes -o json|yaml`: a row per condition out of order (Ready not True, a
  pressure True), else one row with its taints and GPUs (allocatable and capacity).

The rows, their `K8S_*` columns and their messages are the ones `forensics/sources/kubernetes/kubectl.py`
writes for the same facts in kubectl's tables and `describe`, so the Kubernetes layer names the same
failures from either (`Warning FailedScheduling pod/ns/x (x25 since 2020-01-17T04:56:28Z): …`). The
objects give times, not ages: a row's time is its event's last sighting, its container's finish
(else start), its condition's transition; `K8S_LAST_SEEN` / `K8S_FIRST_SEEN` (kubectl's ages) stay
empty and the first sighting is in the message.

Pasted as people paste them: a prompt or command line before the output (quarantined with its
line), `---` between documents, a YAML item pasted alone (`- apiVersion: v1 …`), a JSON document cut
short (what came before the cut is read, the input's `damage` says where it was cut). YAML is
evidence from others: it is read with PyYAML's safe loader only, a document with an alias is refused
(kubectl never writes one, and aliases can expand without bound: a billion laughs), and a document
larger than `MAX_YAML_BYTES` is not read; each refusal is a quarantined record with its line.
"""

from __future__ import annotations

import bisect
import json
import re
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any


from forensics.sources.common.rawio import read_all
from forensics.sources.common.schema import EVENTS_SCHEMA, ParseResult, empty, quarantine_rows
from forensics.sources import register
from forensics.sources.kubernetes.kubectl import object_events

NAME = "kubectl_objects"
FORMAT = "kubectl_objects"
DATA_TYPE = "kubectl:object"
#: The largest YAML document read (PyYAML builds it whole in memory); larger ones are quarantined.
MAX_YAML_BYTES = 32 << 20
OUTSIDE = "a line outside the Kubernetes objects (a prompt, command or prose)"
_API = (re.compile(rb'"apiVersion"\s*:\s*"[a-z0-9][\w./-]*"'),
        re.compile(rb"(?m)^[ \t]*(?:- )?apiVersion:[ \t]+[\"']?[a-z0-9][\w./-]*[\"']?[ \t]*\r?$"))
_KIND = (re.compile(rb'"kind"\s*:\s*"[A-Z]\w*"'),
         re.compile(rb"(?m)^[ \t]*(?:- )?kind:[ \t]+[\"']?[A-Z]\w*[\"']?[ \t]*\r?$"))
_DOCUMENT = re.compile(rb"^[ \t]*(?:[{\[]|---|(?:- )?[a-z][A-Za-z]*:)")
_JSON_START = re.compile(r'^(?:[{\[]$|\{\s*(?:"|\}|$)|\[\s*(?:[\[{"\]]|$))')
_YAML_START = re.compile(r"^\s*(?:---(?:\s|$)|(?:- )?[A-Za-z_][\w.-]*:(?:\s|$))")
# where an alias could be: `*` then an anchor's first character, where a node can start
_ALIAS = re.compile(r"(?<![^\s\[{,])\*[^\s\[\]{},]")
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|"|[{}\[\],]')
_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:?\d{2})$")
_FIELD_PATH = re.compile(r"spec\.(?:initContainers|containers|ephemeralContainers)\{([^}]+)\}")
_STATES = ("running", "waiting", "terminated")
_PRESSURES = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
_DECODER = json.JSONDecoder()


def sniff(head: bytes, path: Path) -> bool:
    """JSON or YAML naming an `apiVersion` and a `kind` in its first 4 KiB, whose first document
    starts within its first 8 lines (after a prompt or a command line, say)."""
    if path.is_dir() or not head or b"\x00" in head[:1024]:
        return False
    if not any(p.search(head) for p in _API) or not any(p.search(head) for p in _KIND):
        return False
    lines = [line for line in head.split(b"\n") if line.strip()][:8]
    return any(_DOCUMENT.match(line) for line in lines)


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
        when = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return when.isoformat().replace("+00:00", "Z"), when
    if not isinstance(value, str) or not value:
        return None, None
    m = _TIME.match(value)
    if m is None:
        return value, None
    zone = "+00:00" if m[4] in "Zz" else (m[4] if ":" in m[4] else f"{m[4][:3]}:{m[4][3:]}")
    try:
        when = datetime.fromisoformat(f"{m[1]}T{m[2]}{'.' + m[3][:6] if m[3] else ''}{zone}")
    except ValueError:
        return value, None
    return value, when.astimezone(UTC)


def _where(kind: str, namespace: str | None, name: str | None) -> str:
    if not name:
        return f"the {kind.lower()} (its name is not in the object)"
    return f"{kind.lower()}/{namespace + '/' if namespace else ''}{name}"


def _scan(text: str, start: int, stop: int) -> tuple[int, tuple[str, ...], list[int], bool]:
    """One JSON document from `start`: where it can be cut and still parse once closed (after a
    container opened or closed, before a comma), the containers open there, where each object of
    its list of objects starts (a List's `items` or a top-level array), and whether it ended."""
    stack: list[str] = []
    safe, open_then = start, ()
    items: list[int] = []
    for m in _TOKENS.finditer(text, start, stop):
        token = m.group()
        if token == '"':
            break  # a string cut short: the cut is inside it
        c = token[0]
        if c in "{[":
            if c == "{" and (stack == ["["] or stack == ["{", "["]):
                items.append(m.start())
            stack.append(c)
            safe, open_then = m.end(), tuple(stack)
        elif c in "}]":
            if stack:
                stack.pop()
            safe, open_then = m.end(), tuple(stack)
            if not stack:
                return safe, open_then, items, True
        elif c == ",":
            safe, open_then = m.start(), tuple(stack)
    return safe, open_then, items, False


@lru_cache(maxsize=32)
def _block_end(base: int) -> re.Pattern[str]:
    """The first line that ends a YAML document whose first line is indented `base` characters."""
    less = rf"|[ \t]{{0,{base - 1}}}(?=\S)" if base else ""
    return re.compile(rf"(?m)^(?:(?:---|\.\.\.)(?=\s|$){less}|[ \t]{{{base}}}(?:(?:---|\.\.\.)(?=\s|$)|"
                      rf"(?!-(?:\s|$)|#|[A-Za-z_\"'][^:\n]*:(?:\s|$))\S))")


class _Refused(Exception):
    """A YAML document that is not read, and why."""

    def __init__(self, reason: str, line: int = 0) -> None:
        super().__init__(reason)
        self.line = line


def _load_yaml(text: str) -> tuple[Any, Any]:
    """One YAML document as a node (for its lines) and a value, by PyYAML's safe loader; `_Refused`
    when it holds an alias (kubectl never writes one; a billion laughs is made of them)."""
    import yaml

    loader = (getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        seen: set[int] = set()
        # no `*name` where a node can start: no alias to look for
        todo = [node] if "*" in text and _ALIAS.search(text) else []
        while todo:  # every node once: an alias is a node met a second time
            n = todo.pop()
            if id(n) in seen:
                raise _Refused("a YAML alias (kubectl never writes one, and aliases can expand without bound: "
                               "a billion laughs); the document is not read", n.start_mark.line)
            seen.add(id(n))
            if isinstance(n.value, list):
                todo.extend(x for pair in n.value for x in (pair if isinstance(pair, tuple) else (pair,)))
        return node, loader.construct_document(node)
    finally:
        loader.dispose()


def _item_lines(node: Any, first: int) -> list[int]:
    """The 1-based line of each object of a YAML document's list of objects."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        node = next((v for k, v in node.value if getattr(k, "value", None) == "items"), None)
    if isinstance(node, yaml.SequenceNode):
        return [first + n.start_mark.line for n in node.value]
    return []


class _Reader:
    """Walks the text once: each JSON or YAML document read, every other line quarantined."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.rows: list[dict[str, object]] = []
        self.bad: list[tuple[int, str, str]] = []
        self.notes: list[str] = []
        self.damage: str | None = None
        self.times_unread: list[str] = []

    def read(self) -> None:
        i = 0
        while i < len(self.lines):
            line = self.lines[i]
            stripped = line.strip()
            if not stripped or stripped == "...":
                i += 1
            elif _JSON_START.match(stripped):
                i = self._json(i)
            elif _YAML_START.match(line):
                i = self._yaml(i)
            else:
                self.bad.append((i + 1, OUTSIDE, line.rstrip("\r\n")))
                i += 1

    def _damaged(self, said: str) -> None:
        """The input's damage is its first break; later ones are in its notes."""
        if self.damage is None:
            self.damage = said
        else:
            self.notes.append(said)

    def _line_of(self, offset: int) -> int:
        """The 0-based line holding `offset`."""
        return max(0, bisect.bisect_right(self.starts, offset) - 1)

    def _json(self, i: int) -> int:
        start = self.starts[i] + len(self.lines[i]) - len(self.lines[i].lstrip())
        try:
            value, end = _DECODER.raw_decode(self.text, start)
        except json.JSONDecodeError as e:
            return self._json_cut(i, start, e)
        except (ValueError, RecursionError) as e:  # a number too long to read, nesting too deep
            self.bad.append((i + 1, f"a JSON document not read ({type(e).__name__}: {str(e)[:80]})", self.lines[i]))
            return i + 1
        listed = isinstance(value, list) or (isinstance(value, dict) and isinstance(value.get("items"), list))
        _, _, items, _ = _scan(self.text, start, end) if listed and end - start <= 64 << 20 else (0, (), [], True)
        self._objects(value, [self._line_of(o) + 1 for o in items], i + 1)
        last = self._line_of(end - 1)
        rest = self.text[end:self.starts[last + 1]].strip()
        if rest:
            self.bad.append((last + 1, "text after a JSON document on its last line", rest))
        return last + 1

    def _json_cut(self, i: int, start: int, error: json.JSONDecodeError) -> int:
        """A JSON document that does not parse: what comes before the break is read, closed where
        it can be cut; the input's `damage` says where it broke."""
        cut = len(self.text) if not self.text[error.pos:].strip() else error.pos
        safe, open_then, items, _ = _scan(self.text, start, cut)
        closers = "".join("}" if c == "{" else "]" for c in reversed(open_then))
        try:
            value = json.loads(self.text[start:safe] + closers)
        except (ValueError, RecursionError):
            value = None
        at = self._line_of(max(start, min(cut, len(self.text)) - 1)) + 1
        where = "ends cut short" if cut == len(self.text) else f"breaks ({error.msg})"
        self._damaged(f"the JSON document at line {i + 1} {where} at line {at}: what came before is read, "
                      "the rest is lost")
        if value is None:
            self.bad.append((i + 1, f"a JSON document that {where} at line {at}, with nothing readable before",
                             self.lines[i]))
        else:
            read = [self._line_of(o) + 1 for o in items]
            partial = len(open_then) > (2 if isinstance(value, dict) and "items" in value else
                                        1 if isinstance(value, list) else 0)
            if partial:
                self.notes.append(f"the last object read (line {read[-1] if read else i + 1}) was cut at line {at}: "
                                  "read from its fields before the cut, the fields after it are missing")
            self._objects(value, read, i + 1)
        return self._line_of(min(cut, len(self.text) - 1)) + 1 if cut < len(self.text) else len(self.lines)

    def _yaml_end(self, i: int) -> int:
        """Where the YAML document starting at line `i` ends: a `---` or `...`, or a line less
        indented than its first, or one as indented that is no YAML (a prompt, a command)."""
        base = len(self.lines[i]) - len(self.lines[i].lstrip())
        m = _block_end(base).search(self.text, self.starts[i + 1]) if i + 1 < len(self.lines) else None
        j = self._line_of(m.start()) if m else len(self.lines)
        while j > i + 1 and not self.lines[j - 1].strip():
            j -= 1
        return j

    def _yaml(self, i: int) -> int:
        end = self._yaml_end(i)
        block = "".join(self.lines[i:end])
        if len(block) > MAX_YAML_BYTES:
            self.bad.append((i + 1, f"a YAML document of {len(block):,} bytes (more than {MAX_YAML_BYTES:,}): not read",
                             self.lines[i]))
            return end
        try:
            node, value = _load_yaml(block)
        except _Refused as e:
            self.bad.append((i + 1 + e.line, str(e), self.lines[i + e.line] if i + e.line < end else ""))
            return end
        except Exception as e:  # noqa: BLE001 - any YAML error, nesting too deep: the document's own fault
            return self._yaml_cut(i, end, e)
        self._objects(value, _item_lines(node, i + 1), i + 1)
        return end

    def _yaml_cut(self, i: int, end: int, error: Exception) -> int:
        """A YAML document that does not parse: the objects before the list item (or top-level
        key) the error is in are read; from there on it is one quarantined record."""
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        at = getattr(mark, "line", 0)
        base = len(self.lines[i]) - len(self.lines[i].lstrip())
        bounds = [k for k in range(min(at, end - i - 1), 0, -1)
                  if len(self.lines[i + k]) - len(self.lines[i + k].lstrip()) == base][:3]
        problem = str(getattr(error, "problem", None) or type(error).__name__)
        cut = 0
        for k in bounds:  # the nearest boundaries before the error, until the part before one parses
            try:
                node, value = _load_yaml("".join(self.lines[i:i + k]))
            except Exception:  # noqa: BLE001, S112 - that part does not parse either: an earlier boundary
                continue
            self._objects(value, _item_lines(node, i + 1), i + 1)
            self._damaged(f"the YAML document at line {i + 1} breaks at line {i + at + 1} ({problem}): "
                          "what came before is read")
            cut = k
            break
        self.bad.append((i + cut + 1, f"YAML not readable from here ({problem}, line {i + at + 1})", self.lines[i + cut]))
        return end

    def _objects(self, value: object, lines: list[int], first: int) -> None:
        """A document's objects: a List's items, a list's items, or the one object."""
        if value is None:
            return
        if isinstance(value, dict) and isinstance(value.get("items"), list) and \
                (value.get("kind") is None or str(value.get("kind")).endswith("List")):
            items: list[Any] = value["items"]
            if not items:
                self.notes.append(f"the {value.get('kind') or 'list'} at line {first} holds no items")
        elif isinstance(value, list):
            items = value
        else:
            items = [value]
        if len(lines) != len(items):
            lines = [first] * len(items)
        for item, line in zip(items, lines, strict=True):
            self._object(item, line)

    def _object(self, item: object, line: int) -> None:
        if not isinstance(item, dict):
            said = f"a {type(item).__name__} of {len(item)}" if isinstance(item, list) else str(item)[:80]
            self.bad.append((line, "not a Kubernetes object (no mapping)", said))
            return
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
            self.bad.append((line, why, f"{kind}/{name}" if name else json.dumps(item, default=str)[:80]))

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
            if not ((ctype == "Ready" and cstatus != "True") or (ctype in _PRESSURES and cstatus == "True")):
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


def parse(path: Path) -> ParseResult:
    """One `events` row per event, container, pod and node the objects tell of; every line outside
    them, and every object or document not read, quarantined with its line and why."""
    reader = _Reader(bytes(read_all(path)).decode("utf-8", "replace"))
    reader.read()
    quarantine = quarantine_rows(str(path), FORMAT, [(n, why, text, None) for n, why, text in reader.bad])
    notes = list(reader.notes)
    if reader.times_unread:
        notes.append("times not in RFC 3339 are kept as written and give their rows no time (e.g. "
                     + ", ".join(repr(t) for t in reader.times_unread) + ")")
    records = len(reader.rows) + len(reader.bad)
    if not reader.rows:
        return ParseResult("events", empty(EVENTS_SCHEMA), quarantine, records, damage=reader.damage, notes=notes)
    return ParseResult("events", object_events(reader.rows, path, DATA_TYPE, FORMAT), quarantine, records,
                       damage=reader.damage, notes=notes)


register(NAME, sniff, parse, module=__name__)
