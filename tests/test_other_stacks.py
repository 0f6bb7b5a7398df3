"""Evidence beyond SGLang under systemd: vLLM's plain-text log and profile (chosen from the
evidence), DCGM's GPU metrics (blank sentinels, XID errors, GPUs busy while the engine hangs) and
metric families no profile names, which still get a panel."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from forensics.analyze import analyze
from forensics.case import read_bundle
from forensics.render.axis import axis_for
from forensics.render.metric_panels import metric_panels
from tests.detect.test_stacks import ALL_REDUCE, ON_IDLE, ranks_file

START = datetime(2026, 6, 18, 21, 30, tzinfo=UTC)


def _vllm_log(frozen_after_s: int, total_s: int) -> str:
    """vLLM V1 stats lines every 10 s: generating until `frozen_after_s`, then 0 token/s with
    4 requests running (vLLM keeps writing the line while it hangs)."""
    lines = ["(APIServer pid=7) INFO 06-18 21:29:55 [api_server.py:1050] Starting vLLM API server on http://0.0.0.0:8000"]
    for s in range(0, total_s, 10):
        at = (START + timedelta(seconds=s)).strftime("%m-%d %H:%M:%S")
        gen = 0.0 if s > frozen_after_s else 250.5
        lines.append(f"(APIServer pid=7) INFO {at} [loggers.py:122] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
                     f"Avg generation throughput: {gen} tokens/s, Running: 4 reqs, Waiting: 2 reqs, "
                     "GPU KV cache usage: 12.5%, Prefix cache hit rate: 0.0%")
    lines.append('(APIServer pid=7) INFO:     10.0.0.9:41220 - "GET /health HTTP/1.1" 200 OK')
    return "\n".join(lines) + "\n"


def test_a_vllm_engine_that_logs_zero_throughput_is_frozen_and_the_profile_is_chosen(tmp_path: Path) -> None:
    bundle = tmp_path / "vllm-wedge"
    (bundle / "logs").mkdir(parents=True)
    (bundle / "logs" / "vllm-engine.log").write_text(_vllm_log(frozen_after_s=120, total_s=400))
    analysis = analyze(bundle, tmp_path / "case")
    assert analysis.timeline.profile.name == "vllm"
    assert any("profile vllm chosen from the evidence" in n for n in analysis.timeline.incident.notes)
    (frozen,) = [f for f in analysis.findings if f.kind == "frozen"]
    assert frozen.at == START + timedelta(seconds=120)  # the last line with tokens generated
    assert "4 running, 2 queued" in frozen.text
    assert analysis.incident_found and analysis.key_times.started == frozen.at
    # the health check answered while it hung: the blind spot, from a plain log
    assert [f.kind for f in analysis.findings if f.kind == "silent_hang"] == ["silent_hang"]


def test_a_vllm_engine_at_work_is_no_incident(tmp_path: Path) -> None:
    bundle = tmp_path / "vllm-ok"
    (bundle / "logs").mkdir(parents=True)
    (bundle / "logs" / "vllm.log").write_text(_vllm_log(frozen_after_s=10_000, total_s=400))
    analysis = analyze(bundle, tmp_path / "case")
    assert not analysis.incident_found and analysis.findings == []
    assert any("progress lines of 1 scheduler" in line for line in analysis.checked())


def _dcgm(util: float, at: datetime, xid: int = 0) -> str:
    return (f"# capture ts={at.isoformat()} host=gpu-node-00 port=9400\n"
            "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
            + "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",UUID="GPU-{g}",Hostname="gpu-node-00"}} {util:g}\n'
                      for g in range(4))
            + "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
            + f'DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="GPU-0",Hostname="gpu-node-00"}} {xid}\n'
            + "# TYPE DCGM_FI_DEV_MEM_CLOCK gauge\n"
            + 'DCGM_FI_DEV_MEM_CLOCK{gpu="0",UUID="GPU-0",Hostname="gpu-node-00"} 9223372036854775794\n')


def test_dcgm_blanks_are_missing_and_busy_gpus_beside_desynced_ranks_are_a_signature(tmp_path: Path) -> None:
    bundle = tmp_path / "gpu"
    (bundle / "stacks").mkdir(parents=True)
    (bundle / "stacks" / "r1.txt").write_text(ranks_file({0: ALL_REDUCE, 1: ALL_REDUCE, 2: ALL_REDUCE, 3: ON_IDLE}))
    (bundle / "metrics" / "gpu-node-00_9400").mkdir(parents=True)
    captured = datetime(2026, 6, 18, 21, 40, 10, tzinfo=UTC)
    scrapes = [_dcgm(100.0 if s >= 0 else 40.0, captured - timedelta(seconds=150 - s), xid=79 if s > 100 else 0)
               for s in range(-30, 151, 15)]
    (bundle / "metrics" / "gpu-node-00_9400" / "dcgm.prom").write_text("".join(scrapes))
    frames, _ = read_bundle(bundle)
    clock = frames["samples"].filter(pl.col("name").cast(pl.String) == "DCGM_FI_DEV_MEM_CLOCK")
    assert clock.height == len(scrapes) and clock.get_column("value").null_count() == len(scrapes)
    analysis = analyze(bundle, tmp_path / "case")
    (busy,) = [f for f in analysis.findings if f.kind == "gpu_busy_while_hung"]
    assert busy.text.startswith("GPUs 0, 1, 2, 3 on gpu-node-00 stayed at 95 % utilisation or more")
    assert "all_reduce" in busy.text and "spins on the GPU" in busy.text
    (xid,) = [f for f in analysis.findings if f.kind == "gpu_xid_error"]
    assert "XID error 79" in xid.text and xid.at == captured - timedelta(seconds=45)


def test_families_no_profile_names_get_panels_the_movers_first(tmp_path: Path) -> None:
    bundle = tmp_path / "node"
    (bundle / "metrics" / "gpu-node-00_9100").mkdir(parents=True)
    text = "".join(f"# capture ts={(START + timedelta(seconds=15 * i)).isoformat()} host=gpu-node-00 port=9100\n"
                   f"# TYPE node_load1 gauge\nnode_load1 {1 + (i % 5) * 3}\n"
                   f"# TYPE node_boot_time_seconds gauge\nnode_boot_time_seconds 1781800000\n"
                   f"# TYPE node_network_receive_bytes_total counter\n"
                   f'node_network_receive_bytes_total{{device="eth0"}} {1000 * i * i}\n' for i in range(20))
    (bundle / "metrics" / "gpu-node-00_9100" / "node.prom").write_text(text)
    analysis = analyze(bundle, tmp_path / "case")
    titles = [panel.title for panel, _ in metric_panels(analysis, axis_for(analysis))]
    assert "node_load1 (gauge)" in titles and "node_network_receive_bytes_total (per second)" in titles
    assert not any(t.startswith("node_boot_time_seconds") for t in titles)  # it never moved
