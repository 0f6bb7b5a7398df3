"""The one detector interface: a detector takes the analysis' context and gives findings.

Every detector registers itself by name with `@detector(NAME)` in its own module, and `DETECTORS`
says the order analysis runs them in: a detector reads what those before it found (`ctx.found`),
the stack verdicts once the stacks detector has given them, the key times once they are known.
A new detector is one new module under `forensics/detect/` and one name in `DETECTORS`; a test
fails when a name is registered and not ordered, or ordered and not registered.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forensics.detect import Finding

if TYPE_CHECKING:
    from forensics.timeline.align import Timeline

#: (name, module) in the order analysis runs them; the module registers the name.
DETECTORS: tuple[tuple[str, str], ...] = (
    ("progress", "forensics.detect.progress"),  # freezes and last progress per component
    ("lifecycle", "forensics.detect.lifecycle"),  # restarts, stops, health
    ("stacks", "forensics.detect.stacks"),  # py-spy verdicts per group (sets ctx.verdicts)
    ("gpu", "forensics.detect.gpu"),  # DCGM: busy or idle GPUs beside a hang, Xid counters
    ("collectives", "forensics.detect.collectives"),  # Flight Recorder and torchfrtrace
    ("annotations", "forensics.detect.keytimes"),  # the incident file's notes
    ("clocks", "forensics.detect.clocks"),  # wall-clock steps, records far outside the incident
    ("failures", "forensics.detect.failures"),  # every profile's and layer's failure modes
    ("key_times", "forensics.detect.keytimes"),  # started … resolved (sets ctx.times): from a freeze, or
                                                 # the start a collective timeout implies
    ("errors", "forensics.detect.errors"),  # error lines and new templates from the start on
    ("timeout_consequences", "forensics.detect.failures"),  # what a collective timeout brings with it
    ("stop_consequences", "forensics.detect.failures"),  # what an operator's stop explains
    ("key_time_contradictions", "forensics.detect.keytimes"),  # said last: they compare every finding
)


@dataclass
class Context:
    """What a detector is given: the aligned timeline, and what the detectors before it gave."""

    timeline: Timeline
    found: list[Finding] = field(default_factory=list)
    verdicts: list[Any] = field(default_factory=list)  # forensics.detect.stack_verdict.Verdict, once judged
    times: Any = None  # forensics.detect.keytimes.KeyTimes, once known
    contradictions: list[Finding] = field(default_factory=list)  # key times out of order, said last

    @property
    def main_track(self) -> str:
        """The profile's main track (the serving engine's lane)."""
        return self.timeline.profile.logs.main_track


Detector = Callable[[Context], list[Finding]]
REGISTRY: dict[str, Detector] = {}


def detector(name: str) -> Callable[[Detector], Detector]:
    """Registers the decorated function as the detector `name` (a name given twice is an error)."""

    def register(function: Detector) -> Detector:
        if name in REGISTRY and REGISTRY[name] is not function:
            raise ValueError(f"two detectors named {name!r}: {REGISTRY[name].__module__} and {function.__module__}")
        REGISTRY[name] = function
        return function

    return register


def registered() -> list[tuple[str, Detector]]:
    """Every detector in the order analysis runs them (their modules imported, so registered)."""
    for _, module in DETECTORS:
        importlib.import_module(module)
    missing = [name for name, _ in DETECTORS if name not in REGISTRY]
    if missing:
        raise LookupError(f"detectors ordered but not registered: {', '.join(missing)}")
    return [(name, REGISTRY[name]) for name, _ in DETECTORS]


def run_detectors(timeline: Timeline) -> Context:
    """Every registered detector over `timeline`, in order; the context holds what they found."""
    ctx = Context(timeline)
    for _, run in registered():
        ctx.found += run(ctx)
    return ctx
