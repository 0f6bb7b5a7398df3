"""The blocks `kubectl describe` prints, read line by line for `kubectl.py`: the described object's
fields (its name, namespace and kind), each container's State / Last State (Reason, Exit Code,
Started, Finished), Ready, Restart Count and memory limit as one row per container, a node's
conditions out of order as Warnings, and a healthy node as one row with its taints and GPUs.

A block is its `Name:` line and the lines indented under it or level with it; its `Events:` table
is read by `kubectl.py` with the other event tables, which name the described object as theirs.
"""

from __future__ import annotations

import re
from typing import Literal

from forensics.sources.kubernetes.object_rows import condition_out_of_order

_FIELD = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Z][\w ./-]*?):\s*(?P<value>.*?)\s*$")
_TIME = r"[A-Z][a-z]{2}, [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9:]{8} [+-][0-9]{4}"
_CONDITION = re.compile(rf"^\s*(?P<type>[A-Za-z]+)\s+(?P<status>True|False|Unknown)\s+(?P<heartbeat>{_TIME})\s+"
                        rf"(?P<since>{_TIME})\s+(?P<reason>\S+)\s+(?P<message>.*?)\s*$")
_CONTAINER = re.compile(r"^\s*(?P<name>[a-z0-9][a-z0-9.-]*):\s*$")
#: Keys only a node's describe prints at its top level: they make the block a node's, and one pasted
#: without its `Name:` line (an `Allocated resources:` tail) a node's block whose name is not known.
NODE_KEYS = ("Roles", "Taints", "Unschedulable", "Allocated resources", "Non-terminated Pods", "System Info",
             "Allocatable", "PodCIDR", "PodCIDRs", "ProviderID")  # not Capacity: a volume's describe prints it
#: Keys only a pod's describe prints at its top level: a node's key after them starts another paste.
POD_KEYS = frozenset({"Containers", "Init Containers", "QoS Class", "Controlled By", "IP", "IPs", "Tolerations"})
#: A container's state as describe prints it, pasted without its pod (`State: Terminated` and the lines
#: under it): the start of a block for a container whose pod and name are not known.
_STATE = re.compile(r"^(?:Last )?State$")
_STATES = ("Running", "Terminated", "Waiting")
# a kubectl command line in the paste (`$ kubectl get pods`, `% oc describe node x | tail -20`)
_ANY_COMMAND = re.compile(r"^\s*(?:\S*[$#>%]\s*)?(?:kubectl|oc|k)\s+(?:get|describe|logs|events|top)\b")
# `kubectl describe pod -n ns name` (or `pod/name`, `--namespace=ns`) as the paste's own command line
_COMMAND = re.compile(r"(?:^|[\s$#>])(?:kubectl|oc|k)\s+describe\s+(?P<args>[^|;&>]*)")
_VALUED = ("-l", "--selector", "--context", "--kubeconfig", "--cluster", "--user")  # flags whose value follows
_KIND_WORDS = {"pod": "Pod", "pods": "Pod", "po": "Pod", "node": "Node", "nodes": "Node", "no": "Node"}


def commanded(line: str) -> dict[str, str] | None:
    """The object a `kubectl describe` command line in the paste names (its kind, name and
    namespace), or None: a describe pasted without its `Name:` line is of that object."""
    if (m := _COMMAND.search(line)) is None:
        return None
    words, namespace, plain = m["args"].split(), None, []
    for i, word in enumerate(words):
        if word in ("-n", "--namespace") and i + 1 < len(words):
            namespace = words[i + 1]
        elif word.startswith("--namespace="):
            namespace = word.split("=", 1)[1]
        elif word in _VALUED or word.startswith(("-l=", "--selector=")):
            plain.append("")  # a selector names no one object: no name is taken from this command
        elif not word.startswith("-") and (i == 0 or words[i - 1] not in (*_VALUED, "-n", "--namespace")):
            plain.append(word)
    if plain and "/" in plain[0]:
        plain = [*plain[0].split("/", 1), *plain[1:]]
    if len(plain) != 2 or plain[0].lower() not in _KIND_WORDS or not plain[1]:
        return None
    return {"kind": _KIND_WORDS[plain[0].lower()], "Name": plain[1], **({"Namespace": namespace} if namespace else {})}

#: What a line is to the describe blocks: the start of a block, a line of the current one, or neither.
Read = Literal["begun", "read", ""]


def named(kind: str, namespace: str | None, name: str | None) -> str:
    """How a row names its object: `kind/namespace/name`, or the object described when the paste
    does not hold its name."""
    if name:
        return f"{kind.lower()}/{namespace + '/' if namespace else ''}{name}"
    return f"the {kind.lower()} described (its name is not in the paste)"


class DescribeBlocks:
    """The describe block being read (its fields, its section, the container in it) and the rows
    the blocks gave, appended to the reader's `rows`."""

    def __init__(self, rows: list[dict[str, object]]) -> None:
        self.rows = rows
        self.fields: dict[str, str] = {}  # the described object's fields (its Name, Namespace, kind, …)
        self.container: dict[str, object] | None = None
        self.section = ""
        self.base = 0  # the indentation of the describe block's `Name:` line (a paste may indent it all)
        self.rows_at_start = 0  # rows before the current describe block
        self.said: dict[str, str] | None = None  # the object the paste's `kubectl describe` line names

    def described(self, kind: str) -> dict[str, str | None]:
        """The object the block describes, as an event row names it (`object`: `Kind/name`, `kind` when
        the block has not said its kind; `namespace`): an event of its Events table is about it."""
        return {"object": f"{self.fields.get('kind', kind)}/{self.fields.get('Name', '')}",
                "namespace": self.fields.get("Namespace")}

    def command(self, line: str) -> bool:
        """Whether `line` is a kubectl command (`$ kubectl describe node x | tail`): it ends the block
        above it, and a `describe` names the object of the block pasted after it."""
        if _ANY_COMMAND.search(line) is None:
            return False
        self.close()
        self.fields, self.section, self.said = {}, "", commanded(line)
        return True

    def events_table(self) -> None:
        """The block's `Events:` table starts: the container above it is done."""
        self._close_container()
        self.section = "Events"

    def read(self, line: str, number: int) -> Read:
        """A line of a `kubectl describe` block: a node's condition, the object's fields and each
        container's state."""
        if self.fields and (c := _CONDITION.match(line)) is not None:
            self._condition(c.groupdict(), number)
            return "read"
        if self.fields and self.section in ("Allocatable", "Capacity", "Allocated resources") and \
                (gpu := re.match(r"^\s+(?P<resource>[\w.-]+/gpu)(?::\s+|\s+)(?P<amount>[0-9]+)", line)):
            self.fields[f"{self.section}:{gpu['resource']}"] = gpu["amount"]
            return "read"
        m = _FIELD.match(line)
        after_pod = m is not None and m["key"] in NODE_KEYS and bool(self.fields.keys() & POD_KEYS) \
            and len(m["indent"].expandtabs(8)) <= self.base  # a node's tail pasted after a pod's describe
        if m is not None and (not self.fields or after_pod) and (m["key"] in NODE_KEYS or (
                _STATE.match(m["key"]) and m["value"] in _STATES)):
            return self._unnamed(m["key"], m["value"], len(m["indent"].expandtabs(8)), number)
        if m is not None and m["key"] == "Name" and m["value"] and (not self.fields or len(m["indent"]) <= self.base):
            self.close()
            self.base = len(m["indent"].expandtabs(8))
            self.fields, self.section = {"Name": m["value"], "kind": "Pod", "line": number}, ""
            self.rows_at_start = len(self.rows)
            return "begun"
        if self.fields and self.section in ("Containers", "Init Containers") and (c := _CONTAINER.match(line)) \
                and len(line) - len(line.lstrip()) - self.base == 2:
            self._close_container()
            self.container = {"name": c["name"], "line": number}
            return "read"
        if self.container is not None and (limit := re.match(r"^\s+memory:\s+(\S+)\s*$", line)):
            if self.container.get("block") == "Limits":
                self.container["memory"] = limit[1]
            return "read"
        if m is None:
            return "read" if self.fields and line[:1] in (" ", "\t") else ""  # a value continued under its key
        return self._field(m["key"], m["value"], len(m["indent"].expandtabs(8)) - self.base)

    def _unnamed(self, key: str, value: str, indent: int, number: int) -> Read:
        """A describe block pasted without its `Name:` line: a node's (a key only nodes print) or a
        container's state (`State: Terminated` and the lines under it), neither named."""
        self.close()
        self.rows_at_start = len(self.rows)
        kind = "Node" if key in NODE_KEYS else "Pod"
        said = self.said if self.said and self.said["kind"] == kind else {}
        if key in NODE_KEYS:
            self.base = indent
            self.fields, self.section = {"Name": "", **said, "kind": kind, "line": number}, key if not value else ""
            return "begun"
        self.base = indent - 4  # as a container's own keys sit under its pod's `Name:`
        self.fields, self.section = {"Name": "", **said, "kind": kind, "line": number}, "Containers"
        self.container = {"name": "", "line": number}
        self._container_field(key, value, 4)
        return "begun"

    def _field(self, key: str, value: str, indent: int) -> Read:
        """A `Key: value` line, `indent` to the right of the block's `Name:`."""
        if indent <= 0:
            self._close_container()
            begun = key == "Name"
            if begun:
                self.close()
                self.fields = {"Name": value, "kind": "Pod"}
            elif key in NODE_KEYS:
                self.fields["kind"] = "Node"
            elif key == "Volume" or key == "StorageClass":
                self.fields["kind"] = "PersistentVolumeClaim"
            elif key == "Completions":
                self.fields["kind"] = "Job"
            self.fields.setdefault(key, value)
            self.section = key if not value else ""
            self.rows_at_start = self.rows_at_start if key != "Name" else len(self.rows)
            return "begun" if begun else "read"
        if not self.fields:
            return ""
        if self.container is not None:
            self._container_field(key, value, indent)
        return "read"

    def close(self) -> None:
        """A describe block that gave no row of its own (a healthy node, say) still says what it
        showed: one row with its readiness, taints and GPUs."""
        self._close_container()
        d = self.fields
        if not d or len(self.rows) > self.rows_at_start or d.get("kind") != "Node":
            self.rows_at_start = len(self.rows)
            return
        gpus = "; ".join(f"{k.split(':', 1)[1]} {k.split(':', 1)[0].lower()} {v}" for k, v in d.items()
                         if k.startswith(("Allocatable:", "Allocated resources:")))
        said = "; ".join(x for x in (f"taints {d['Taints']}" if d.get("Taints") else "", gpus) if x)
        self.rows.append({"source_line": d.get("line", 1), "K8S_KIND": "Node", "K8S_NAME": d.get("Name") or None,
                          "K8S_TYPE": "Normal", "K8S_REASON": "Described", "priority": 6,
                          "message": f"Normal Described {named('Node', None, d.get('Name'))}: "
                                     f"{said or 'no condition out of order'}"})
        self.rows_at_start = len(self.rows)

    def _condition(self, f: dict[str, str], number: int) -> None:
        """A node's condition: Ready not True, or a pressure True, is a Warning of its own."""
        if not condition_out_of_order(f["type"], f["status"]):
            return
        name = self.fields.get("Name", "")
        reason = "NodeNotReady" if f["type"] == "Ready" else f["type"]
        self.rows.append({
            "source_line": number, "K8S_KIND": "Node", "K8S_NAME": name or None, "K8S_TYPE": "Warning",
            "K8S_REASON": reason, "K8S_STATE": f"{f['type']}={f['status']}", "finished": f["since"], "priority": 4,
            "message": f"Warning {reason} {named('Node', None, name)}: {f['type']} {f['status']} since {f['since']} "
                       f"({f['reason']}: {f['message']})"})

    def _container_field(self, key: str, value: str, indent: int) -> None:
        c = self.container
        assert c is not None
        if key in ("State", "Last State"):
            c["at"] = key
            c[key] = value
        elif key in ("Reason", "Exit Code", "Started", "Finished", "Signal") and c.get("at"):
            c[f"{c['at']} {key}"] = value
        elif key == "Restart Count":
            c["restarts"] = value
        elif key == "Ready":
            c["ready"] = value
        elif key in ("Limits", "Requests"):
            c["block"] = key
        elif key == "memory" and c.get("block") == "Limits":
            c["memory"] = value
        # a key of the container's own (not of a state block) ends the state block it followed
        if indent <= 4 and key not in ("State", "Last State", "Reason", "Exit Code", "Started", "Finished", "Signal",
                                       "Message", "Detail"):
            c.pop("at", None)

    def _close_container(self) -> None:
        c, self.container = self.container, None
        if not c or not (c.get("State") or c.get("Last State")):
            return  # a container not started yet (its pod pending) has no state to tell
        name, namespace = self.fields.get("Name"), self.fields.get("Namespace")
        states = []
        for which in ("State", "Last State"):
            if not c.get(which):
                continue
            parts = [c[f"{which} {k}"] for k in ("Reason",) if c.get(f"{which} {k}")]
            if c.get(f"{which} Exit Code"):
                parts.append(f"exit code {c[f'{which} Exit Code']}")
            for k in ("Started", "Finished"):
                if c.get(f"{which} {k}"):
                    parts.append(f"{k.lower()} {c[f'{which} {k}']}")
            states.append(f"{which} {c[which]}" + (f" ({', '.join(parts)})" if parts else ""))
        last_reason = c.get("Last State Reason") or c.get("State Reason")
        exit_code = c.get("Last State Exit Code") or c.get("State Exit Code")
        finished = c.get("Last State Finished") or c.get("State Finished")
        bad = (str(c.get("State")) != "Running" or (exit_code not in (None, "0"))) and bool(last_reason or exit_code)
        extra = [f"restart count {c['restarts']}"] if c.get("restarts") else []
        extra += [f"memory limit {c['memory']}"] if c.get("memory") else []
        self.rows.append({
            "source_line": c["line"], "K8S_KIND": "Pod", "K8S_NAMESPACE": namespace, "K8S_NAME": name or None,
            "K8S_CONTAINER": c["name"] or None, "K8S_TYPE": "Warning" if bad else "Normal", "K8S_REASON": last_reason,
            "K8S_STATE": c.get("State"), "K8S_EXIT_CODE": exit_code, "K8S_RESTARTS": c.get("restarts"),
            "K8S_MEMORY_LIMIT": c.get("memory"), "K8S_READY": c.get("ready"), "finished": finished,
            "priority": 3 if bad else 6,
            "message": f"{'Warning' if bad else 'Normal'} {last_reason or c.get('State')} {named('Pod', namespace, name)}"
                       f"{' container ' + c['name'] if c['name'] else ', a container whose name is not in the paste'}: "
                       f"{'; '.join(states + extra)}"})

