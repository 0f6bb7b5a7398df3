"""GPU evidence from NVIDIA's DCGM exporter: XID errors, and GPUs busy while the engine is hung.

A wedged NCCL collective does not leave its GPUs idle: the kernel spins waiting for the peer that
never comes, so DCGM shows utilisation pinned near 100 % while no token is produced. Busy GPUs
during a freeze or beside stacks waiting in a collective are therefore the signature of a stuck
collective, not of work; idle GPUs point at the host side (a Python deadlock, an empty queue).
`DCGM_FI_DEV_XID_ERRORS` holds the last XID error code a GPU raised (0: none): a non-zero value is
the driver reporting a GPU fault, worth a finding whatever else happened.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from forensics.timeline.align import Timeline
from forensics.detect import Evidence, Finding, clock
from forensics.detect.stack_verdict import HANG_VERDICTS, Verdict
from forensics.detect.stacks import latest
from forensics.timeline.metrics import label, named
from forensics.detect.registry import Context, detector

UTIL = "DCGM_FI_DEV_GPU_UTIL"
XID = "DCGM_FI_DEV_XID_ERRORS"
BUSY_PERCENT = 95.0  # at or above this through the window: pinned
LOOKBACK = timedelta(seconds=120)  # before a verdict with no freeze to start from


def _gpus(timeline: Timeline, name: str) -> pl.DataFrame:
    """The samples of DCGM's `name` per GPU: at, host, instance, gpu, value."""
    wanted = timeline.samples.filter(named(name))
    gpus = (wanted.with_columns(label("gpu"))
            .select(pl.coalesce("sample_ts", "ts").alias("at"), pl.col("host").cast(pl.String),
                    pl.col("instance").cast(pl.String), "gpu", "value")
            .drop_nulls("value"))
    # Counted first without the labels, whose decoding is most of a read of the case's scrapes
    # (0.27 s of 0.28 at a 128-host fleet's 6.2 M samples): most bundles hold no DCGM exporter.
    if not wanted.select(pl.len()).collect().item():
        return gpus.clear().collect()
    return gpus.collect()


def detect(timeline: Timeline, findings: list[Finding], verdicts: list[Verdict], track: str) -> list[Finding]:
    """XID errors, and GPUs pinned busy while the engine was hung (a freeze or hung stacks)."""
    out = _xid(timeline, track)
    util = _gpus(timeline, UTIL)
    if util.is_empty():
        return out
    hung = [v for v in latest(verdicts) if v.verdict in HANG_VERDICTS and v.at]
    frozen = sorted(f.at for f in findings if f.kind == "frozen" and f.at)
    if not hung and not frozen:
        return out
    end: datetime = max([v.at for v in hung if v.at] + ([max(f.until or f.at for f in findings
                                                                if f.kind == "frozen" and f.at)] if frozen else []))
    start = frozen[0] if frozen else end - LOOKBACK
    window = util.filter(pl.col("at").is_between(start, end))
    if window.is_empty():
        return out
    per_gpu = (window.group_by("host", "instance", "gpu")
               .agg(pl.col("value").min().alias("low"), pl.col("value").max().alias("high"), pl.len().alias("n"))
               .sort("host", "instance", "gpu", nulls_last=True))
    pinned = per_gpu.filter(pl.col("low") >= BUSY_PERCENT)
    if pinned.is_empty():
        idle = per_gpu.filter(pl.col("high") < 5.0)
        if idle.height == per_gpu.height:
            out.append(Finding("gpu_idle_while_hung", track, None, start,
                               f"every GPU DCGM reports ({per_gpu.height}) was idle (under 5 %) from {clock(start)} to "
                               f"{clock(end)} while the engine was hung: the wait is on the host side (Python, an "
                               "empty queue, a lock), not in a GPU kernel.", end,
                               [Evidence("samples", None, None, None, end, f"{UTIL} under 5 % on all GPUs")]))
        return out
    gpus = ", ".join(f"{row['gpu'] or '?'}" for row in pinned.iter_rows(named=True))
    hosts = sorted({h for h in pinned.get_column("host").to_list() if h})
    why = (f"the stacks wait in {hung[0].collective or 'a collective'} ({hung[0].group}: {hung[0].verdict})" if hung
           else "no batch was logged")
    text = (f"GPU{'s' if pinned.height > 1 else ''} {gpus}{' on ' + ', '.join(hosts) if hosts else ''} stayed at "
            f"{BUSY_PERCENT:g} % utilisation or more (lowest {pinned.get_column('low').min():g} %) from {clock(start)} "
            f"to {clock(end)} while {why}: a wedged NCCL collective spins on the GPU, so busy GPUs here mean stuck, "
            "not working.")
    out.append(Finding("gpu_busy_while_hung", track, None, start, text, end,
                       [Evidence("samples", None, None, None, end,
                                 f"{UTIL} min {row['low']:g} over {row['n']} samples, gpu {row['gpu']}")
                        for row in pinned.head(5).iter_rows(named=True)], hosts[0] if len(hosts) == 1 else None))
    return out


def _xid(timeline: Timeline, track: str) -> list[Finding]:
    xid = _gpus(timeline, XID).filter(pl.col("value") > 0)
    if xid.is_empty():
        return []
    first = xid.sort("at").group_by("host", "gpu", "value", maintain_order=True).first()
    return [Finding("gpu_xid_error", track, None, row["at"],
                    f"GPU {row['gpu'] or '?'}{' on ' + row['host'] if row['host'] else ''} reported XID error "
                    f"{row['value']:g} at {clock(row['at'])} (DCGM): the driver saw a GPU fault; look it up in "
                    "NVIDIA's XID table before trusting the GPU again.", None,
                    [Evidence("samples", None, None, None, row["at"], f"{XID}={row['value']:g} gpu {row['gpu']}")],
                    row["host"])
            for row in first.iter_rows(named=True)]


@detector("gpu")
def run(ctx: Context) -> list[Finding]:
    """GPUs busy or idle beside a hang, and Xid counters, from DCGM's samples."""
    return detect(ctx.timeline, ctx.found, ctx.verdicts, ctx.main_track)
