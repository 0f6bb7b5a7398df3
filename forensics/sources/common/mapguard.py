"""Memory-mapped input files guarded against shrinking while they are read.

A file another program truncates or rewrites while forensics has it mapped (a bundle still being
copied, a log rotated by truncation) would raise SIGBUS at the first read past its new end and
end the whole process. Guarded (`_mapguard`, in C: the way systemd's own journal reader does it),
such a page reads as zeros instead and the file is noted: the reader that mapped it, or the case
built from it, then says the file shrank rather than trusting what it read past that byte.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref

from forensics.sources.common import _mapguard

SHRANK = "the file shrank while it was read (another program truncated or rewrote it)"

_lock = threading.Lock()
_guarded: dict[int, str] = {}  # slot -> the mapped file's real path
_shrunk: dict[str, int] = {}  # file -> the first byte found gone, of maps since unmapped
_said: set[int] = set()  # slots whose shrinking `shrunk_under` has told already


class Guard:
    """One guarded map, for a reader that handles its file's shrinking itself (`shrunk`)."""

    def __init__(self, slot: int) -> None:
        self.slot = slot

    def shrunk(self) -> int:
        """Where the file was first found shrunk (-1: it was not); said here, `shrunk_under` does
        not tell it again."""
        at = _mapguard.fault(self.slot)
        if at >= 0:
            with _lock:
                _said.add(self.slot)
        return at


def guard(data: mmap.mmap, path: str | os.PathLike[str]) -> Guard | None:
    """Guard the map `data` of the file at `path` for as long as it lives; None when every slot is
    taken (it is then read unguarded, as before there was a guard)."""
    slot = _mapguard.guard(data)
    if slot < 0:
        return None
    with _lock:
        _guarded[slot] = os.path.realpath(path)
    weakref.finalize(data, _released, slot)
    return Guard(slot)


def _released(slot: int) -> None:
    with _lock:
        path = _guarded.pop(slot)
        at = _mapguard.release(slot)
        if at >= 0 and slot not in _said:
            _shrunk.setdefault(path, at)
        _said.discard(slot)


def shrunk_under(root: str | os.PathLike[str]) -> tuple[str, int] | None:
    """A file at `root` or under it found shrunk while mapped, not told before: its path and the
    first byte found gone (the first such file by name), or None. Each shrinking is told once."""
    root = os.path.realpath(root)

    def under(path: str) -> bool:
        return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

    with _lock:
        live = sorted((path, at, slot) for slot, path in _guarded.items()
                      if slot not in _said and under(path) and (at := _mapguard.fault(slot)) >= 0)
        gone = sorted((path, at, -1) for path, at in _shrunk.items() if under(path))
        if not live and not gone:
            return None
        path, at, slot = min(live + gone)
        if slot >= 0:
            _said.add(slot)
        else:
            del _shrunk[path]
    return path, at
