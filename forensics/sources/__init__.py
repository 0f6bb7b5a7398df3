"""The registry of input formats: one module per format, each registered by name.

Each module exposes `NAME`, `sniff(head: bytes, path: Path) -> bool` and
`parse(path: Path) -> ParseResult`, and calls `register(...)` at import. A format whose inputs grow
large also gives `stream(path)`: the same rows in parts of bounded size, so that ingest writes each
part to the case as it is read and never holds the whole input (`read_in_parts`). Importing this package
imports every module in it, so a format is added by dropping one file here; a test fails if a
module in this folder did not register.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from forensics.errors import ForensicsError, WrongFormat
from forensics.formats.rawio import read_head
from forensics.formats.schema import ParseResult


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
    from forensics.formats.schema import QUARANTINE_SCHEMA, SCHEMAS, empty

    frame = parts[0].frame
    rows = [p.rows for p in parts if p.rows.height] or [empty(SCHEMAS[frame])]
    joined = pl.concat(rows, how="diagonal_relaxed")
    named = list(SCHEMAS[frame])
    joined = joined.select(*named, *sorted(set(joined.columns) - set(named)))
    quarantine = [p.quarantine for p in parts if p.quarantine.height] or [empty(QUARANTINE_SCHEMA)]
    counted = [p.parsed_records for p in parts]
    return ParseResult(frame, joined, pl.concat(quarantine), records=sum(p.records for p in parts),
                       parsed_records=None if all(c is None for c in counted) else sum(p.parsed for p in parts),
                       damage=next((p.damage for p in parts if p.damage), None),
                       notes=[note for p in parts for note in p.notes])


_REGISTRY: dict[str, Source] = {}


def register(name: str, sniff: Callable[[bytes, Path], bool], parse: Callable[[Path], ParseResult],
             *, module: str, stream: Callable[[Path], Iterator[ParseResult]] | None = None) -> None:
    """Add a format to the registry; a second format with the same name is an error."""
    if name in _REGISTRY:
        raise ForensicsError(f"source {name!r} registered twice ({_REGISTRY[name].module} and {module})")
    _REGISTRY[name] = Source(name, sniff, parse, module, stream)


def registered() -> dict[str, Source]:
    """Every registered format by name."""
    return dict(_REGISTRY)


def source_modules() -> list[str]:
    """Names of the format modules that live in this folder."""
    return [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]


def detect(path: Path) -> Source:
    """The format that recognises `path` (a file, or a directory some format reads whole);
    `WrongFormat` naming the file if none does. Sniffers see b"" as the head of a directory."""
    head = b"" if path.is_dir() else read_head(path)
    for source in _REGISTRY.values():
        if source.sniff(head, path):
            return source
    if not path.is_dir() and not head:
        raise WrongFormat(f"{path}: empty file")
    tried = ", ".join(sorted(_REGISTRY))
    raise WrongFormat(f"{path}: not a recognised input (tried {tried})")


def get(name: str) -> Source:
    """A registered format by name."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ForensicsError(f"no source named {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


for _module in source_modules():
    importlib.import_module(f"{__name__}.{_module}")
