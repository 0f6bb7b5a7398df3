"""`systemctl status` as pasted (the real file is corpus3's, read in tests/test_corpus3.py): any mix of
its line shapes and hostile text is read or quarantined line by line, never a crash; zones are taken
only where their abbreviation names one offset."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.sources.logs.systemctl_status import _offset, parse

SHAPES = ["● vllm.service - vLLM server", "○ other.service - Other", "× failed.service - Failed one",
          "     Loaded: loaded (/etc/systemd/system/vllm.service; enabled; preset: enabled)",
          "     Active: active (running) since Sun 2026-02-22 06:35:31 AEST; 25min ago",
          "     Active: failed (Result: exit-code) since Sun 2026-02-22 06:35:31 CST; 1h ago",
          "   Main PID: 3285 (vllm)", "     CGroup: /system.slice/vllm.service", "             ├─3285 /usr/bin/python3",
          "Feb 22 06:55:53 host systemd[1643]: vllm.service: Scheduled restart job, restart counter is at 76.",
          "Sat Feb 21 21:00:31 UTC 2026", "enabled", "", "Feb 30 25:61:99 host x: no such day",
          "     Active: active (running) since Mon 2026-02-30 10:00:00 UTC; 1h ago"]


def test_only_zone_abbreviations_of_one_offset_place_times() -> None:
    assert _offset("AEST") == timedelta(hours=10) and _offset("+05:30") == timedelta(hours=5, minutes=30)
    assert _offset("CST") is None and _offset("IST") is None  # China, US Central, Cuba; India, Ireland, Israel


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(st.sampled_from(SHAPES), st.text(max_size=200)), max_size=40))
def test_any_mix_of_its_lines_and_hostile_text_is_read_or_quarantined(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "status.txt"
    path.write_text("\n".join(lines), errors="surrogatepass")
    result = parse(path)
    assert result.records == result.rows.height + result.quarantine.height
