"""A snapshot whose capture time was written without a zone is placed in its host's zone, as the
host's plain log stamps are: incident.toml's `[hosts."NAME"] time_zone` moves both alike (Asia/Shanghai
is UTC+8 all year, per the IANA tz database), while a stamp with its own zone is left as written."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

DUMP = Path(__file__).parent / "data" / "pyspy" / "lab" / "round-1" / "decode-tp0.json"


def _bundle(root: Path, header_ts: str, zone: str | None) -> Path:
    dump = DUMP.read_text().split("\n", 1)[1]  # the real dump without the lab's own (zoned) header
    (root / "stacks").mkdir(parents=True)
    (root / "stacks" / "decode-tp0.json").write_text(
        f"# capture ts={header_ts} host=gpu-node-00 pid=29882 group=decode title=sglang::scheduler_TP0\n{dump}")
    if zone:
        (root / "incident.toml").write_text(f'title = "zones"\n[hosts."gpu-node-00"]\ntime_zone = "{zone}"\n')
    return root


@pytest.mark.parametrize(("header_ts", "zone", "expected"), [
    ("2026-06-19T05:40:10", "Asia/Shanghai", datetime(2026, 6, 18, 21, 40, 10, tzinfo=UTC)),  # local: moved
    ("2026-06-19T05:40:10", None, datetime(2026, 6, 19, 5, 40, 10, tzinfo=UTC)),  # no zone given: read as UTC
    ("2026-06-18T21:40:10Z", "Asia/Shanghai", datetime(2026, 6, 18, 21, 40, 10, tzinfo=UTC)),  # its own zone
], ids=["zone-less, host in Shanghai", "zone-less, no host zone", "zoned stamp, host in Shanghai"])
def test_a_dumps_zone_less_capture_time_is_read_in_its_hosts_zone(tmp_path: Path, header_ts: str, zone: str | None,
                                                                   expected: datetime) -> None:
    from forensics.analyze import analyze

    timeline = analyze(_bundle(tmp_path / "bundle", header_ts, zone), tmp_path / "case").timeline
    times = set(timeline.stacks.get_column("ts").to_list())
    assert times == {expected}


def test_a_window_is_never_a_files_copy_time(tmp_path: Path) -> None:
    """A bundle whose only evidence is a dump with no capture time of its own (dated by its file's
    mtime) has no known window: summary.json says null, not the day the file was copied."""
    from forensics.analyze import analyze

    bundle = tmp_path / "bundle"
    (bundle / "stacks").mkdir(parents=True)
    (bundle / "stacks" / "decode-tp0.json").write_text(DUMP.read_text().split("\n", 1)[1])
    analysis = analyze(bundle, tmp_path / "case")  # a --json dump with no header at all: read, not a crash
    assert analysis.timeline.stacks.height and analysis.timeline.manifest["inputs"][0]["parsed"] == 1
    summary = analysis.summary()
    assert summary["window"] == [None, None]
    stated = analyze(_bundle(tmp_path / "stated", "2026-06-18T21:40:10Z", None), tmp_path / "case2").summary()
    assert stated["window"] == ["2026-06-18T21:40:10+00:00"] * 2


def test_a_hang_seen_only_in_dumps_without_times_is_not_dated_by_their_copy(tmp_path: Path) -> None:
    """The first sentence does not date a hang by the dumps' file copy times (the lab's real TP-desync
    dumps, their capture headers taken off)."""
    from forensics.analyze import analyze
    from forensics.render.postmortem import verdict_sentence

    stacks = tmp_path / "bundle" / "stacks"
    stacks.mkdir(parents=True)
    for dump in sorted(DUMP.parent.glob("*.json")):
        (stacks / dump.name).write_text(dump.read_text().split("\n", 1)[1])
    analysis = analyze(tmp_path / "bundle", tmp_path / "case")
    sentence = verdict_sentence(analysis, str)
    assert "py-spy showed" in sentence and "carry no time of their own" in sentence, sentence
