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
empty and the first sighting is in the message. This module frames the documents and hands each object
to `object_rows`, which makes its rows.

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
from functools import lru_cache
from pathlib import Path
from typing import Any

from forensics.sources.common.rawio import read_all
from forensics.sources.common.schema import EVENTS_SCHEMA, ParseResult, empty, quarantine_rows
from forensics.sources import register
from forensics.sources.kubernetes.kubectl import object_events
from forensics.sources.kubernetes.object_rows import ObjectRows

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
        self.objects = ObjectRows()  # what each object read says, as rows
        self.bad: list[tuple[int, str, str]] = []
        self.notes: list[str] = []
        self.damage: str | None = None

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
            if (refused := self.objects.read(item, line)) is not None:
                self.bad.append((line, *refused))


def parse(path: Path) -> ParseResult:
    """One `events` row per event, container, pod and node the objects tell of; every line outside
    them, and every object or document not read, quarantined with its line and why."""
    reader = _Reader(bytes(read_all(path)).decode("utf-8", "replace"))
    reader.read()
    quarantine = quarantine_rows(str(path), FORMAT, [(n, why, text, None) for n, why, text in reader.bad])
    notes = list(reader.notes)
    if reader.objects.times_unread:
        notes.append("times not in RFC 3339 are kept as written and give their rows no time (e.g. "
                     + ", ".join(repr(t) for t in reader.objects.times_unread) + ")")
    records = len(reader.objects.rows) + len(reader.bad)
    if not reader.objects.rows:
        return ParseResult("events", empty(EVENTS_SCHEMA), quarantine, records, damage=reader.damage, notes=notes)
    return ParseResult("events", object_events(reader.objects.rows, path, DATA_TYPE, FORMAT), quarantine, records,
                       damage=reader.damage, notes=notes)


register(NAME, sniff, parse, module=__name__)
