"""Archives are unpacked by forensics' own reader: files and folders only, nothing outside the
destination on any interpreter, and every size, count and time an archive could make unbounded is
bounded (docs/bounds.md). Each test is an attack found against the interpreter's `tarfile`."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import time
import tracemalloc
from pathlib import Path

import pytest

from forensics.case.bundle import TAR_SKIPPED, open_bundle
from forensics.case.unpack import Damaged, DeadlineReached, Unpacker, untar
from tests.hostile.test_bundle_reading import entries

STEPS = "abcdefghijklmnop"


def _add(tar: tarfile.TarFile, name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes = b"") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data)
    if kind == tarfile.DIRTYPE:
        info.mode = 0o777
    tar.addfile(info, io.BytesIO(data) if data else None)


def realpath_overflow_tarball(tarball: Path, destination_length: int, climb: int,
                              extra: dict[str, bytes] | None = None) -> None:
    """CVE-2025-4517's shape (CPython's own regression test, gh-135034): symbolic links whose
    expansion overflows PATH_MAX, so `os.path.realpath` stops resolving and the "data" filter lets
    `escape` lead `climb` folders above the destination; then a file is written through it."""
    component = "d" * ((os.pathconf("/", "PC_PATH_MAX") - destination_length - 1) // (len(STEPS) + 1))
    with tarfile.open(tarball, "w:gz") as tar:
        _add(tar, "journal/node.export", data=entries(3))
        path = ""
        for step in STEPS:
            _add(tar, os.path.join(path, component), tarfile.DIRTYPE)
            _add(tar, os.path.join(path, step), tarfile.SYMTYPE, component)
            path = os.path.join(path, component)
        linkpath = os.path.join(*STEPS, "l" * 254)
        _add(tar, linkpath, tarfile.SYMTYPE, os.path.join(*[".."] * len(STEPS)))
        _add(tar, "escape", tarfile.SYMTYPE, os.path.join(linkpath, *[".."] * climb))
        _add(tar, "flaglink", tarfile.LNKTYPE, "escape/flag")
        _add(tar, "escape/authorized_keys", data=b"ssh-ed25519 AAAA attacker\n")
        for name, data in (extra or {}).items():
            _add(tar, name, data=data)


def _links(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_symlink() or (p.is_file() and p.stat().st_nlink > 1)]


def test_a_symlink_chain_past_path_max_writes_nothing_outside_the_bundle(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    tarball = tmp_path / "incident.tar.gz"
    realpath_overflow_tarball(tarball, len(str(scratch / "forensics-bundle-xxxxxxxx" / "incident")), climb=3)
    with open_bundle(tarball) as folder:
        assert _links(folder) == []
        skipped = json.loads((folder / TAR_SKIPPED).read_text())
        assert (folder / "journal" / "node.export").read_bytes() == entries(3)  # the rest is unpacked
    written = [p for p in tmp_path.rglob("authorized_keys")]
    assert written == []  # the interpreter's tarfile (3.11.7, "data" filter) writes tmp_path/authorized_keys
    reasons = {s["path"]: s["reason"] for s in skipped}
    assert reasons["escape"].startswith("not extracted from the tarball: a symbolic link to a/b/c")
    assert reasons["flaglink"] == ("not extracted from the tarball: a hard link to escape/flag: only files and "
                                   "folders are unpacked")


def test_devices_fifos_and_names_leading_out_are_refused_by_name(tmp_path: Path) -> None:
    tarball = tmp_path / "b.tar"
    with tarfile.open(tarball, "w") as tar:
        _add(tar, "logs/ok.log", data=b"[2026-06-18 21:00:00] ok\n")
        _add(tar, "dev/sda", tarfile.BLKTYPE)
        _add(tar, "fifo", tarfile.FIFOTYPE)
        _add(tar, "a/../../up.log", data=b"x")
        _add(tar, "logs/ok.log/inside", data=b"x")  # a file where a folder must be
        _add(tar, "bell\x07.log", data=b"x")
    with open_bundle(tarball) as folder:
        reasons = {s["path"]: s["reason"] for s in json.loads((folder / TAR_SKIPPED).read_text())}
        assert (folder / "logs" / "ok.log").is_file() and (folder / "bell\x07.log").is_file()
    assert reasons == {
        "dev/sda": "not extracted from the tarball: a block device: only files and folders are unpacked",
        "fifo": "not extracted from the tarball: a FIFO: only files and folders are unpacked",
        "a/../../up.log": "not extracted from the tarball: a name leading out of the bundle (..)",
        "logs/ok.log/inside": "not extracted from the tarball: a part of its path is not a folder (an earlier "
                              "member took that name)",
    }


def _raw_header(name: bytes, size: int, kind: bytes) -> bytes:
    """A ustar header block written byte by byte (so that sizes and kinds no writer allows can be
    given), with its checksum."""
    header = bytearray(512)
    header[0:len(name)] = name
    header[100:108] = b"0000644\x00"
    header[124:136] = f"{size:011o}\x00".encode()
    header[136:148] = b"00000000000\x00"
    header[156:157] = kind
    header[257:263] = b"ustar\x00"
    header[263:265] = b"00"
    header[148:156] = b" " * 8
    header[148:156] = f"{sum(header):06o}\x00 ".encode()
    return bytes(header)


def _member(name: bytes, data: bytes, kind: bytes = b"0") -> bytes:
    return _raw_header(name, len(data), kind) + data + bytes(-len(data) % 512)


def _peak_unpacking(tarball: Path) -> tuple[int, list[dict[str, str]]]:
    tracemalloc.start()
    try:
        with open_bundle(tarball) as folder:
            skipped = json.loads((folder / TAR_SKIPPED).read_text()) if (folder / TAR_SKIPPED).exists() else []
        return tracemalloc.get_traced_memory()[1], skipped
    finally:
        tracemalloc.stop()


def test_a_huge_pax_header_is_passed_over_unread(tmp_path: Path) -> None:
    # 64 MiB of pax header packs to ~64 KiB; the interpreter's tarfile holds it whole (3 GB ones too)
    size = 64 << 20
    tarball = tmp_path / "pax.tar.gz"
    with gzip.open(tarball, "wb", compresslevel=1) as out:
        out.write(_raw_header(b"PaxHeaders/x", size, b"x"))
        for _ in range(size // (1 << 20)):
            out.write(b"9" * (1 << 20))
        out.write(_member(b"logs/after.log", b"[2026-06-18 21:00:00] kept\n") + bytes(1024))
    peak, skipped = _peak_unpacking(tarball)
    assert peak < 16 << 20
    assert skipped == [{"path": "logs/after.log", "reason": "not extracted from the tarball: a pax header of "
                        "67,108,864 bytes (at most 1,048,576): not read"}]


def _time_pax_digits(tmp_path: Path, digits: int) -> float:
    tarball = tmp_path / f"digits-{digits}.tar"
    record = b"1" * digits
    tarball.write_bytes(_raw_header(b"PaxHeaders/x", len(record), b"x") + record + bytes(-len(record) % 512)
                        + _member(b"x.log", b"x") + bytes(1024))
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        with pytest.raises(Exception) as raised, open_bundle(tarball):
            pass
        best = min(best, time.perf_counter() - started)
        assert "a pax record without its length" in str(raised.value)
    return best


def test_a_pax_length_of_many_digits_costs_time_in_proportion(tmp_path: Path) -> None:
    # CVE-2024-6232: the interpreter's tarfile took 30 s on 160 k digits, growing with the square
    small, large = _time_pax_digits(tmp_path, 160_000), _time_pax_digits(tmp_path, 640_000)
    assert large / small < 8  # 4× the input: linear work is ~4×, quadratic 16×


def test_long_names_of_refused_members_are_not_kept(tmp_path: Path) -> None:
    name = b"n" * (1 << 20)
    tarball = tmp_path / "names.tar.gz"
    with gzip.open(tarball, "wb", compresslevel=1) as out:
        for n in range(48):
            out.write(_member(b"././@LongLink", name + str(n).encode(), kind=b"L") + _member(b"short", b"x"))
        out.write(_member(b"logs/ok.log", b"ok\n") + bytes(1024))
    peak, skipped = _peak_unpacking(tarball)
    assert peak < 16 << 20  # the interpreter's tarfile kept every member: 2.7 GB from 2.8 MB
    assert len(skipped) == 48 and skipped[0] == {"path": "short", "reason": "not extracted from the tarball: a "
                                                 "long name of 1,048,577 bytes (at most 4,096): not read"}


def test_an_endless_run_of_empty_members_stops_at_the_member_limit(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORENSICS_MAX_MEMBERS", "1000")
    tarball = tmp_path / "many.tar"
    tarball.write_bytes(b"".join(_member(f"f/{n}".encode(), b"") for n in range(5000)) + bytes(1024))
    with open_bundle(tarball) as folder:
        assert len(list((folder / "f").iterdir())) == 1000
        skipped = json.loads((folder / TAR_SKIPPED).read_text())
    assert skipped[-1]["reason"] == ("the tarball holds more than 1,000 members (FORENSICS_MAX_MEMBERS): the rest "
                                     "was not unpacked, from f/1000 on")


def test_refusals_are_listed_up_to_a_bound_and_counted_past_it(tmp_path: Path) -> None:
    tarball = tmp_path / "links.tar"
    tarball.write_bytes(b"".join(_member(f"l{n}".encode(), b"", kind=b"2") for n in range(1500)) + bytes(1024))
    with open_bundle(tarball) as folder:
        skipped = json.loads((folder / TAR_SKIPPED).read_text())
    assert len(skipped) == 1001
    assert skipped[-1]["path"] == "(500 more members)"


class _Endless(io.RawIOBase):
    """A stream that never ends: empty members, as a hostile host's script could send for ever."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        block = _member(b"again", b"")
        n = min(len(buffer), len(block))
        buffer[:n] = block[:n]
        time.sleep(0.001)
        return n


def test_a_stream_that_never_ends_stops_at_its_deadline(tmp_path: Path) -> None:
    unpacker = Unpacker(tmp_path / "host", what="the host's stream", deadline=time.monotonic() + 1.0)
    started = time.monotonic()
    with pytest.raises(DeadlineReached), unpacker:
        untar(io.BufferedReader(_Endless()), unpacker)
    assert time.monotonic() - started < 10


def test_a_stream_cut_inside_a_member_keeps_the_members_before_it_and_not_the_half(tmp_path: Path) -> None:
    data = _member(b"whole.log", b"a" * 2000) + _member(b"half.log", b"b" * 4000)[:1500]
    with Unpacker(tmp_path / "out") as unpacker, pytest.raises(Damaged, match="cut short"):
        untar(io.BytesIO(data), unpacker)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["whole.log"]


def test_a_folder_name_collect_writes_itself_or_an_option_is_never_a_hosts_folder() -> None:
    from forensics.capture.fleet import folder_name

    assert folder_name("fleet.json") == "host-fleet.json"
    assert folder_name("-oProxyCommand=x") == "oProxyCommand_x"
    assert folder_name("--") == "host"

