"""Issue 53, the page as an SRE reads it (2): rank lanes. Two bundles built from ../shared/corpus2
as the SRE built them, rendered by `forensics report` and read in Chromium at 1400×900:

- the Ascend 2P1D run (`logs/prefill-0`, `logs/decode-0`, `logs/router-0`): the prefill node is the
  one that hung (its 16 ranks never finished distributed init), so its lanes come first; the 32
  ranks whose lines draw nothing get no lane (33 empty lanes were drawn) and the page says how many
  and which instead;
- the mooncake PD log: prefill ranks TP1–5 and TP8–10 log the KV-transfer failures, and their
  lanes run TP8, TP9, TP10 (not TP10 before TP8 as text sorts them), each with its markers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.render.test_page_labels import (CORPUS2, LANES, NO_CORPORA, TIMELINE, corpus_bundle, open_page, readme_row,
                                           rendered)

pytestmark = NO_CORPORA
PREFILL = "sglang_npu_pd_2p1d_prefill0_stuck_init_torch_distributed_harness_timeout_2026-01-04.log"
DECODE = "sglang_npu_pd_2p1d_decode0_ready_then_smem_link_broken_2026-01-04.log"
ROUTER = "sglang_npu_pd_2p1d_router0_test_harness_3600s_fail_2026-01-04.log"
MOONCAKE = "sglang_pd_nixl_mooncake_router_smg_kv_transfer_failed_prefill_decode_2026-02-26.log"
RANK = re.compile(r" · (?:(?:DP|PP)\d+ )*TP(\d+)(?: \(logs no batches\))?$")
# every point a swimlane trace draws, as (lane number, trace); the progress strip's filled cells too
POINTS = f"""(() => {{ const out = [];
    for (const t of {TIMELINE}._fullData) {{
        if (t.xaxis !== 'x' || t.yaxis !== 'y') continue;
        if (t.type === 'heatmap') {{
            t.z.forEach((row, y) => {{ if (Array.from(row).some(v => v > 0)) out.push([y, t.name]); }});
            continue;
        }}
        Array.from(t.y || []).forEach((y, k) => {{ if (y !== null && t.x[k] !== null) out.push([y, t.name]); }});
    }}
    return out; }})()"""


def _ranks_tagged(name: str) -> set[int]:
    """The TP ranks a log's own lines are tagged with (`[… DP1 TP10 EP10]`), read without the suite."""
    return {int(n) for n in re.findall(r"^\[[0-9: -]+ (?:DP\d+ )?TP(\d+)", (CORPUS2 / "logs" / name).read_text(), re.M)}


@pytest.fixture(scope="module")
def two_p_one_d(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = corpus_bundle(tmp_path_factory.mktemp("page-lanes") / "npu-2p1d",
                           {f"corpus2/logs/{PREFILL}": "logs/prefill-0", f"corpus2/logs/{DECODE}": "logs/decode-0",
                            f"corpus2/logs/{ROUTER}": "logs/router-0"})
    return rendered(bundle)


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = corpus_bundle(tmp_path_factory.mktemp("page-lanes") / "pd-mooncake",
                           {f"corpus2/logs/{MOONCAKE}": "logs/pd-node"})
    return rendered(bundle)


def _drawn_lanes(page: Any) -> tuple[list[str], set[str]]:
    names = {int(float(k)): v for k, v in page.evaluate(LANES).items()}
    ticks = [names[k] for k in sorted(names, reverse=True)]  # top lane first
    return ticks, {names[int(y)] for y, _ in page.evaluate(POINTS) if int(y) in names}


def test_ranks_with_nothing_drawn_get_no_lane_and_are_counted_the_host_at_fault_first(two_p_one_d: Path,
                                                                                     browser: Any) -> None:
    assert "**0 of 16** log `Init torch distributed ends`" in readme_row(CORPUS2, PREFILL)
    prefill, decode = _ranks_tagged(PREFILL), _ranks_tagged(DECODE)
    assert prefill == set(range(16)) and decode  # the ranks each log names
    page = open_page(browser, two_p_one_d / "report.html")
    ticks, drawn = _drawn_lanes(page)
    ranked = [t for t in ticks if RANK.search(t)]
    assert [t for t in ranked if t not in drawn] == []  # no rank lane stands empty
    said = page.evaluate(f"{TIMELINE}.querySelector('g.legend .legendtitletext').textContent")
    unseen = len(prefill) + len(decode) - len(ranked)
    assert f"{unseen} ranks with nothing to draw here" in said, said
    assert "prefill-0 · prefill TP 0–15" in said, said
    hosts = [t.split(" · ")[0] for t in ticks if not t.startswith("track · ")]
    assert hosts[0] == "prefill-0", ticks  # the host that hung first
    page.context.close()


def test_rank_lanes_run_by_number_each_with_what_it_logged(mooncake: Path, browser: Any) -> None:
    assert "on TP1–5 and TP8–10" in readme_row(CORPUS2, MOONCAKE)
    page = open_page(browser, mooncake / "report.html")
    ticks, drawn = _drawn_lanes(page)
    numbers = [int(m.group(1)) for t in ticks if (m := RANK.search(t))]
    assert {1, 2, 3, 4, 5, 8, 9, 10} <= set(numbers), ticks
    assert numbers == sorted(numbers), ticks  # TP8, TP9, TP10: not TP10 before TP8
    assert all(t in drawn for t in ticks if RANK.search(t)), (ticks, drawn)
    page.context.close()
