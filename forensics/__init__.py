"""forensics: post-mortem forensics for LLM serving fleets.

Sources (journald, server logs, Prometheus, py-spy) are read into a case of canonical Parquet
frames; later stages align them on one timeline, detect findings and render reports. The package
is laid out one folder per stage (docs/layout.md): capture, sources (one folder per format family), case, timeline,
detect, render; the entry points (`analyze`, `report`, `cli`) and `errors` stay here.
"""

from __future__ import annotations

import os
from typing import Any

from forensics.errors import (
    CaseError,
    ForensicsError,
    ParseError,
    SchemaError,
    WrongFormat,
)

# numpy's OpenBLAS starts a thread per core that spins for about 0.1 CPU-s at import, whether or not
# any matrix work follows (none does here: measured 0.25 -> 0.13 CPU-s for `import numpy`). Only
# effective when this package is imported before numpy; a value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__all__ = ["Case", "CaseError", "ForensicsError", "ParseError", "SchemaError", "WrongFormat", "ingest", "load_case"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """`Case`, `ingest` and `load_case` on first use: importing the package stays light (the data
    stack loads only when a case is opened)."""
    if name in ("Case", "ingest", "load_case"):
        from forensics.case import build, opened

        return getattr(build if name == "ingest" else opened, name)
    raise AttributeError(f"module 'forensics' has no attribute {name!r}")
