"""The case: a bundle read into Parquet frames, and everything about where it lives.

`build` turns a bundle into the case (events, samples, stacks, quarantine; `ingest`, `load_case`,
`read_bundle`), `bundle` opens the evidence (a folder or a tarball unpacked safely), `incident`
reads `incident.toml` against its schema, `store` lays the frames out as Hive partitions by host,
`places` says where a case lives (a folder or an fsspec URL) and locks it, `cluster` runs ingest's
tasks here or on Dask. The names people use (`load_case`, `ingest`, `Case`, …) are importable from
here as before; they load on first use, so that importing `forensics.case.places` stays light.
"""

from __future__ import annotations

from typing import Any

PUBLIC = ("CASE_MARKER", "Case", "FOLLOW_LINKS_ENV", "FRAMES", "MANIFEST_VERSION", "MAX_HOSTS", "OUTPUT_MARKER",
          "build_case", "case_lock", "check_case_target", "check_output_target", "discover", "host_unit_summary",
          "ingest", "instance_summary", "load_case", "read_bundle", "staged_case", "to_pandas")
__all__ = list(PUBLIC)


def __getattr__(name: str) -> Any:
    if name in PUBLIC:
        from forensics.case import build

        return getattr(build, name)
    raise AttributeError(f"module 'forensics.case' has no attribute {name!r}")
