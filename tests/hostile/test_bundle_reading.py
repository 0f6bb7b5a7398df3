"""Bundle reading stays inside the bundle, and a bad record never loses the bundle: symbolic
links out of it, loops, FIFOs, damaged compressed copies, extreme timestamps, deep JSON."""

from __future__ import annotations

import gzip
import lzma
import os
import subprocess
from pathlib import Path

import pytest
import zstandard

from forensics.case import discover, ingest, load_case, read_bundle
from tests.conftest import export_entry

BOOT = "0" * 32


def entries(n: int, start_us: int = 1781818560_000000) -> bytes:
    """`n` journal export entries one second apart, each with a ~300-byte message."""
    return b"".join(export_entry(
        ("__CURSOR", f"s=hostile;i={i}"), ("__REALTIME_TIMESTAMP", str(start_us + i * 1_000_000)),
        ("__MONOTONIC_TIMESTAMP", str(1_000_000 + i)), ("_BOOT_ID", BOOT), ("_HOSTNAME", "node-a"),
        ("_SYSTEMD_UNIT", "svc.service"), ("MESSAGE", f"line {i} " + "x" * 300)) for i in range(n))


def skipped_reasons(bundle: Path) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in discover(bundle)[1]}


def test_links_out_of_the_bundle_are_listed_and_not_followed(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "metrics" / "x").mkdir(parents=True)
    (bundle / "journal").mkdir()
    (bundle / "journal" / "a.export").write_bytes(entries(3))
    outside = tmp_path / "secret.prom"
    outside.write_text("# TYPE secret gauge\nsecret 42\n")
    (bundle / "metrics" / "x" / "s.prom").symlink_to(outside)
    (bundle / "etc").symlink_to("/etc")
    (bundle / "root").symlink_to("/")
    (bundle / "journal" / "again").symlink_to(bundle)  # a loop
    (bundle / "broken").symlink_to(tmp_path / "nowhere")
    os.mkfifo(bundle / "fifo")  # reading it would block for ever
    (bundle / "inside.export").symlink_to(bundle / "journal" / "a.export")  # inside: read
    reasons = skipped_reasons(bundle)
    assert "outside the bundle: not followed" in reasons["metrics/x/s.prom"]
    assert "outside the bundle" in reasons["etc"] and "outside the bundle" in reasons["root"]
    assert "loop" in reasons["journal/again"]
    assert reasons["broken"].startswith("broken symbolic link")
    assert reasons["fifo"].startswith("not a regular file")
    frames, manifest = read_bundle(bundle)
    assert {e["path"] for e in manifest["inputs"]} == {"journal/a.export", "inside.export"}
    assert frames["samples"].height == 0 and manifest["totals"]["duplicates"] == 3


def test_links_out_are_read_when_the_user_allows_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    outside = tmp_path / "elsewhere.export"
    outside.write_bytes(entries(2))
    (bundle / "j.export").symlink_to(outside)
    assert "j.export" in skipped_reasons(bundle)
    monkeypatch.setenv("FORENSICS_FOLLOW_LINKS", "1")
    assert [p.name for p, _ in discover(bundle)[0]] == ["j.export"]


def test_a_journal_folder_with_a_link_out_is_read_file_by_file(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "journal").mkdir(parents=True)
    (bundle / "journal" / "a.export").write_bytes(entries(1))
    (bundle / "journal" / "shadow").symlink_to("/etc/hostname")
    found, skipped = discover(bundle)
    assert [str(p.relative_to(bundle)) for p, _ in found] == ["journal/a.export"]
    assert any(s["path"] == "journal/shadow" for s in skipped)


def _damaged(tmp_path: Path, kind: str, raw: bytes) -> tuple[Path, bytes]:
    """A bundle holding `raw` compressed with `kind` and cut in half; and what the system's own
    decompressor recovers from the cut copy."""
    packed = {"gz": gzip.compress, "xz": lzma.compress, "zst": zstandard.ZstdCompressor().compress}[kind](raw)
    bundle = tmp_path / f"bundle-{kind}"
    (bundle / "journal").mkdir(parents=True)
    cut = bundle / "journal" / f"node.export.{kind}"
    cut.write_bytes(packed[:len(packed) // 2])
    tool = {"gz": ["zcat"], "xz": ["xzcat"], "zst": ["zstd", "-dc"]}[kind]
    recovered = subprocess.run([*tool, str(cut)], capture_output=True, check=False).stdout
    return bundle, recovered


@pytest.mark.parametrize("kind", ["gz", "xz", "zst"])
def test_a_compressed_export_cut_short_keeps_what_the_system_tool_recovers(tmp_path: Path, kind: str) -> None:
    if kind == "zst" and subprocess.run(["which", "zstd"], capture_output=True).returncode:
        pytest.skip("zstd command not installed")
    bundle, recovered = _damaged(tmp_path, kind, entries(4000))
    whole_entries = recovered.count(b"\n\n")  # entries the system tool hands on complete
    assert whole_entries > 100
    manifest = ingest(bundle, tmp_path / f"case-{kind}")
    entry = manifest["inputs"][0]
    assert entry["parsed"] == whole_entries
    assert entry["records"] == entry["parsed"] + entry["quarantined"]
    assert "damaged or cut short" in entry["error"] and "the bytes before it were read" in entry["error"]


def test_a_scrape_file_cut_short_keeps_its_complete_lines(tmp_path: Path) -> None:
    lines = "".join(f"# capture ts=2026-06-18T21:{i // 60:02d}:{i % 60:02d}Z port=30002\n"
                    f"# TYPE up gauge\nup{{n=\"{i}\"}} {i}.5\n" for i in range(3000))
    packed = gzip.compress(lines.encode())
    bundle = tmp_path / "bundle"
    (bundle / "metrics").mkdir(parents=True)
    (bundle / "metrics" / "s.prom.gz").write_bytes(packed[:len(packed) // 2])
    recovered = subprocess.run(["zcat", str(bundle / "metrics" / "s.prom.gz")], capture_output=True).stdout
    complete = [line for line in recovered.split(b"\n")[:-1] if line.startswith(b"up{")]
    frames, manifest = read_bundle(bundle)
    assert frames["samples"].height == len(complete) > 100
    # the last value read is whole, never a number cut in two
    assert frames["samples"].get_column("value").to_list()[-1] == float(complete[-1].split()[-1])
    assert "after the last complete line were left out" in manifest["inputs"][0]["error"]


def test_a_bit_flipped_gzip_export_keeps_the_entries_before_the_flip(tmp_path: Path) -> None:
    packed = bytearray(gzip.compress(entries(4000)))
    packed[len(packed) // 2] ^= 0x55
    bundle = tmp_path / "bundle"
    (bundle / "journal").mkdir(parents=True)
    (bundle / "journal" / "node.export.gz").write_bytes(bytes(packed))
    manifest = ingest(bundle, tmp_path / "case")
    entry = manifest["inputs"][0]
    assert entry["parsed"] >= 1900 and "damaged" in entry["error"]
    assert entry["records"] == entry["parsed"] + entry["quarantined"]


def test_extreme_and_malformed_records_are_quarantined_not_fatal(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    good, year_10000, int64_max = 1781818560_000000, 253402300800_000000, 2**63 - 1
    (bundle / "j.export").write_bytes(b"".join(export_entry(
        ("__REALTIME_TIMESTAMP", str(at)), ("__MONOTONIC_TIMESTAMP", str(n)), ("_BOOT_ID", BOOT),
        ("_HOSTNAME", "node-a"), ("MESSAGE", f"m{n}")) for n, at in enumerate([good, year_10000, int64_max])))
    deep = "[" * 100_000 + "]" * 100_000
    (bundle / "j.json").write_text('{"__REALTIME_TIMESTAMP": "1781818561000000", "MESSAGE": "ok"}\n'
                                   f"{deep}\n[1,2,3]\n")
    (bundle / "metrics").mkdir()
    (bundle / "metrics" / "m.prom").write_text("# TYPE a gauge\na 1 100000000000000000000\nb 2 1781818560000\n")
    (bundle / "api.json").write_text('{"status":"success","data":{"resultType":"matrix","result":' + deep + "}}")
    (bundle / "dump.json").write_text(deep)
    manifest = ingest(bundle, tmp_path / "case")
    case = load_case(tmp_path / "case")
    reasons = case.quarantine.select("source_file", "reason").collect().rows()
    by_file = {e["path"]: e for e in manifest["inputs"]}
    assert by_file["j.export"]["parsed"] == 1 and by_file["j.export"]["quarantined"] == 2
    assert sum("entry time" in r and "outside 1970–2199" in r for f, r in reasons if f == "j.export") == 2
    assert by_file["j.json"]["parsed"] == 1 and by_file["j.json"]["quarantined"] == 2
    assert any("nested too deeply" in r for f, r in reasons if f == "j.json")
    assert any("expected a JSON object, found list" in r for f, r in reasons if f == "j.json")
    assert any("timestamp 100000000000000000000 is outside 1900–2199" in r for f, r in reasons if f == "metrics/m.prom")
    assert any("nested too deeply" in r for f, r in reasons if f == "api.json")
    for entry in manifest["inputs"]:
        assert entry["records"] == entry["parsed"] + entry["quarantined"], entry
    # no year-10000 record reached the events (it would overflow every date computation after)
    assert case.events.select("ts").collect().get_column("ts").dt.year().max() == 2026


def test_an_unreadable_capture_time_is_flagged_not_taken_silently(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "s.txt").write_text("# capture ts=abc host=h\nProcess 1: python\nPython v3.11.7 (/usr/bin/python)\n\n"
                                  'Thread 1 (idle): "MainThread"\n    f (a.py:1)\n')
    frames, _ = read_bundle(bundle)
    row = frames["stacks"].row(0, named=True)
    assert row["ts_confidence"] == "low" and "header ts=abc is not a time" in row["ts_source"]


def test_a_million_field_names_in_one_entry_stay_bounded(tmp_path: Path) -> None:
    """journald writes at most 1,024 fields per entry; a forged entry with a million distinct names
    is refused and keeps no more columns (it used to take minutes and gigabytes)."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    body = b"".join(b"F%07d=x\n" % i for i in range(1_000_000))
    (bundle / "wide.export").write_bytes(b"__REALTIME_TIMESTAMP=1781818560000000\n" + body + b"\n" + entries(1))
    wide = {f"F{i:07d}": "x" for i in range(2000)}
    import json
    (bundle / "wide.json").write_text(json.dumps({"__REALTIME_TIMESTAMP": "1781818560000000", **wide}) + "\n")
    frames, manifest = read_bundle(bundle)
    by_file = {e["path"]: e for e in manifest["inputs"]}
    assert (by_file["wide.export"]["parsed"], by_file["wide.export"]["quarantined"]) == (1, 1)
    assert (by_file["wide.json"]["parsed"], by_file["wide.json"]["quarantined"]) == (0, 1)
    assert frames["events"].width < 1100
    assert all("more than 1024 fields" in r for r in frames["quarantine"].get_column("reason"))


def test_records_far_outside_the_incident_never_drive_findings(tmp_path: Path) -> None:
    """A record stamped years off (a clock reset, a forged line) is left out and said, not read as
    the moment progress stopped."""
    from forensics.analyze import analyze

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    progress = b"".join(export_entry(
        ("__REALTIME_TIMESTAMP", str(1781818560_000000 + i * 5_000_000)), ("__MONOTONIC_TIMESTAMP", str(i)),
        ("_BOOT_ID", BOOT), ("_HOSTNAME", "node-a"), ("_SYSTEMD_UNIT", "sglang-decode.service"),
        ("MESSAGE", f"[2026-06-18 21:36:{i * 5 % 60:02d} TP0] Decode batch. #running-req: 3, #queue-req: 0, ")) for i in range(12))
    forged = export_entry(("__REALTIME_TIMESTAMP", str(4102444800_000000)), ("_HOSTNAME", "node-a"),  # 2100-01-01
                          ("_SYSTEMD_UNIT", "sglang-decode.service"),
                          ("MESSAGE", "[2100-01-01 00:00:00 TP0] Decode batch. #running-req: 3, #queue-req: 0, "))
    (bundle / "j.export").write_bytes(progress + forged)
    analysis = analyze(bundle, tmp_path / "case")
    assert [f.kind for f in analysis.findings if f.kind == "frozen"] == []
    (note,) = [f for f in analysis.findings if f.kind == "out_of_range"]
    assert note.text.startswith("1 events records of j.export lie far outside the incident (2100-01-01 00:00:00")
    assert not analysis.incident_found


def test_a_whole_file_stamped_in_the_future_does_not_vouch_for_itself(tmp_path: Path) -> None:
    """Another day's file whose records agree with each other is read as written; a file whose
    records all lie past today is a forged or reset clock, however many they are."""
    from forensics.analyze import analyze

    bundle = tmp_path / "bundle"
    bundle.mkdir()

    def entries(first_s: int, host: str) -> bytes:
        return b"".join(export_entry(
            ("__REALTIME_TIMESTAMP", str((first_s + i * 5) * 1_000_000)), ("__MONOTONIC_TIMESTAMP", str(i)),
            ("_BOOT_ID", BOOT), ("_HOSTNAME", host), ("_SYSTEMD_UNIT", "sglang-decode.service"),
            ("MESSAGE", f"line {i}")) for i in range(40))

    (bundle / "today.export").write_bytes(entries(1781818560, "node-a"))  # 2026-06-18
    (bundle / "future.export").write_bytes(entries(4102444800, "node-b"))  # 2100-01-01, 40 records
    analysis = analyze(bundle, tmp_path / "case")
    (note,) = [f for f in analysis.findings if f.kind == "out_of_range"]
    assert note.text.startswith("40 events records of future.export lie far outside the incident (2100-01-01")
    assert analysis.timeline.last_ts.year == 2026


def test_a_tarball_bundle_is_read_without_extraction_tricks(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    import io
    import tarfile

    from forensics.cli import main

    tarball = tmp_path / "incident-42.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        def add(name: str, data: bytes = b"", **fields: object) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            for key, value in fields.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data))
        add("journal/node.export", entries(5))
        add("/etc/evil.export", entries(1))
        add("../escape.export", entries(1))
        add("metrics/shadow.prom", type=tarfile.SYMTYPE, linkname="/etc/shadow")
    assert main(["ingest", str(tarball), "--case", str(tmp_path / "case")]) == 0
    printed = capsys.readouterr().out
    # an absolute name is placed inside the bundle (its leading "/" dropped), never at /etc
    assert "records seen 6 = parsed 6 + quarantined 0" in printed and "etc/evil.export" in printed
    for member in ("../escape.export", "metrics/shadow.prom"):
        assert f"skipped {member}: not extracted from the tarball" in printed, member
    assert not (tmp_path.parent / "escape.export").exists() and not Path("/etc/evil.export").exists()


def test_a_file_gone_between_its_finding_and_its_reading_is_that_inputs_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundle read while something still moves files in it (a rotation, a copy being replaced):
    the input that vanished after discovery says so, the others are read."""
    import forensics.case.build as build

    bundle = tmp_path / "bundle"
    (bundle / "journal").mkdir(parents=True)
    (bundle / "journal" / "stays.export").write_bytes(entries(3))
    (bundle / "journal" / "vanishes.export").write_bytes(entries(4))
    found = build.discover

    def discover_then_delete(*args: object, **kwargs: object) -> object:
        inputs = found(*args, **kwargs)
        (bundle / "journal" / "vanishes.export").unlink()
        return inputs

    monkeypatch.setattr(build, "discover", discover_then_delete)
    manifest = ingest(bundle, tmp_path / "case")
    inputs = {e["path"]: e for e in manifest["inputs"]}
    gone = inputs["journal/vanishes.export"]
    assert (gone["records"], gone["sha256"]) == (0, None)
    assert gone["error"] == (f"it could not be read: [Errno 2] No such file or directory: "
                             f"'{bundle / 'journal' / 'vanishes.export'}'")
    assert (inputs["journal/stays.export"]["records"], manifest["totals"]["events"]) == (3, 3)


def test_an_input_read_whole_whose_hash_could_not_be_taken_keeps_its_records_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import forensics.case.build as build

    bundle = tmp_path / "bundle"
    (bundle / "journal").mkdir(parents=True)
    (bundle / "journal" / "a.export").write_bytes(entries(3))

    def unreadable(path: Path) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(build, "_sha256", unreadable)
    (entry,) = ingest(bundle, tmp_path / "case")["inputs"]
    assert (entry["records"], entry["sha256"], entry.get("error")) == (3, None, None)
    assert entry["notes"] == [f"its SHA-256 could not be taken: [Errno 13] Permission denied: "
                              f"'{bundle / 'journal' / 'a.export'}'"]
