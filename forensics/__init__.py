"""forensics: post-mortem forensics for LLM serving fleets.

Sources (journald, server logs, Prometheus, py-spy) are read into a case of canonical Parquet
frames; later stages align them on one timeline, detect findings and render reports. The package
is laid out one folder per stage (docs/layout.md): capture, formats and sources, case, timeline,
detect, render; the entry points (`analyze`, `report`, `cli`) and `errors` stay here.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

from forensics.errors import (
    CaseError,
    ForensicsError,
    ParseError,
    SchemaError,
    WrongFormat,
)

__all__ = ["Case", "CaseError", "ForensicsError", "ParseError", "SchemaError", "WrongFormat", "ingest", "load_case"]
__version__ = "0.1.0"

#: Modules that moved in 0.1 (one folder per stage): the old names still import, for one release,
#: with a DeprecationWarning that names the new place.
MOVED = {
    "forensics.collect": "forensics.capture.collect",
    "forensics.watch": "forensics.capture.watch",
    "forensics.pull": "forensics.capture.pull",
    "forensics.store": "forensics.case.store",
    "forensics.places": "forensics.case.places",
    "forensics.cluster": "forensics.case.cluster",
    "forensics.bundle": "forensics.case.bundle",
    "forensics.incident": "forensics.case.incident",
    "forensics.schema": "forensics.formats.schema",
    "forensics.align": "forensics.timeline.align",
    "forensics.logs": "forensics.timeline.logs",
    "forensics.metrics": "forensics.timeline.metrics",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as the module at its new place (the same object, so patches and
    identity checks see one module), warning once per name."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} moved to {new}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        # the import system hands out what sys.modules holds under the old name once this returns
        sys.modules[module.__name__] = importlib.import_module(new)


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())


def __getattr__(name: str) -> Any:
    """`Case`, `ingest` and `load_case` on first use: importing the package stays light (the data
    stack loads only when a case is opened)."""
    if name in ("Case", "ingest", "load_case"):
        from forensics.case import build

        return getattr(build, name)
    raise AttributeError(f"module 'forensics' has no attribute {name!r}")
