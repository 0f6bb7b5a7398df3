"""forensics: post-mortem forensics for LLM serving fleets.

Sources (journald, later Prometheus and py-spy) are read into a case of canonical Parquet frames;
later stages align them on one timeline, detect findings and render reports.
"""

from forensics.case import Case, ingest, load_case
from forensics.errors import (
    CaseError,
    ForensicsError,
    ParseError,
    SchemaError,
    WrongFormat,
)

__all__ = ["Case", "CaseError", "ForensicsError", "ParseError", "SchemaError", "WrongFormat", "ingest", "load_case"]
__version__ = "0.1.0"
