"""The case: a bundle read into Parquet frames, and everything about where it lives.

`build` turns a bundle into the case (events, samples, stacks, quarantine; `ingest`, `read_bundle`),
`discovery` says which files of a bundle are its inputs, `opened` opens a case (`load_case`,
`Case`), `targets` says where a case or report may be written, `staging` swaps a case in whole (in
a folder or an object store), `bundle` opens the evidence (a folder or a tarball unpacked safely),
`incident` reads `incident.toml` against its schema, `store` lays the frames out as Hive partitions
by host, `places` says where a case lives (a folder or an fsspec URL) and locks it, `cluster` runs
ingest's tasks here or on Dask. The names people use (`load_case`, `ingest`, `Case`, …) are
importable from here as before; they load on first use, so that importing `forensics.case.places`
stays light.
"""

from __future__ import annotations

from typing import Any

#: each name importable from here, with the module it lives in
PUBLIC = {"CASE_MARKER": "opened", "Case": "opened", "FOLLOW_LINKS_ENV": "discovery", "FRAMES": "opened",
          "MANIFEST_VERSION": "opened", "MAX_HOSTS": "build", "OUTPUT_MARKER": "targets", "build_case": "build",
          "case_lock": "targets", "check_case_target": "targets", "check_output_target": "targets",
          "discover": "discovery", "host_unit_summary": "opened", "ingest": "build", "instance_summary": "opened",
          "load_case": "opened", "read_bundle": "build", "staged_case": "staging", "to_pandas": "opened"}
__all__ = list(PUBLIC)


def __getattr__(name: str) -> Any:
    if name in PUBLIC:
        from forensics.case import build, discovery, opened, staging, targets

        modules = {"build": build, "discovery": discovery, "opened": opened, "staging": staging, "targets": targets}
        return getattr(modules[PUBLIC[name]], name)
    raise AttributeError(f"module 'forensics.case' has no attribute {name!r}")
