"""Unpacking an archive with code of our own: a bundle's tarball or zip, and a host's tar stream.

Only regular files and folders are ever created. No symbolic link, hard link, device or FIFO is
made or followed: every folder on a member's path is opened relative to its parent with
`O_NOFOLLOW`, every file is created the same way, so a name can never lead out of the destination,
whatever the interpreter's own `tarfile` would have done (CVE-2025-4517 and its kin are bugs of
resolving links; here no link exists to resolve). Members are refused, named, with the reason, and
the rest is unpacked.

Everything an archive can make us hold or do is bounded before it is done: a header's size, a pax
record or long name (read only up to its bound, the rest skipped unread), the bytes unpacked in all,
the number of members, the number of refusals listed, and the time (a deadline checked between
blocks). The tar format read is POSIX ustar with pax (`x`, `g`) and GNU long-name (`L`, `K`)
headers, as GNU tar, bsdtar, `git archive` and Python's `tarfile` write it.
"""

from __future__ import annotations

import bz2
import errno
import gzip
import lzma
import os
import stat
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

BLOCK = 512
CHUNK = 1 << 20
MAX_DEPTH = 64  # folders on a member's path
MAX_NAME = 4096  # bytes of a member's name (Linux's PATH_MAX); a longer one is refused unread
MAX_PART = 255  # bytes of one part of a name (NAME_MAX)
MAX_PAX = 1 << 20  # bytes of one pax header: real ones hold a path and a few times (< 1 KiB)
MAX_MEMBERS = 100_000  # members of one archive, refused ones included
MAX_LISTED = 1000  # refusals listed one by one; past that, counted in one line
MEMBERS_ENV = "FORENSICS_MAX_MEMBERS"
UNPACKED_ENV = "FORENSICS_MAX_UNPACKED"
MAX_UNPACKED = 8 << 30

_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
_TYPE_NAMES = {b"1": "a hard link", b"2": "a symbolic link", b"3": "a character device", b"4": "a block device",
               b"6": "a FIFO"}
_SKIPPED_QUIETLY = {b"V", b"D", b"M", b"N"}  # volume labels, dump directories, multi-volume parts


class Damaged(Exception):
    """The archive cannot be read on from here (cut short, a bad header, a compression error)."""


class DeadlineReached(Exception):
    """The unpacking ran past its deadline."""


def _limit(env: str, default: int) -> int:
    try:
        return max(1, int(float(os.environ.get(env, default))))
    except ValueError:
        return default


def unpacked_limit() -> int:
    """Bytes an archive may unpack to in all (`FORENSICS_MAX_UNPACKED`, 8 GiB by default)."""
    return _limit(UNPACKED_ENV, MAX_UNPACKED)


def member_limit() -> int:
    """Members one archive may hold (`FORENSICS_MAX_MEMBERS`, 100,000 by default)."""
    return _limit(MEMBERS_ENV, MAX_MEMBERS)


@dataclass
class Unpacker:
    """Writes members under `destination`, each checked first; lists what it refused and why.

    `what` names the archive in reasons ("the tarball", "the host's stream"); `deadline` is a
    `time.monotonic()` value past which unpacking stops."""

    destination: Path
    what: str = "the tarball"
    deadline: float | None = None
    on_file: Callable[[int], None] | None = None
    budget: int = field(default_factory=unpacked_limit)
    members_left: int = field(default_factory=member_limit)
    files: int = 0
    bytes: int = 0
    refused: list[dict[str, str]] = field(default_factory=list)
    refused_count: int = 0
    stopped: str | None = None  # why unpacking ended before the archive did
    _root: int = -1

    def __enter__(self) -> Unpacker:
        self.destination.mkdir(parents=True, exist_ok=True)
        self._root = os.open(self.destination, _NOFOLLOW_DIR)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._root)

    # -- what members become ----------------------------------------------------------------
    def refuse(self, name: str, reason: str) -> None:
        """List `name` as not unpacked, with why (past MAX_LISTED refusals, only counted)."""
        self.refused_count += 1
        if len(self.refused) < MAX_LISTED:
            self.refused.append({"path": _shown(name), "reason": f"not extracted from {self.what}: {reason}"})

    def listing(self, stop: bool = True) -> list[dict[str, str]]:
        """The refusals (and, with `stop`, why unpacking stopped early), for the skipped files."""
        rows = list(self.refused)
        if self.refused_count > len(self.refused):
            rows.append({"path": f"({self.refused_count - len(self.refused):,} more members)",
                         "reason": f"not extracted from {self.what}: refused as well (only the first "
                                   f"{MAX_LISTED:,} refusals are listed one by one)"})
        if stop and self.stopped:
            rows.append({"path": str(self.destination.name), "reason": self.stopped})
        return rows

    def check_time(self) -> None:
        """Raise DeadlineReached once the deadline has passed."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeadlineReached(f"{self.what} was still being unpacked at its deadline")

    def take_member(self, name: str) -> bool:
        """Count one member; False (and the reason kept) once the archive holds too many."""
        self.members_left -= 1
        if self.members_left < 0:
            self.stopped = (f"{self.what} holds more than {member_limit():,} members ({MEMBERS_ENV}): "
                            f"the rest was not unpacked, from {_shown(name)} on")
            return False
        return True

    def parts(self, name: str) -> list[str] | str:
        """A member name's parts under the destination, or why it is refused. A leading `/` is
        dropped, as tar does; `..` anywhere is refused."""
        if "\x00" in name:
            return "a NUL byte in its name"
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            return "a name leading out of the bundle (..)"
        if len(parts) - 1 > MAX_DEPTH:
            return f"nested {len(parts) - 1} folders deep (at most {MAX_DEPTH})"
        if any(len(p.encode(errors="surrogateescape")) > MAX_PART for p in parts):
            return f"a part of its name longer than {MAX_PART} bytes"
        return parts

    def _folder(self, parts: list[str]) -> int:
        """An open descriptor of the folder `parts` under the destination, each made where missing
        and none followed if it is a link (ELOOP / ENOTDIR then, which the caller reports)."""
        fd = os.dup(self._root)
        try:
            for part in parts:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(part, _NOFOLLOW_DIR, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _pass_over(self, name: str, why: str, read_rest: Callable[[], None] | None) -> None:
        """Refuse a file member and read past what is left of its data."""
        self.refuse(name, why)
        if read_rest is not None:
            read_rest()

    def folder(self, name: str) -> None:
        """A folder member."""
        parts = self.parts(name)
        if isinstance(parts, str):
            self.refuse(name, parts)
            return
        try:
            os.close(self._folder(parts))
        except OSError as error:
            self.refuse(name, _os_reason(error))

    def file(self, name: str, size: int, chunks: Iterator[bytes], mtime: float | None = None,
             read_rest: Callable[[], None] | None = None) -> None:
        """A regular file member of `size` bytes whose data `chunks` yields. A refused member's data
        is passed over with `read_rest` (a stream must still be read past it)."""
        parts = self.parts(name)
        why = parts if isinstance(parts, str) else None
        if why is None and size > self.budget:
            why = (f"{size:,} bytes, over what {self.what} may still unpack to ({self.budget:,} bytes of "
                   f"{UNPACKED_ENV}={unpacked_limit():,})")
        if why is not None:
            self._pass_over(name, why, read_rest)
            return
        assert not isinstance(parts, str)
        fd = folder = -1
        written = 0
        try:
            folder = self._folder(parts[:-1])
            fd = os.open(parts[-1], _NEW_FILE, 0o644, dir_fd=folder)
            for chunk in chunks:
                written += len(chunk)
                if written > size:
                    raise Damaged(f"{_shown(name)} holds more than the {size:,} bytes its header gives")
                os.write(fd, chunk)
            if mtime is not None and 0 <= mtime < 1 << 33:
                os.utime(fd, (mtime, mtime))
        except BaseException as error:
            if fd >= 0:  # a member that could not be written whole is not kept half-written
                os.close(fd)
                fd = -1
                _unlink(folder, parts[-1])
            if not isinstance(error, OSError):
                raise
            self._pass_over(name, _os_reason(error), read_rest)
            return
        finally:
            if fd >= 0:
                os.close(fd)
            if folder >= 0:
                os.close(folder)
        self.budget -= written
        self.bytes += written
        self.files += 1
        if self.on_file is not None:
            self.on_file(written)


def _unlink(folder: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=folder)
    except OSError:
        pass


def _os_reason(error: OSError) -> str:
    if error.errno in (errno.ELOOP, errno.ENOTDIR):
        return "a part of its path is not a folder (an earlier member took that name)"
    if error.errno == errno.EISDIR:
        return "a folder of that name was unpacked before it"
    return (error.strerror or str(error))[:200]


def _shown(name: str) -> str:
    """A member name as a listing shows it: control characters and undecodable bytes as `\\xNN`,
    at most 300 characters."""
    shown = "".join(c if c.isprintable() else f"\\x{ord(c) & 0xFF:02x}" for c in name[:600])
    return shown if len(shown) <= 300 else shown[:297] + "..."


# -- tar --------------------------------------------------------------------------------------
class _Stream:
    """Exact reads from a byte stream, with the deadline checked between them."""

    def __init__(self, raw: IO[bytes], unpacker: Unpacker) -> None:
        self.raw = raw
        self.unpacker = unpacker
        self.offset = 0

    def read(self, n: int) -> bytes:
        self.unpacker.check_time()
        parts = []
        left = n
        while left:
            try:
                got = self.raw.read(min(left, CHUNK))
            except (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError) as error:
                raise Damaged(f"unreadable at byte {self.offset + n - left:,}: {error}") from None
            except Exception as error:  # noqa: BLE001 - zstandard's errors have no common base with the above
                raise Damaged(f"unreadable at byte {self.offset + n - left:,}: {error}") from None
            if not got:
                break
            parts.append(got)
            left -= len(got)
        data = b"".join(parts)
        self.offset += len(data)
        return data

    def exact(self, n: int) -> bytes:
        data = self.read(n)
        if len(data) < n:
            raise Damaged(f"cut short at byte {self.offset:,}")
        return data

    def chunks(self, size: int) -> Iterator[bytes]:
        """`size` bytes of member data in pieces, then the padding to the next block passed over."""
        left = size
        while left:
            chunk = self.exact(min(left, CHUNK))
            left -= len(chunk)
            yield chunk
        self.exact(-size % BLOCK)

    def skip(self, size: int) -> None:
        for _ in self.chunks(size):
            pass


def _number(field_: bytes) -> int:
    """A header's numeric field: octal text, or GNU's base-256 when its first bit is set."""
    if field_ and field_[0] & 0x80:
        value = int.from_bytes(field_[1:], "big") | ((field_[0] & 0x3F) << (8 * (len(field_) - 1)))
        return -value if field_[0] & 0x40 else value
    text = field_.split(b"\x00", 1)[0].strip(b" \x00")
    if not text:
        return 0
    if not all(48 <= c <= 55 for c in text):
        raise Damaged(f"a numeric header field is not octal: {text[:24]!r}")
    return int(text, 8)


def _text(field_: bytes) -> str:
    return field_.split(b"\x00", 1)[0].decode("utf-8", errors="surrogateescape")


def _pax(data: bytes) -> dict[str, str]:
    """Records `LEN KEY=VALUE\\n` of a pax header, read left to right once (no length is trusted
    past the data it claims)."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        if data[pos] == 0:
            break
        space = data.find(b" ", pos, pos + 21)
        if space < 0 or not data[pos:space].isdigit():
            raise Damaged("a pax record without its length")
        length = int(data[pos:space])
        end = pos + length
        if length <= space - pos + 1 or end > len(data) or data[end - 1] != 0x0A:
            raise Damaged("a pax record whose length does not fit its header")
        key, equals, value = data[space + 1:end - 1].partition(b"=")
        if not equals:
            raise Damaged("a pax record without '='")
        records[key.decode("utf-8", errors="surrogateescape")] = value.decode("utf-8", errors="surrogateescape")
        pos = end
    return records


def _checksum_ok(header: bytes) -> bool:
    stored = header[148:156]
    try:
        expected = _number(stored)
    except Damaged:
        return False
    unsigned = sum(header[:148]) + 8 * 32 + sum(header[156:])
    high = sum(1 for b in header[:148] + header[156:] if b > 127)
    return expected in (unsigned, unsigned - 256 * high)  # some old tars summed the bytes as signed


def untar(raw: IO[bytes], unpacker: Unpacker) -> None:
    """Every member of the tar stream `raw` into `unpacker`. Raises Damaged where the stream cannot
    be read on (what came before stays unpacked), DeadlineReached past the deadline."""
    stream = _Stream(raw, unpacker)
    long_name: str | None = None
    pax: dict[str, str] = {}
    refuse_next: str | None = None
    while True:
        header = stream.read(BLOCK)
        if not header:
            if stream.offset == 0:
                raise Damaged("empty: not a tar stream")
            return  # ended without its two zero blocks, as a stream cut at a member's end does
        if len(header) < BLOCK:
            raise Damaged(f"cut short at byte {stream.offset:,}")
        if header == bytes(BLOCK):
            return
        if not _checksum_ok(header):
            raise Damaged(f"not a tar header at byte {stream.offset - BLOCK:,} (its checksum does not match)")
        kind = header[156:157]
        size = _number(header[124:136])
        if size < 0:
            raise Damaged(f"a negative member size at byte {stream.offset - BLOCK:,}")
        if kind in (b"x", b"g", b"L", b"K"):
            if kind == b"g":  # global pax records (git archive's commit id): nothing a bundle needs
                stream.skip(size)
                continue
            bound = MAX_PAX if kind == b"x" else MAX_NAME
            if size > bound:
                stream.skip(size)
                refuse_next = (f"a {'pax header' if kind == b'x' else 'long name'} of {size:,} bytes "
                               f"(at most {bound:,}): not read")
                continue
            data = b"".join(stream.chunks(size))
            if kind == b"x":
                pax = _pax(data)
            elif kind == b"L":
                long_name = data.split(b"\x00", 1)[0].decode("utf-8", errors="surrogateescape")
            continue
        name = long_name if long_name is not None else _text(header[0:100])
        if long_name is None and header[257:262] == b"ustar":
            prefix = _text(header[345:500])
            name = f"{prefix}/{name}" if prefix else name
        name = pax.get("path", name)
        if "size" in pax:
            try:
                size = int(pax["size"])
            except ValueError:
                raise Damaged(f"a pax size that is not a number: {pax['size'][:24]!r}") from None
        mtime: float | None
        try:
            mtime = float(pax["mtime"]) if "mtime" in pax else float(_number(header[136:148]))
        except (ValueError, Damaged):
            mtime = None
        sparse = kind == b"S" or any(k.startswith("GNU.sparse.") for k in pax)
        real_size = _sparse_size(header, pax, size) if sparse else size
        if kind == b"S":
            _skip_sparse_extensions(header, stream)
        link = pax.get("linkpath") or _text(header[157:257])
        why_before, refuse_next, long_name, pax = refuse_next, None, None, {}
        if not unpacker.take_member(name):
            return
        if why_before is not None:
            unpacker.refuse(name or "(a member)", why_before)
            stream.skip(size)
            continue
        _member(stream, unpacker, kind, name, size, mtime, sparse, real_size, link)


def _member(stream: _Stream, unpacker: Unpacker, kind: bytes, name: str, size: int, mtime: float | None,
            sparse: bool, real_size: int, link: str) -> None:
    """One member whose header has been read, by its type: a file or folder unpacked, anything else
    (a sparse file, a link, a device, a FIFO) refused with why, and its `size` bytes of data read on."""
    if kind in (b"0", b"\x00", b"7") and not sparse and not name.endswith("/"):
        unpacker.file(name, size, stream.chunks(size), mtime, read_rest=_rest(stream, size))
    elif kind == b"5" or (kind in (b"0", b"\x00") and name.endswith("/")):
        unpacker.folder(name)
        stream.skip(size)
    elif sparse:
        if real_size > unpacker.budget:
            unpacker.refuse(name, f"{real_size:,} bytes (a sparse file), over what {unpacker.what} may still "
                                  f"unpack to ({unpacker.budget:,} bytes of {UNPACKED_ENV}={unpacked_limit():,})")
        else:
            unpacker.refuse(name, f"a sparse file of {real_size:,} bytes: sparse members are not unpacked; "
                                  f"unpack the archive with tar and give forensics the folder")
        stream.skip(size)
    elif kind in _SKIPPED_QUIETLY:
        stream.skip(size)
    else:
        what = _TYPE_NAMES.get(kind, f"a member of type {kind!r}")
        if kind in (b"1", b"2"):
            what += f" to {_shown(link)[:120]}"
        unpacker.refuse(name, f"{what}: only files and folders are unpacked")
        stream.skip(size)


def _rest(stream: _Stream, size: int) -> Callable[[], None]:
    """Passes over what is left of a member's data once it is refused part-way or before a byte."""
    start = stream.offset

    def rest() -> None:
        done = stream.offset - start
        left = size - done
        if left > 0:
            stream.skip(left)
        else:
            stream.exact((-size % BLOCK) if done == size else 0)

    return rest


def _skip_sparse_extensions(header: bytes, stream: _Stream) -> None:
    """The old GNU sparse format's extension blocks (more of the hole map) that follow its header
    and are not counted in its size."""
    extended = header[482]
    while extended:
        block = stream.exact(BLOCK)
        extended = block[504]


def _sparse_size(header: bytes, pax: dict[str, str], stored: int) -> int:
    for key in ("GNU.sparse.realsize", "GNU.sparse.size"):
        if key in pax:
            try:
                return int(pax[key])
            except ValueError:
                return stored
    try:
        return _number(header[483:495])  # the old GNU sparse header's real size
    except Damaged:
        return stored


# -- opening an archive ------------------------------------------------------------------------
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"),
          (b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"))


def compression(head: bytes) -> str | None:
    """The compression (or `zip`) an archive's first bytes show; None for a plain tar."""
    return next((name for magic, name in _MAGIC if head.startswith(magic)), None)


def decompressed(raw: IO[bytes], kind: str | None) -> IO[bytes]:
    """A reader of `raw`'s tar bytes, decompressed as its magic says."""
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "bzip2":
        return bz2.BZ2File(raw, "rb")  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(raw, "rb")  # type: ignore[return-value]
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw)  # type: ignore[no-any-return]
    return raw


def unpack_file(path: Path, unpacker: Unpacker) -> None:
    """A tarball (plain or compressed, whatever its name says) or a zip into `unpacker`. Raises
    Damaged when the file is not an archive at all or breaks off (what came before is kept)."""
    with open(path, "rb") as raw:
        kind = compression(raw.read(8))
        raw.seek(0)
        if kind == "zip":
            unzip(raw, unpacker)
            return
        untar(decompressed(raw, kind), unpacker)


def unzip(raw: IO[bytes], unpacker: Unpacker) -> None:
    """A zip's members into `unpacker`: files and folders only (a member stored as a symbolic link
    is refused), sizes as the zip declares them (zipfile never reads a member past its size)."""
    import zipfile

    try:
        archive = zipfile.ZipFile(raw)
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise Damaged(f"not a readable zip file ({error})") from None
    with archive:
        for member in archive.infolist():
            unpacker.check_time()
            if not unpacker.take_member(member.filename):
                return
            mode = member.external_attr >> 16
            if member.is_dir():
                unpacker.folder(member.filename)
            elif mode and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
                unpacker.refuse(member.filename, "a symbolic link or special file: only files and folders are unpacked")
            else:
                try:
                    with archive.open(member) as data:
                        unpacker.file(member.filename, member.file_size, _zip_chunks(data))
                except Damaged as error:
                    unpacker.refuse(member.filename, str(error))
                except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, zlib.error,
                        lzma.LZMAError, RuntimeError) as error:
                    unpacker.refuse(member.filename, f"damaged: {str(error)[:200]}")


def _zip_chunks(data: Any) -> Iterator[bytes]:
    while chunk := data.read(CHUNK):
        yield chunk
