"""Memory-mapped input files guarded against shrinking while they are read.

A file another program truncates while forensics has it mapped (a bundle still being copied, a
log rotated by truncation) would raise SIGBUS at the first read past its new end and end the
whole process. A `GuardedMap` (`_mapguard`, in C: the way systemd's own journal reader does it)
reads such a page as zeros instead and notes the file: the reader that mapped it, or the case
built from it, then says the file shrank rather than trusting what it read (`shrunk_under`,
`GuardedMap.shrunk`). Each shrinking is told once.

A map stops being guarded before it is unmapped (`close`, or its `__del__`, which Python runs
before an mmap's memory is given back), so a guard never covers memory another map may get.
"""

from __future__ import annotations

import collections
import itertools
import mmap
import os
import threading
from typing import NamedTuple

from forensics.sources.common import _mapguard

SHRANK = "the file shrank while it was read (another program truncated it)"

_lock = threading.Lock()
_tokens = itertools.count(1)
_guarded: dict[int, tuple[int, str]] = {}  # token -> (slot, the mapped file's real path)
# (token, path, fault) of maps no longer guarded, taken in under the lock: `__del__` may run in the
# middle of anything (a garbage collection inside `shrunk_under` too), so it only appends here
_unguarded: collections.deque[tuple[int, str, int]] = collections.deque()
_shrunk: dict[str, int] = {}  # file -> the first byte found gone, of maps no longer guarded, not told
_told: set[int] = set()  # tokens of guarded maps whose shrinking was told


class Shrunk(NamedTuple):
    """A file found shrunk: its path, the first byte found gone, and its size now (None: gone)."""

    path: str
    at: int
    size_now: int | None

    def said(self) -> str:
        """The shrinking in words, with the file's size now."""
        now = f"it ends at byte {self.size_now:,} now" if self.size_now is not None else "it is gone now"
        return f"{SHRANK}: {now}, and byte {self.at:,} on was read as zeros"


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


class GuardedMap(mmap.mmap):
    """A read-only map of a file, guarded while it is mapped (`guard` it once made)."""

    _slot, _token, _path = -1, 0, ""

    def guard(self, path: str | os.PathLike[str]) -> None:
        """Guard this map of the file at `path` (unguarded when every slot is taken)."""
        token = next(_tokens)
        slot = _mapguard.guard(self, token)
        if slot < 0:
            return
        self._slot, self._token, self._path = slot, token, os.path.realpath(path)
        with _lock:
            _take_in()
            _guarded[token] = (slot, self._path)

    def shrunk(self) -> Shrunk | None:
        """For a reader that says the shrinking itself: where this map's file was first found
        shrunk (then `shrunk_under` does not tell it again), or None."""
        at = _mapguard.fault(self._slot, self._token) if self._slot >= 0 else -1
        if at < 0:
            return None
        _told.add(self._token)
        return Shrunk(self._path, at, _size(self._path))

    def _unguard(self) -> None:
        slot, self._slot = self._slot, -1
        if slot >= 0:
            _unguarded.append((self._token, self._path, _mapguard.release(slot, self._token)))

    def close(self) -> None:
        self._unguard()
        super().close()

    def __del__(self) -> None:
        self._unguard()


def _take_in() -> None:
    """Maps no longer guarded, taken off the registry (under `_lock`)."""
    while _unguarded:
        token, path, at = _unguarded.popleft()
        _guarded.pop(token, None)
        if at >= 0 and token not in _told:
            _shrunk.setdefault(path, at)
        _told.discard(token)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def shrunk_under(root: str | os.PathLike[str]) -> Shrunk | None:
    """A file at `root` or under it found shrunk while mapped, not told before (the first such
    file by name), or None."""
    root = os.path.realpath(root)
    with _lock:
        _take_in()
        live = sorted((path, at, token) for token, (slot, path) in list(_guarded.items())
                      if token not in _told and _under(path, root) and (at := _mapguard.fault(slot, token)) >= 0)
        gone = sorted((path, at, 0) for path, at in _shrunk.items() if _under(path, root))
        if not live and not gone:
            return None
        path, at, token = min(live + gone)
        if token:
            _told.add(token)
        else:
            del _shrunk[path]
    return Shrunk(path, at, _size(path))


def forget_under(root: str | os.PathLike[str]) -> None:
    """Take every shrinking of a file at `root` or under it as told: what an earlier reading of
    the same bundle met is not the next one's."""
    root = os.path.realpath(root)
    with _lock:
        _take_in()
        for path in [path for path in _shrunk if _under(path, root)]:
            del _shrunk[path]
        _told.update(token for token, (_, path) in _guarded.items() if _under(path, root))
