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
