"""`forensics watch`: a watchdog that captures the evidence the moment a silent hang starts.

It polls the metrics endpoints and recognises the hang with the same rule as the detectors and
the generated alert (`forensics.detect.alert`): an engine's progress counters flat for `--after`
seconds while its pending gauges are above zero. Then it runs `forensics collect` at once — stacks
in two rounds or more some seconds apart — and says so: a log line, and, when given, a webhook POST
of `{"bundle": …, "instance": …, "stalled_since": …, "verdicts": …}`. It never restarts anything
itself; `--then CMD` runs a command of yours once the evidence is safe (an automatic restart that
loses nothing). A systemd unit to run it is in `forensics/capture/watch.service`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forensics.capture.collect import collect
from forensics.capture.plan import CollectError, Plan
from forensics.capture.http import Failure, fetch
from forensics.sources.prometheus.promtext import name_key


SCRAPE_DEADLINE_S = 5.0  # one poll of one endpoint, whole


def new_bundle(out: Path, at: datetime) -> Path:
    """A new, empty folder under `out` for a capture at `at`, named by its second
    (`20260618T213447Z`), with `-2`, `-3`, … after it when that name is taken: captures in the same
    second (two engines stalled in one poll, a failure line per rank) never share a folder, which
    `collect` refuses. Made here, at once, so that no other capture can take the name meanwhile."""
    stem, n = f"{at:%Y%m%dT%H%M%SZ}", 1
    while True:
        folder = out / (stem if n == 1 else f"{stem}-{n}")
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            n += 1
            continue
        except OSError as error:
            raise CollectError(f"{folder}: cannot be written ({error.strerror})") from None
        return folder


@dataclass
class Watch:
    """What to watch and what to do when an engine hangs."""

    endpoints: list[str]  # [GROUP=]HOST:PORT of /metrics
    collect: Plan  # what to collect (its `out` is the folder bundles go under)
    after_s: float = 60.0  # how long progress must stay flat with work pending
    poll_s: float = 5.0
    webhook: str | None = None
    then: str | None = None  # a command to run once the evidence is safe
    once: bool = True  # stop after the first capture
    progress: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    log: Any = field(default=sys.stderr, repr=False)


@dataclass
class _Engine:
    """One endpoint's last progress total and since when it has not moved with work pending."""

    url: str
    total: float | None = None
    flat_since: float | None = None
    failing: str | None = None  # why its last poll failed (said once, until it answers again)


def _read(url: str, progress: set[str], pending: set[str]) -> tuple[float, float] | str:
    """(sum of progress counters, max of pending gauges) from one scrape; why not, in one line,
    when the endpoint gives no whole answer."""
    answer = fetch(url, deadline_s=SCRAPE_DEADLINE_S)
    if isinstance(answer, Failure):
        return answer.why
    text = answer.body.decode("utf-8", "replace")
    total, waiting = 0.0, 0.0
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if "}" in line:
            name, rest = line.split("{", 1)[0], line[line.rindex("}") + 1:].split()
        else:
            name, *rest = line.split()
        try:
            value = float(rest[0])
        except (ValueError, IndexError):
            continue
        if name_key(name.strip()) in progress:
            total += value
        elif name_key(name.strip()) in pending:
            waiting = max(waiting, value)
    return total, waiting


def watch(w: Watch) -> list[Path]:
    """Poll until an engine hangs (or forever with `once=False`); returns the bundles captured."""
    from forensics.capture.collect import _url
    from forensics.profiles import load_profile

    profile = load_profile()
    progress = {name_key(n) for n in (w.progress or profile.metrics.progress)}
    pending = {name_key(n) for n in (w.pending or profile.metrics.pending)}
    engines = {e: _Engine(_url(e)[0]) for e in w.endpoints}
    captured: list[Path] = []
    print(f"forensics watch: {len(engines)} endpoints every {w.poll_s:g} s; a hang is progress flat for "
          f"{w.after_s:g} s with requests pending", file=w.log, flush=True)
    while True:
        for endpoint, engine in engines.items():
            read = _read(engine.url, progress, pending)
            now = time.monotonic()
            if isinstance(read, str):  # keeps polling: an endpoint that fails now may answer next time
                if read != engine.failing:
                    print(f"forensics watch: {endpoint}: {read}; still polling", file=w.log, flush=True)
                engine.failing = read
                continue
            engine.failing = None
            total, waiting = read
            moved = engine.total is None or total != engine.total
            engine.total = total
            if moved or waiting <= 0:  # working, or nothing to do: no hang
                engine.flat_since = None
                continue
            if engine.flat_since is None:
                engine.flat_since = now
            if now - engine.flat_since < w.after_s:
                continue
            stalled_at = datetime.now(UTC)
            bundle = new_bundle(w.collect.out, stalled_at)
            print(f"forensics watch: {endpoint} made no progress for {now - engine.flat_since:.0f} s with "
                  f"{waiting:g} requests pending; collecting into {bundle}", file=w.log, flush=True)
            done = collect(replace(w.collect, out=bundle, rounds=max(2, w.collect.rounds)))
            captured.append(bundle)
            verdicts = _verdicts(bundle)
            print(f"forensics watch: captured {bundle} ({', '.join(verdicts) or 'no stack verdict'})", file=w.log,
                  flush=True)
            if w.webhook:
                _post(w.webhook, {"bundle": str(bundle), "instance": endpoint, "stalled_at": stalled_at.isoformat(),
                                  "verdicts": verdicts, "could_not_collect": done.missing}, w.log)
            if w.then:
                print(f"forensics watch: running {w.then!r} now that the evidence is safe", file=w.log, flush=True)
                subprocess.run(w.then, shell=True, check=False, timeout=600)  # noqa: S602 - the user's own command
            engine.flat_since = None
            if w.once:
                return captured
        time.sleep(w.poll_s)


def _verdicts(bundle: Path) -> list[str]:
    """The stack verdicts of a captured bundle, as `group: VERDICT`."""
    from forensics.case.build import read_bundle
    from forensics.detect.stacks import judge, latest

    frames, _ = read_bundle(bundle)
    if frames["stacks"].is_empty():
        return []
    return [f"{v.group}: {v.verdict}" for v in latest(judge(frames["stacks"], frames["quarantine"]))]


def _post(url: str, body: dict[str, Any], log: Any) -> None:
    answer = fetch(url, method="POST", body=json.dumps(body, default=str).encode(),
                   headers={"Content-Type": "application/json"}, max_bytes=1 << 20)
    if isinstance(answer, Failure):
        print(f"forensics watch: webhook {url} failed: {answer.why}", file=log, flush=True)
