"""A reproduction of the TP-desync wedge with real processes, for tests and fixtures.

Needs the `lab` extra (PyTorch CPU, py-spy, setproctitle): `pip install -e '.[lab]'`.
`forensics.lab.engine` is one scheduler rank; `forensics.lab.tp_desync` starts a prefill and a
decode engine of four ranks each, triggers the desync and captures py-spy dumps of all of them.
"""

from __future__ import annotations

from forensics.errors import ForensicsError


class LabError(ForensicsError):
    """A lab process failed to start, died or gave no evidence; says which and where its log is."""
