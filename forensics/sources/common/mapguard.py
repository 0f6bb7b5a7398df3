"""Memory-mapped input files guarded against shrinking while they are read.

A file another program truncates while forensics has it mapped (a bundle still being copied, a
log rotated by truncation) would raise SIGBUS at the first read past its new end and end the
whole process. A `GuardedMap` (`_mapguard`, in C: the way systemd's own journal reader does it)
reads such a page as zeros instead and notes it. Whoever reads the file then asks whether it
shrank (`shrunk_under`, `GuardedMap.shrunk`), by the pages found gone and by the file's size
against the map's (a cut inside the last page reads zeros without any fault), and says so rather
than trusting what it read. Each shrinking is told once.

A map stops being guarded before it is unmapped (`close`, `__exit__`, or its `__del__`, which
Python runs before an mmap's memory is given back), so a guard never covers memory another map
may get.
"""

from __future__ import annotations

import collections
import itertools
import mmap
import os
import threading
from typing import Any, NamedTuple

from forensics.sources.common import _mapguard

SHRANK = "the file shrank"

_lock = threading.Lock()
_tokens = itertools.count(1)
_guarded: dict[int, tuple[int, str, int]] = {}  # token -> (slot, the mapped file's real path, mapped length)
# (token, path, length, lowest page gone) of maps no longer guarded, taken in under the lock:
# `__del__` may run in the middle of anything (a garbage collection inside `shrunk_under` too), so
# it only appends here
_unguarded: collections.deque[tuple[int, str, int, int]] = collections.deque()
_shrunk: dict[str, tuple[int, int]] = {}  # file -> (mapped length, lowest page gone) of maps gone, not told
_told: set[int] = set()  # tokens of guarded maps whose shrinking was told


class Shrunk(NamedTuple):
    """A file found shrunk: its path, where its zeros begin, its length when mapped, and its size now
    (None: it is gone)."""

    path: str
    at: int
    length: int
    size_now: int | None

    def said(self, when: str = "while it was read") -> str:
        """What happened to the file (`when`), in words."""
        if self.size_now is not None and self.size_now < self.length:
            return (f"{SHRANK} {when}: it was {self.length:,} bytes, it is {self.size_now:,} now, and whatever "
                    f"was read of it from byte {self.at:,} on read as zeros")
        return (f"a read of the file failed {when}, at byte {self.at:,} (it was cut and has grown again, or the "
                "disk or network file system failed to read it): the bytes from there on read as zeros")


def _found(path: str, length: int, fault: int) -> Shrunk | None:
    """The shrinking of the file at `path`, mapped `length` bytes long, whose lowest page found gone
    is at `fault` (-1: none), or None when its pages all read and it is no shorter than mapped."""
    try:
        size_now: int | None = os.stat(path).st_size
    except OSError:
        size_now = None
    short = size_now is not None and size_now < length
    if fault < 0 and not short:
        return None
    return Shrunk(path, min(at for at in (fault, size_now if short else -1) if at >= 0), length, size_now)


class GuardedMap(mmap.mmap):
    """A read-only map of a file, guarded while it is mapped (`guard` it once made)."""

    _slot, _token, _path = -1, 0, ""

    def guard(self, path: str | os.PathLike[str]) -> None:
        """Guard this map of the file at `path` (unguarded when every slot is taken)."""
        if self._slot >= 0:
            return
        token = next(_tokens)
        slot = _mapguard.guard(self, token)
        if slot < 0:
            return
        self._slot, self._token, self._path = slot, token, os.path.realpath(path)
        with _lock:
            _take_in()
            _guarded[token] = (slot, self._path, len(self))

    def shrunk(self) -> Shrunk | None:
        """For a reader that says the shrinking itself: how this map's file shrank (then
        `shrunk_under` does not tell it again), or None."""
        if self._slot < 0:
            return None
        found = _found(self._path, len(self), _mapguard.fault(self._slot, self._token))
        if found is not None:
            with _lock:
                _told.add(self._token)
        return found

    def _unguard(self) -> None:
        slot, self._slot = self._slot, -1
        if slot >= 0:
            _unguarded.append((self._token, self._path, len(self), _mapguard.release(slot, self._token)))

    def close(self) -> None:
        path = self._path if self._slot >= 0 else ""
        self._unguard()
        try:
            super().close()
        except BufferError:  # still mapped (a view of it is alive): guarded again
            if path:
                self.guard(path)
            raise

    def __exit__(self, *exc: Any) -> None:
        self.close()  # mmap's own __exit__ would unmap it without unguarding it

    def __del__(self) -> None:
        self._unguard()


def _take_in() -> None:
    """Maps no longer guarded, taken off the registry (under `_lock`)."""
    while _unguarded:
        token, path, length, fault = _unguarded.popleft()
        _guarded.pop(token, None)
        if token not in _told and path not in _shrunk and _found(path, length, fault) is not None:
            _shrunk[path] = (length, fault)
        _told.discard(token)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def shrunk_under(root: str | os.PathLike[str]) -> Shrunk | None:
    """A file at `root` or under it found shrunk while mapped, not told before (the first such
    file by name), or None."""
    root = os.path.realpath(root)
    with _lock:
        _take_in()
        live = [(found, token) for token, (slot, path, length) in list(_guarded.items())
                if token not in _told and _under(path, root)
                and (found := _found(path, length, _mapguard.fault(slot, token))) is not None]
        gone = [(found, 0) for path, (length, fault) in _shrunk.items()
                if _under(path, root) and (found := _found(path, length, fault)) is not None]
        if not live and not gone:
            return None
        found, token = min(live + gone, key=lambda item: item[0].path)
        if token:
            _told.add(token)
        else:
            del _shrunk[found.path]
    return found


def forget_under(root: str | os.PathLike[str]) -> None:
    """Take every shrinking of a file at `root` or under it as told: what an earlier reading of
    the same bundle met is not the next one's."""
    root = os.path.realpath(root)
    with _lock:
        _take_in()
        for path in [path for path in _shrunk if _under(path, root)]:
            del _shrunk[path]
        _told.update(token for token, (_, path, _) in _guarded.items() if _under(path, root))
