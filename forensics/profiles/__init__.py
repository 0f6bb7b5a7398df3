"""Serving-stack profiles: what a stack's processes, frames and components look like, kept as data.

Each `*.toml` in this folder is one profile, loaded by name (`load_profile("sglang")`) or by path
(a user's own file). A profile says which frames mean which phase (collective, idle, transfer,
device_sync, compute), which frames to skip, and which words name components; its
`[[stacks.sample]]` entries are checked by the tests, the way lnav checks a format's samples.
Errors name the file and the key at fault.

`layers/*.toml` are layer profiles: what the layers under every serving stack print (PyTorch
distributed, the kernel and GPU driver, systemd). Their line kinds apply to every bundle, ahead of
the stack's own, each with the failure mode it is evidence of (`fault`); adding a failure mode is
one `[[logs.event]]` there, with real sample lines, and one detector.

A line kind's pattern is searched in every log line, all of them in one alternation: write a
case variant as a class (`[Ww]atchdog`), not with `(?i)` — a case-insensitive pattern takes the
regex engine's literal search from the whole alternation, so such patterns get a pass of their
own (`forensics.timeline.logs`), and each costs about as much as all the others together.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.errors import ForensicsError

PHASES = ("collective", "idle", "transfer", "device_sync", "network", "compute", "unknown")
PROFILE_DIR = Path(__file__).parent
LAYER_DIR = PROFILE_DIR / "layers"
MAIN_TRACK = "main"  # a layer's line kinds written with this track go to the stack's main track
DEFAULT_PROFILE = "sglang"


class ProfileError(ForensicsError):
    """A profile file is missing, not TOML, or holds a key or pattern that cannot be used."""


@dataclass(frozen=True)
class PhaseRule:
    """One frame-matching rule: the phase it gives, and why, in words for the explanation."""

    phase: str
    function: re.Pattern[str]
    file: re.Pattern[str] | None
    under: re.Pattern[str] | None
    why: str


@dataclass(frozen=True)
class StackSample:
    """A stack (innermost first, "function (file:line)") and the phase the rules must give it."""

    phase: str
    stack: tuple[str, ...]


@dataclass(frozen=True)
class StackRules:
    """How to read a serving stack's py-spy dumps."""

    process_title: re.Pattern[str]
    main_thread: str
    ignore_files: re.Pattern[str]
    ignore_functions: re.Pattern[str]
    library_files: re.Pattern[str]
    phases: tuple[PhaseRule, ...]
    samples: tuple[StackSample, ...]


@dataclass(frozen=True)
class LogEvent:
    """A kind of log line worth a finding, the symptom track it belongs to, and words for it."""

    kind: str
    pattern: str
    track: str
    text: str
    annotation: str | None  # annotations whose text matches belong to this event's track
    # The failure mode a line of this kind is evidence of ("collective timeout", "device fault", …);
    # "" for a kind that is no fault (an operator's stop); None where the profile does not say.
    fault: str | None = None
    layer: str | None = None  # the layer profile it comes from, if any


@dataclass(frozen=True)
class LogSample:
    """A sample line and what the log rules must read from it."""

    line: str
    kind: str | None
    tag: str | None
    fields: dict[str, float]
    source: str | None = None  # where a real line was copied from ("corpus2/logs/FILE:LINE"); None: a shape
    # a real line from outside the corpora: the public bug report that quotes it (its URL)
    origin: str | None = None
    # a line no public log quotes, built from the stack's own format string at this place
    # ("owner/repo@commit path:line"), field for field as that code prints it
    printed_by: str | None = None


# A profile's pattern for a line its stack never writes (the default of every optional one).
NOTHING = "$^"
# The gap a profile that names none gets. Each shipped profile names its own, with its reason
# (`[logs] freeze_gap_seconds`); this value is SGLang's, and what the checks' sentence says.
FREEZE_GAP_S = 60.0
_NOTHING_GROUPED = re.compile(r"\(\?P<\w+>(\$\^)?\)")  # `(?P<rid>$^)`, and the empty groups beside it


def matches_nothing(pattern: str) -> bool:
    """Whether `pattern` is `NOTHING`, its named groups included (`(?P<rid>$^)`): such a pattern is
    left out of a combined search, where a branch with no literal in it makes the regex engine read
    every line whole (measured: SGLang's line kinds took 3× as long with `(?P<rid>$^)` among them),
    and where `$^` would take an empty line for one of its kind."""
    return _NOTHING_GROUPED.sub(lambda group: group.group(1) or "", pattern) == NOTHING


@dataclass(frozen=True)
class ProgressRules:
    """What a stack's progress lines say of freezes and long steps (the profile's `[logs]`
    `freeze_gap_seconds` and `[logs.long_step]`; none of the latter: no gap is a long step)."""

    freeze_gap_s: float = FREEZE_GAP_S
    step_tokens: str | None = None  # a line's field: the tokens of the step it begins
    held_tokens: str | None = None  # the next line's field: the tokens the cache holds then
    step_rate: str | None = None  # the next line's field: the last step's tokens per second since it began
    min_tokens_per_s: float = 0.0  # slower than this, the step's tokens do not account for the gap

    def fields(self) -> tuple[str, ...]:
        """The progress-line fields these rules read."""
        return tuple(f for f in (self.step_tokens, self.held_tokens, self.step_rate) if f)


@dataclass(frozen=True)
class LogRules:
    """How to read a serving stack's log lines (regular expressions as polars runs them)."""

    main_track: str
    prefix: str
    progress: str  # a line it matches is read for its fields only, never as another kind of line
    request_sent: str
    request_received: str
    access: str
    health_ok: str
    ready: str
    fields: dict[str, tuple[str, ...]]  # column -> the labels it is written with ("label: number")
    events: tuple[LogEvent, ...]
    samples: tuple[LogSample, ...]
    # A line a starting server writes (its arguments, distributed init, weight loading): a unit
    # with one and no ready, health or progress line never came up (`forensics.detect.failures`).
    starting: str = NOTHING
    # Fields of a progress line of which one must be above zero for the line to show work (a stack
    # that writes its stats line while idle, like vLLM); empty: every progress line shows work.
    working_when: tuple[str, ...] = ()
    # how long a quiet scheduler may be before it counts as frozen, and what shows a quiet spell to
    # be one long step instead (`forensics.timeline.progress`)
    progress_rules: ProgressRules = ProgressRules()


@dataclass(frozen=True)
class MetricPanel:
    """One chart under the timeline: gauges drawn as they are, counters drawn as per-second rates."""

    title: str
    gauges: tuple[str, ...]
    rates: tuple[str, ...]
    unit: str = ""  # the y axis' title; empty: what the title says in parentheses, "(token/s)"

    @property
    def axis_title(self) -> str:
        """The panel's unit, for its y axis."""
        found = re.search(r"\(([^()]+)\)\s*$", self.title)
        return self.unit or (found.group(1) if found else "")


@dataclass(frozen=True)
class MetricRules:
    """Which metrics say an engine works, has work pending, and when its process started."""

    progress: tuple[str, ...]
    pending: tuple[str, ...]
    start_time: str
    stall_min_seconds: float
    panels: tuple[MetricPanel, ...] = ()


@dataclass(frozen=True)
class Profile:
    """A serving stack as data."""

    name: str
    description: str
    path: Path
    components: dict[str, re.Pattern[str]]
    stacks: StackRules
    metrics: MetricRules
    logs: LogRules
    # What in a bundle says it comes from this stack (process titles, metric names, log lines):
    # how a profile is chosen when none is given.
    evidence: re.Pattern[str] | None = None

    def component_of(self, text: str | None) -> str | None:
        """The first component whose word appears in `text` (a unit, title, group or path)."""
        if not text:
            return None
        for name, pattern in self.components.items():
            if pattern.search(text):
                return name
        return None


def choose_profile(titles: list[str], metric_names: list[str], messages: Sequence[str],
                   count_messages: Callable[[re.Pattern[str]], int] | None = None) -> tuple[Profile, str]:
    """The shipped profile whose `[profile] evidence` the bundle shows most (process titles,
    metric names, a sample of log lines), and why in words; the default when none shows any.
    `count_messages(pattern)`: how many of `messages` the pattern finds something in, when the
    caller has a faster way than Python's loop (polars over a column of them)."""
    scores = []
    for name in available():
        profile = load_profile(name)
        if profile.evidence is None:
            continue
        hits = (lines_found(profile.evidence, [*titles, *metric_names])
                + (count_messages(profile.evidence) if count_messages else lines_found(profile.evidence, messages)))
        scores.append((hits, name == DEFAULT_PROFILE, profile))
    best = max(scores, key=lambda s: (s[0], s[1]), default=None)
    if best is None or best[0] == 0:
        # said as a fact of the bundle, never as "profile sglang": the job may be anything else
        looked = " or ".join(p.name for _, _, p in scores) or "any serving stack"
        return load_profile(), (f"no serving profile matched (no process title, metric name or log line of "
                                f"{looked}): read with the layers under every stack "
                                f"({', '.join(layer.name for layer in layers())})")
    others = ", ".join(f"{p.name} {n}" for n, _, p in sorted(scores, key=lambda s: -s[0]) if p is not best[2])
    return best[2], (f"profile {best[2].name} chosen from the evidence ({best[0]} titles, metric names and "
                     f"log lines match it{'; ' + others if others else ''})")


def lines_found(pattern: re.Pattern[str], texts: Iterable[str | None]) -> int:
    """How many of `texts` `pattern` finds something in."""
    return sum(1 for text in texts if text and pattern.search(text))


def available() -> list[str]:
    """Names of the profiles shipped in this folder."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def _pattern(path: Path, key: str, value: Any) -> re.Pattern[str]:
    if not isinstance(value, str):
        raise ProfileError(f"{path}: {key} must be a string (a regular expression), not {type(value).__name__}")
    try:
        return re.compile(value)
    except re.error as error:
        raise ProfileError(f"{path}: {key}: bad regular expression {value!r}: {error}") from None


def _table(path: Path, data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise ProfileError(f"{path}: missing table [{key}]")
    return value


def _required(path: Path, table: dict[str, Any], key: str, where: str) -> Any:
    if key not in table:
        raise ProfileError(f"{path}: {where} has no {key!r}")
    return table[key]


def _rule(path: Path, index: int, rule: dict[str, Any]) -> PhaseRule:
    where = f"[[stacks.phase]] #{index + 1}"
    phase = _required(path, rule, "phase", where)
    if phase not in PHASES:
        raise ProfileError(f"{path}: {where}: phase {phase!r} is not one of {', '.join(PHASES)}")
    unknown = set(rule) - {"phase", "function", "file", "under", "why"}
    if unknown:
        raise ProfileError(f"{path}: {where}: unknown key(s) {', '.join(sorted(unknown))}")
    return PhaseRule(
        phase=phase,
        function=_pattern(path, f"{where} function", _required(path, rule, "function", where)),
        file=_pattern(path, f"{where} file", rule["file"]) if "file" in rule else None,
        under=_pattern(path, f"{where} under", rule["under"]) if "under" in rule else None,
        why=str(rule.get("why", "")),
    )


@dataclass(frozen=True)
class Layer:
    """A layer under every serving stack (PyTorch distributed, kernel and driver, systemd): its line
    kinds, their sample lines, and tables of meanings (the kernel's Xid codes)."""

    name: str
    description: str
    path: Path
    events: tuple[LogEvent, ...]
    samples: tuple[LogSample, ...]
    meanings: dict[str, dict[str, str]]  # table -> code -> meaning, e.g. {"xid": {"79": "GPU has fallen…"}}
    # Its line kinds are tried after the stack's and the other layers' (a record's first matching
    # kind is its kind): what a process prints as it dies follows the cause, often in the same record.
    last: bool = False


_LAYERS: tuple[Layer, ...] | None = None


def layers() -> tuple[Layer, ...]:
    """The shipped layer profiles (read once)."""
    global _LAYERS
    if _LAYERS is None:
        _LAYERS = tuple(_load_layer(path) for path in sorted(LAYER_DIR.glob("*.toml")))
    return _LAYERS


def meaning(table: str, code: str | int) -> str | None:
    """What a code means in a layer's table (`meaning("xid", 79)`), or None when no layer knows it."""
    for layer in layers():
        found = layer.meanings.get(table, {}).get(str(code))
        if found:
            return found
    return None


def _load_layer(path: Path) -> Layer:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ProfileError(f"{path}: {error}") from None
    meta = _table(path, data, "layer")
    rules = _log_rules(path, data.get("logs", {}), layer=str(meta.get("name", path.stem)))
    meanings = {key: {str(k): str(v) for k, v in value.items()} for key, value in data.items()
                if key not in ("layer", "logs") and isinstance(value, dict)}
    last = meta.get("last", False)
    if not isinstance(last, bool):
        raise ProfileError(f"{path}: [layer] last must be true or false, not {last!r}")
    return Layer(str(meta.get("name", path.stem)), str(meta.get("description", "")), path, rules.events,
                 rules.samples, meanings, last)


_READ: dict[Path, tuple[str, Profile]] = {}  # profile file -> (its text, the profile read from it)


def load_profile(name_or_path: str | Path = DEFAULT_PROFILE) -> Profile:
    """A shipped profile by name, or a profile file by path; read again only when its text changed
    (an analysis asks for each profile several times, and reading one took ~5 ms)."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = PROFILE_DIR / f"{name_or_path}.toml"
        if not path.is_file():
            raise ProfileError(f"no profile named {name_or_path!r}; shipped: {', '.join(available())}")
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such profile file") from None
    known = _READ.get(path)
    if known is not None and known[0] == text:
        return known[1]
    profile = _profile(path, text)
    _READ[path] = (text, profile)
    return profile


def _profile(path: Path, text: str) -> Profile:
    """The profile the TOML `text` of `path` describes."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ProfileError(f"{path}: {error}") from None
    meta = _table(path, data, "profile")
    stacks = _table(path, data, "stacks")
    components = {name: _pattern(path, f"[components] {name}", word)
                  for name, word in data.get("components", {}).items()}
    samples = []
    for index, sample in enumerate(stacks.get("sample", [])):
        where = f"[[stacks.sample]] #{index + 1}"
        phase = _required(path, sample, "phase", where)
        if phase not in PHASES:
            raise ProfileError(f"{path}: {where}: phase {phase!r} is not one of {', '.join(PHASES)}")
        samples.append(StackSample(phase, tuple(_required(path, sample, "stack", where))))
    rules = StackRules(
        process_title=_pattern(path, "[stacks] process_title", stacks.get("process_title", ".")),
        main_thread=str(stacks.get("main_thread", "MainThread")),
        ignore_files=_pattern(path, "[stacks] ignore_files", stacks.get("ignore_files", NOTHING)),
        ignore_functions=_pattern(path, "[stacks] ignore_functions", stacks.get("ignore_functions", NOTHING)),
        library_files=_pattern(path, "[stacks] library_files", stacks.get("library_files", NOTHING)),
        phases=tuple(_rule(path, i, r) for i, r in enumerate(stacks.get("phase", []))),
        samples=tuple(samples),
    )
    metrics = data.get("metrics", {})
    for key in ("progress", "pending"):
        if not isinstance(metrics.get(key, []), list):
            raise ProfileError(f"{path}: [metrics] {key} must be a list of metric names")
    metric_rules = MetricRules(progress=tuple(metrics.get("progress", [])), pending=tuple(metrics.get("pending", [])),
                               start_time=str(metrics.get("start_time", "process_start_time_seconds")),
                               stall_min_seconds=float(metrics.get("stall_min_seconds", 10.0)),
                               panels=tuple(_panel(path, i, p) for i, p in enumerate(metrics.get("panel", []))))
    return Profile(name=str(meta.get("name", path.stem)), description=str(meta.get("description", "")),
                   path=path, components=components, stacks=rules, metrics=metric_rules,
                   logs=_log_rules(path, data.get("logs", {})),
                   evidence=_pattern(path, "[profile] evidence", meta["evidence"]) if "evidence" in meta else None)


def _panel(path: Path, index: int, panel: dict[str, Any]) -> MetricPanel:
    where = f"{path}: [[metrics.panel]] #{index + 1}"
    if not isinstance(panel.get("title"), str):
        raise ProfileError(f"{where} needs a title")
    for key in ("gauges", "rates"):
        if not isinstance(panel.get(key, []), list):
            raise ProfileError(f"{where}: {key} must be a list of metric names")
    if not panel.get("gauges") and not panel.get("rates"):
        raise ProfileError(f"{where} ({panel['title']}) names no gauges and no rates")
    if not isinstance(panel.get("unit", ""), str):
        raise ProfileError(f"{where} ({panel['title']}): unit must be a string, e.g. \"token/s\"")
    return MetricPanel(panel["title"], tuple(panel.get("gauges", [])), tuple(panel.get("rates", [])),
                       panel.get("unit", ""))


def _labels(path: Path, name: str, value: Any) -> tuple[str, ...]:
    """A [logs.fields] entry: one label or a list of labels, each written before ": number"."""
    labels = [value] if isinstance(value, str) else value
    if not isinstance(labels, list) or not labels or not all(isinstance(v, str) for v in labels):
        raise ProfileError(f"{path}: [logs.fields] {name} must be a label or a list of labels "
                           f"(the text before \": number\"), not {value!r}")
    for label in labels:
        if not label or label != label.strip() or ": " in label or "\n" in label:
            raise ProfileError(f"{path}: [logs.fields] {name}: {label!r} cannot be a label (it must be non-empty, "
                               "start and end with no space and hold no \": \" and no newline)")
    return tuple(labels)


MAX_FIELD_LABELS = 256  # what forensics/timeline/_lines.c reads in one pass


def _fields(path: Path, fields: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """[logs.fields]: column -> labels."""
    read = {name: _labels(path, name, labels) for name, labels in fields.items()}
    if sum(len(labels) for labels in read.values()) > MAX_FIELD_LABELS:
        raise ProfileError(f"{path}: [logs.fields] has more than {MAX_FIELD_LABELS} labels")
    return read


def _log_rules(path: Path, logs: dict[str, Any], layer: str | None = None) -> LogRules:
    """[logs] of a profile (or of a layer, named by `layer`); every pattern is compiled once here
    so a bad one is named. A serving stack's line kinds come after every layer's, with the layers'
    `main` track read as the stack's main track."""
    def pattern(key: str, value: Any, groups: tuple[str, ...] = ()) -> str:
        compiled = _pattern(path, key, value)
        missing = [g for g in groups if g not in compiled.groupindex]
        if missing:
            raise ProfileError(f"{path}: {key}: {value!r} has no group named {', '.join(missing)} "
                               f"(write it (?P<{missing[0]}>...))")
        return compiled.pattern

    events = []
    for n, event in enumerate(logs.get("event", [])):
        where = f"[[logs.event]] #{n + 1}"
        fault = event.get("fault")
        if fault is not None and not isinstance(fault, str):
            raise ProfileError(f"{path}: {where} fault must be a string (the failure mode), not {fault!r}")
        events.append(LogEvent(str(_required(path, event, "kind", where)),
                               pattern(f"{where} pattern", _required(path, event, "pattern", where)),
                               str(event.get("track", event["kind"])), str(event.get("text", event["kind"])),
                               pattern(f"{where} annotation", event["annotation"]) if "annotation" in event else None,
                               fault, layer))
    for n, s in enumerate(logs.get("sample", [])):
        if unknown := set(s) - {"line", "kind", "tag", "fields", "source", "origin", "printed_by"}:
            raise ProfileError(f"{path}: [[logs.sample]] #{n + 1}: unknown key(s) {', '.join(sorted(unknown))}")
    samples = [LogSample(str(_required(path, s, "line", f"[[logs.sample]] #{n + 1}")), s.get("kind"), s.get("tag"),
                         {k: float(v) for k, v in s.get("fields", {}).items()}, s.get("source"), s.get("origin"),
                         s.get("printed_by"))
               for n, s in enumerate(logs.get("sample", []))]
    fields = _fields(path, logs.get("fields", {}))
    working = logs.get("working_when", [])
    if not isinstance(working, list) or any(w not in fields for w in working):
        raise ProfileError(f"{path}: [logs] working_when must list [logs.fields] names, not {working!r}")
    main_track = str(logs.get("main_track", "main"))
    if layer is None:  # a serving stack: the layers' line kinds first (those marked last after its own),
        # on this stack's main track
        def of(chosen: list[Layer]) -> list[LogEvent]:
            return [LogEvent(e.kind, e.pattern, main_track if e.track == MAIN_TRACK else e.track, e.text,
                             e.annotation, e.fault, e.layer) for lay in chosen for e in lay.events]
        events = of([lay for lay in layers() if not lay.last]) + events + of([lay for lay in layers() if lay.last])
    return LogRules(
        working_when=tuple(working),
        main_track=main_track,
        prefix=pattern("[logs] prefix", logs.get("prefix", r"^(?P<stamp>)(?P<tag>)"), ("stamp", "tag")),
        progress=pattern("[logs] progress", logs.get("progress", NOTHING)),
        request_sent=pattern("[logs] request_sent", logs.get("request_sent", f"(?P<rid>{NOTHING})"), ("rid",)),
        request_received=pattern("[logs] request_received", logs.get("request_received", f"(?P<rid>{NOTHING})"),
                                 ("rid",)),
        access=pattern("[logs] access", logs.get("access", f"(?P<method>{NOTHING})(?P<path>)(?P<status>)"),
                       ("method", "path", "status")),
        health_ok=pattern("[logs] health_ok", logs.get("health_ok", NOTHING)),
        ready=pattern("[logs] ready", logs.get("ready", NOTHING)),
        starting=pattern("[logs] starting", logs.get("starting", NOTHING)),
        fields=fields,
        events=tuple(events), samples=tuple(samples),
        progress_rules=_progress_rules(path, logs, fields))


def _seconds(path: Path, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ProfileError(f"{path}: {key} must be a number of seconds or tokens per second (0 or "
                           f"more), not {value!r}")
    return float(value)


def _progress_rules(path: Path, logs: dict[str, Any], fields: dict[str, tuple[str, ...]]) -> ProgressRules:
    """[logs] freeze_gap_seconds and [logs.long_step]."""
    gap = _seconds(path, "[logs] freeze_gap_seconds", logs.get("freeze_gap_seconds", FREEZE_GAP_S))
    if gap == 0:
        raise ProfileError(f"{path}: [logs] freeze_gap_seconds must be above 0")
    step = logs.get("long_step", {})
    if not isinstance(step, dict):
        raise ProfileError(f"{path}: [logs.long_step] must be a table, not {step!r}")
    names = {key: step.get(key) for key in ("tokens", "held", "rate")}
    for key, name in names.items():
        if name is not None and name not in fields:
            raise ProfileError(f"{path}: [logs.long_step] {key} must name a [logs.fields] field, not {name!r}")
    if names["tokens"] is None and (names["held"] or names["rate"]):
        raise ProfileError(f"{path}: [logs.long_step] names how a step shows done but not its tokens")
    return ProgressRules(gap, names["tokens"], names["held"], names["rate"],
                         _seconds(path, "[logs.long_step] min_tokens_per_second",
                                  step.get("min_tokens_per_second", 0.0)))
