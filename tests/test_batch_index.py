"""The batch index as an SRE reads it (issue 53), over two small bundles built from real files:
a collective timeout (c10d's watchdog with a Flight Recorder stack, ../shared/corpus3/flight/) and a
hang (py-spy dumps of the four DP groups' first ranks, ../shared/corpus3/pyspy/). Each row says what
happened in the bundle's own sentence, gives the bundle one verdict (its report's), times to the
second, and links to the bundle's report and post-mortem. Rendered with `--redact`, the title the
user wrote in incident.toml stays theirs though it names a host. Expected values: the corpus README."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from forensics.cli import main
from forensics.report import WINDOW_UNKNOWN

CORPUS3 = Path(os.environ.get("FORENSICS_CORPUS3", Path(__file__).resolve().parents[2] / "shared" / "corpus3"))
pytestmark = pytest.mark.skipif(not (CORPUS3 / "README.md").is_file(), reason=f"no corpus at {CORPUS3}")
TIMEOUT = "c10d_watchdog_fr_stacktrace_8rank_tp8_llama70b_warmup_rank7_missing_seq59958.log"
NODES = ["sglang_ascend_dp4x8_node99_DP0_TP0_decode_sync_5dumps.txt",
         "sglang_ascend_dp4x8_node103_DP1_TP8_idle_batch_sync_3dumps.txt",
         "sglang_ascend_dp4x8_node107_DP2_TP16_idle_batch_sync_3dumps.txt",
         "sglang_ascend_dp4x8_node111_DP3_TP24_idle_batch_sync_3dumps_no_final_newline.txt"]
TITLE = "prefill-0: warm-up all_reduce timed out"  # the user's words, naming the host the log came from
MICROSECONDS = re.compile(r"\d\d:\d\d:\d\d\.\d")


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("batch")
    timeout = root / "incidents" / "collective-timeout"
    (timeout / "logs" / "prefill-0").mkdir(parents=True)  # logs/<host>/: the host is prefill-0
    shutil.copy(CORPUS3 / "flight" / TIMEOUT, timeout / "logs" / "prefill-0" / TIMEOUT)
    (timeout / "incident.toml").write_text(f'title = "{TITLE}"\n')
    hang = root / "incidents" / "ascend-hang"
    (hang / "stacks").mkdir(parents=True)
    for name in NODES:
        shutil.copy(CORPUS3 / "pyspy" / name, hang / "stacks" / name)
    out = root / "exports"
    assert main(["batch", str(root / "incidents"), "--out", str(out), "--workers", "1", "--redact"]) == 0
    data = json.loads((out / "index.json").read_text())
    return {"out": out, "rows": {Path(r["bundle"]).name: r for r in data["incidents"]},
            "signatures": data["signatures"], "html": (out / "index.html").read_text()}


def test_the_collective_timeout_names_rank_7_and_the_sequence(index: dict[str, Any]) -> None:
    """The README: rank 7 never enqueued 59958 (the ALLREDUCE the others wait in); stall began
    ≈17:30:32, watchdog 18:00:32."""
    readme = " ".join((CORPUS3 / "README.md").read_text().split())
    assert "**Desync — rank 7 missing from collective 59958.**" in readme
    row = index["rows"]["collective-timeout"]
    assert "59958" in row["verdicts"] and "rank 7 never entered" in row["verdicts"]
    assert row["what_happened"].startswith("collective timeout") and "18:00:32" in row["what_happened"]
    assert "Rank 7 never entered ALLREDUCE seq 59958" in row["what_happened"]


def test_one_hang_is_one_verdict_said_once(index: dict[str, Any]) -> None:
    """The README's set verdict: all four DP groups blocked in the same place — uniform wait at the
    device level. One verdict for the bundle, not one line per group or per round."""
    readme = " ".join((CORPUS3 / "README.md").read_text().split())
    assert "**Uniform wait at the device level**" in readme
    row = index["rows"]["ascend-hang"]
    assert row["verdicts"].count("UNIFORM_WAIT") == 1 and "ORDINARY_WORK" not in row["verdicts"]
    # the four DP groups, each named once (node 99's file name, `…_decode_sync_…`, names its group `decode DP0`)
    assert all(row["verdicts"].count(f" DP{n}") == 1 for n in range(4)) and row["verdicts"].endswith(": UNIFORM_WAIT")
    assert row["what_happened"].count("UNIFORM_WAIT") == 1 and "4 TP groups" in row["what_happened"]


def test_times_are_read_to_the_second(index: dict[str, Any]) -> None:
    for row in index["rows"].values():
        assert not MICROSECONDS.search(row["window"])
    # the Ascend dumps hold no time stamp (shell prompts and frames only): their copy time is no window
    assert index["rows"]["ascend-hang"]["window"] == WINDOW_UNKNOWN
    assert index["rows"]["collective-timeout"]["window"].endswith("UTC")
    for group in index["signatures"]:
        assert not MICROSECONDS.search(f"{group['first']} {group['last']}")
    assert index["rows"]["collective-timeout"]["window"].startswith("2026-07-10 18:00:32 UTC")
    assert not MICROSECONDS.search(re.sub(r"<script.*?</script>", "", index["html"], flags=re.DOTALL))


def test_each_row_links_its_report_and_post_mortem(index: dict[str, Any]) -> None:
    for name, row in index["rows"].items():
        links = dict(row["links"])
        assert links["report.html"] == f"{row['out']}/report.html" and links["postmortem.md"] == \
            f"{row['out']}/postmortem.md", name
        for href in links.values():
            assert (index["out"] / href).is_file() and f'href="{href}"' in index["html"]


def test_the_users_own_title_is_not_redacted(index: dict[str, Any]) -> None:
    """Issue 53: "prefill-0" became "host-N" in a title the user wrote. The evidence's mentions of the
    host are still redacted (the report says so)."""
    row = index["rows"]["collective-timeout"]
    assert row["title"] == TITLE
    assert TITLE in index["html"]
    draft = (index["out"] / row["out"] / "postmortem.md").read_text()
    assert draft.startswith(f"# Post-mortem: {TITLE}\n")


def test_the_users_own_title_stays_in_the_redacted_summary(index: dict[str, Any]) -> None:
    out = index["out"] / index["rows"]["collective-timeout"]["out"]
    assert json.loads((out / "summary.json").read_text())["incident"] == TITLE
