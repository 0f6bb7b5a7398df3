"""The registry of input formats: one folder per format family, one reader module per format.

Each family folder (`journal/`, `prometheus/`, `pyspy/`, `flight_recorder/`, `kubernetes/`, `logs/`)
holds its readers and the byte helpers only they use; `common/` holds what every reader shares
(reading bytes, the canonical frames' schemas, when a snapshot was taken). Each reader module
exposes `NAME`, `sniff(head: bytes, path: Path) -> bool` and `parse(path: Path) -> ParseResult`,
and calls `register(...)` at import. A format whose inputs grow large also gives `stream(path)`: the
same rows in parts of bounded size, so that ingest writes each part to the case as it is read and
never holds the whole input (`read_in_parts`).

`READERS` is the sniffing order, stated: the first reader whose sniffer accepts a file reads it, so
the most specific formats come first and the catch-all server log last. A new format is one new
module in its family's folder and one line in `READERS`; a test fails if a reader module is not
listed or did not register. The readers are imported on first use of the registry, so a module
that needs only a family's byte helpers (the collector's `promtext`) stays light.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from forensics.errors import ForensicsError, WrongFormat
from forensics.sources.common.rawio import read_head
from forensics.sources.common.schema import ParseResult


@dataclass(frozen=True)
class Source:
    """A registered input format."""

    name: str
    sniff: Callable[[bytes, Path], bool]
    parse: Callable[[Path], ParseResult]
    module: str
    # the input's rows in parts, for formats whose inputs grow large (None: `parse` reads it whole)
    stream: Callable[[Path], Iterator[ParseResult]] | None = None


def read_in_parts(source: Source, path: Path) -> Iterator[ParseResult]:
    """What `source` reads from `path`, in parts of bounded size where the format can (else one
    part: the whole input). The parts' counts add up to the input's; a part may carry only the
    input's `damage` and `notes`, with no rows."""
    if source.stream is None:
        yield source.parse(path)
    else:
        yield from source.stream(path)


def combine(parts: list[ParseResult]) -> ParseResult:
    """One input's parts as one result (rows and quarantine concatenated, extra columns after the
    schema's in name order, counts added, damage and notes kept)."""
    from forensics.sources.common.schema import QUARANTINE_SCHEMA, SCHEMAS, empty

    frame = parts[0].frame
    rows = [p.rows for p in parts if p.rows.height] or [empty(SCHEMAS[frame])]
    joined = pl.concat(rows, how="diagonal_relaxed")
    named = list(SCHEMAS[frame])
    joined = joined.select(*named, *sorted(set(joined.columns) - set(named)))
    quarantine = [p.quarantine for p in parts if p.quarantine.height] or [empty(QUARANTINE_SCHEMA)]
    counted = [p.parsed_records for p in parts]
    return ParseResult(frame, joined, pl.concat(quarantine), records=sum(p.records for p in parts),
                       parsed_records=None if all(c is None for c in counted) else sum(p.parsed for p in parts),
                       damage="; ".join(p.damage for p in parts if p.damage) or None,
                       notes=[note for p in parts for note in p.notes])


_REGISTRY: dict[str, Source] = {}


def register(name: str, sniff: Callable[[bytes, Path], bool], parse: Callable[[Path], ParseResult],
             *, module: str, stream: Callable[[Path], Iterator[ParseResult]] | None = None) -> None:
    """Add a format to the registry; a second format with the same name is an error."""
    if name in _REGISTRY:
        raise ForensicsError(f"source {name!r} registered twice ({_REGISTRY[name].module} and {module})")
    _REGISTRY[name] = Source(name, sniff, parse, module, stream)


#: The reader modules in sniffing order (module paths under this package). Binary and
#: self-describing formats first, then tables and dumps with a fixed head, the catch-all last.
READERS = (
    "journal.journal_native",
    "journal.journal_export",
    "journal.journal_json",
    "flight_recorder.flight_recorder",
    "flight_recorder.flight_recorder_text",
    "kubernetes.kubectl",  # a describe reads as YAML too: the table and describe reader first
    "kubernetes.kubectl_logs",  # container logs with kubectl's prefix or stamps, stern's: before the catch-all
    "kubernetes.kubectl_objects",
    "prometheus.prometheus_api",
    "prometheus.prometheus_text",
    "pyspy.pyspy_json",
    "pyspy.pyspy_text",
    "logs.systemctl_status",
    "logs.server_log",  # any text under logs/ or named *.log: the catch-all, so last
)


def _load_readers() -> None:
    """Import every reader in `READERS` order (each registers itself), once."""
    for module in READERS:
        importlib.import_module(f"{__name__}.{module}")


def registered() -> dict[str, Source]:
    """Every registered format by name, in the sniffing order `READERS` states (readers import one
    another, so the order they registered in is not it); a format registered from elsewhere last."""
    _load_readers()
    place = {f"{__name__}.{module}": n for n, module in enumerate(READERS)}
    ordered = sorted(_REGISTRY.values(), key=lambda source: place.get(source.module, len(place)))
    return {source.name: source for source in ordered}


def source_modules() -> list[str]:
    """Module paths (under this package) of the reader modules in the family folders: every module
    of a family folder that defines a `sniff` (the byte helpers beside them define none)."""
    found = []
    for family in pkgutil.iter_modules(__path__):
        if not family.ispkg or family.name == "common":
            continue
        for module in pkgutil.iter_modules([str(Path(__path__[0]) / family.name)]):
            text = (Path(__path__[0]) / family.name / f"{module.name}.py")
            if module.name.startswith("_") or not text.is_file():
                continue
            if "\ndef sniff(" in text.read_text():
                found.append(f"{family.name}.{module.name}")
    return sorted(found)


def detect(path: Path) -> Source:
    """The format that recognises `path` (a file, or a directory some format reads whole);
    `WrongFormat` naming the file if none does. Sniffers see b"" as the head of a directory."""
    head = b"" if path.is_dir() else read_head(path)
    for source in registered().values():
        if source.sniff(head, path):
            return source
    if not path.is_dir() and not head:
        raise WrongFormat(f"{path}: empty file")
    tried = ", ".join(sorted(_REGISTRY))
    raise WrongFormat(f"{path}: not a recognised input (tried {tried})")


def get(name: str) -> Source:
    """A registered format by name."""
    _load_readers()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ForensicsError(f"no source named {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None
