"""The registry of input formats: one module per format, each registered by name.

Each module exposes `NAME`, `sniff(head: bytes, path: Path) -> bool` and
`parse(path: Path) -> ParseResult`, and calls `register(...)` at import. Importing this package
imports every module in it, so a format is added by dropping one file here; a test fails if a
module in this folder did not register.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from forensics.errors import ForensicsError, WrongFormat
from forensics.formats.rawio import read_head


@dataclass
class ParseResult:
    """What a parser read from one input: canonical rows, quarantined rows and the count of records seen."""

    frame: str  # which canonical frame the rows belong to, e.g. "events"
    rows: pl.DataFrame
    quarantine: pl.DataFrame
    records: int  # records seen = parsed + len(quarantine), checked by `check_accounting`
    # Records read into `rows`; None when each record is one row (a journal entry). A py-spy dump
    # (the record) is many rows (its frames).
    parsed_records: int | None = None
    # Why the input could only be read in part (e.g. a compressed copy cut short): what was read
    # before it is in `rows`, and the manifest reports this beside the counts.
    damage: str | None = None
    # What the reader changed or guessed to read the input (e.g. a py-spy dump pasted without its
    # head), in words: reported beside the counts, never silently.
    notes: list[str] = field(default_factory=list)

    @property
    def parsed(self) -> int:
        """How many records were read into `rows`."""
        return self.rows.height if self.parsed_records is None else self.parsed_records

    def check_accounting(self, path: Path) -> None:
        """Raise if a record vanished: seen must equal parsed + quarantined."""
        if self.records != self.parsed + self.quarantine.height:
            raise ForensicsError(
                f"{path}: {self.records} records seen but {self.parsed} parsed + "
                f"{self.quarantine.height} quarantined"
            )


@dataclass(frozen=True)
class Source:
    """A registered input format."""

    name: str
    sniff: Callable[[bytes, Path], bool]
    parse: Callable[[Path], ParseResult]
    module: str


_REGISTRY: dict[str, Source] = {}


def register(name: str, sniff: Callable[[bytes, Path], bool], parse: Callable[[Path], ParseResult],
             *, module: str) -> None:
    """Add a format to the registry; a second format with the same name is an error."""
    if name in _REGISTRY:
        raise ForensicsError(f"source {name!r} registered twice ({_REGISTRY[name].module} and {module})")
    _REGISTRY[name] = Source(name, sniff, parse, module)


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
