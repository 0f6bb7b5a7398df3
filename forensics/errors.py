"""The exception hierarchy: one root, a few subclasses, each naming the place that went wrong."""

from __future__ import annotations


class ForensicsError(Exception):
    """Root of every error this package raises on purpose."""


class WrongFormat(ForensicsError):
    """The input is not in the format the parser was asked to read."""


class ParseError(ForensicsError):
    """An input cannot be read at all; names the file and, where known, the line or byte offset."""

    def __init__(self, path: str, msg: str, *, line: int | None = None, offset: int | None = None) -> None:
        """Name the file, and the line or byte offset where known."""
        self.path = path
        self.line = line
        self.offset = offset
        self.msg = msg
        where = path
        if line is not None:
            where += f" line {line}"
        elif offset is not None:
            where += f" offset {offset}"
        super().__init__(f"{where}: {msg}")


class SchemaError(ForensicsError):
    """A frame does not match its declared schema; lists every problem at once."""

    def __init__(self, frame: str, problems: list[str]) -> None:
        """Name the frame and list every problem."""
        self.frame = frame
        self.problems = problems
        super().__init__(f"{frame}: " + "; ".join(problems))


class CaseError(ForensicsError):
    """A case folder is missing, incomplete or from an incompatible version."""


class MissingSystemDependency(ForensicsError):
    """An optional component needs a system package or extra that is not installed."""
