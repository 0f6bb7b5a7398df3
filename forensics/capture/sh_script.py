"""`forensics collect --script`: the POSIX `sh` script doing what `collect` does with `journalctl`,
`curl`, `py-spy` and `tar` only, for a host where nothing can be installed (fleet collections send it
over ssh). The plan is checked first, and every value enters the text through `sh_quote` alone.
"""

from __future__ import annotations

from pathlib import Path

from forensics.capture.collect import FR_MAX_BYTES, journal_option
from forensics.capture.plan import Plan, checked, endpoint_parts

# The devices' own state: no value of the plan in it
_DEVICES_SH = """# the devices' own state
mkdir -p "$OUT/gpu"
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 30 nvidia-smi -q > "$OUT/gpu/nvidia-smi-q.txt" 2>&1 || missing "GPU details" "nvidia-smi -q failed or did not answer"
  timeout 30 nvidia-smi -q -d PIDS > "$OUT/gpu/nvidia-smi-pids.txt" 2>&1 || missing "GPU processes" "nvidia-smi -q -d PIDS failed"
elif command -v npu-smi >/dev/null 2>&1; then
  timeout 30 npu-smi info > "$OUT/gpu/npu-smi.txt" 2>&1 || missing "NPU state" "npu-smi info failed or did not answer"
else
  missing "GPU state" "neither nvidia-smi nor npu-smi found"
fi
"""


def sh_quote(value: str | int | float) -> str:
    """The one way a value enters the generated script: a single-quoted sh word (a `'` inside is
    closed, escaped and reopened), so no character of it is ever read by the shell."""
    text = value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)
    return "'" + text.replace("'", "'\\''") + "'"


def script(plan: Plan) -> str:
    """A POSIX `sh` script doing what `collect` does with `journalctl`, `curl`, `py-spy`, `tar`
    only, for a host where nothing can be installed; it writes the bundle as a tar stream to its
    standard output: `forensics collect --script … | ssh root@host sh > bundle.tar`. The plan is
    checked first (`plan_problems`) and every value in the text is quoted by `sh_quote`."""
    checked(plan, "collect --script")
    until, journal = _journal_options(plan)
    return (_journal_sh(plan, until, journal) + _scrapes_sh(plan) + _stacks_sh(plan) + _kernel_sh(plan, until, journal)
            + _DEVICES_SH + _flight_recorder_sh() + _units_sh(plan))


def _journal_options(plan: Plan) -> tuple[str, str]:
    """journalctl's `--until` and `--directory`/`--file` options of the plan, quoted (or empty)."""
    q = sh_quote
    journal = " ".join(map(q, journal_option(Path(plan.journal)))) if plan.journal else ""
    until = f"--until {q(plan.until)}" if plan.until else ""
    return until, journal


def _journal_sh(plan: Plan, until: str, journal: str) -> str:
    """The script's start (its output folder, how it writes down what is missing) and the journal
    of the window."""
    q = sh_quote
    units = " ".join(f"-u {q(u)}" for u in plan.units)
    return f"""#!/bin/sh
# Written by `forensics collect --script`: collects an incident bundle on this host, read-only,
# every step bounded in time, and writes it to standard output as a tar stream.
set -u
OUT=$(mktemp -d)
HOST=$(hostname)
now() {{ date -u +%Y-%m-%dT%H:%M:%S.000Z; }}
missing() {{ printf '%s\\t%s\\n' "$1" "$2" >> "$OUT/could-not-collect.tsv"; }}
mkdir -p "$OUT/journal" "$OUT/stacks"
if command -v journalctl >/dev/null 2>&1; then
  timeout 120 journalctl -o export --no-pager --since {q(plan.since)} {until} {journal} {units} \\
    > "$OUT/journal/$HOST.export" 2>"$OUT/journal.err" || missing journal "$(tail -n 1 "$OUT/journal.err")"
  [ -s "$OUT/journal/$HOST.export" ] || {{ rm -f "$OUT/journal/$HOST.export"; missing journal "no entries"; }}
  rm -f "$OUT/journal.err"
else
  missing journal "journalctl not found"
fi
"""


def _scrapes_sh(plan: Plan) -> str:
    """A few scrapes of each metrics endpoint at an interval."""
    q = sh_quote
    endpoints = " ".join(q(f"{url} {port}") for _, url, _, port in map(endpoint_parts, plan.endpoints))
    return f"""SCRAPES={q(plan.scrapes)}
SCRAPE_INTERVAL={q(plan.scrape_interval_s)}
for endpoint in {endpoints}; do
  url=${{endpoint% *}}; port=${{endpoint##* }}
  dir="$OUT/metrics/${{HOST}}_$port"; mkdir -p "$dir"
  i=0
  while [ "$i" -lt "$SCRAPES" ]; do
    [ "$i" -gt 0 ] && sleep "$SCRAPE_INTERVAL"
    at=$(now)
    if body=$(curl -fsS --max-time 10 --max-filesize 67108864 --proto =http,https --max-redirs 0 -- "$url" 2>&1); then
      printf '# capture ts=%s host=%s port=%s\\n%s\\n' "$at" "$HOST" "$port" "$body" >> "$dir/scrapes.prom"
    else
      missing "metrics $url" "$body"
    fi
    i=$((i + 1))
  done
  [ -s "$dir/scrapes.prom" ] || rm -rf "$dir"
done
"""


def _stacks_sh(plan: Plan) -> str:
    """The processes to dump (given outright, or by title), and the py-spy rounds, started at the
    plan's moment."""
    q = sh_quote
    titles = "|".join(plan.titles) or "sglang::|VLLM::|vllm"
    pids = " ".join(f"{group}={pid}" for group, members in plan.pids.items() for pid in members)
    native = " --native" if plan.native else ""
    return f"""PIDS={q(pids)}  # GROUP=PID given outright, then =PID for every process whose title matches
for pid in $(pgrep -f -- {q(titles)} 2>/dev/null); do [ "$pid" = "$$" ] || PIDS="$PIDS =$pid"; done
ROUNDS={q(plan.rounds)}
ROUND_INTERVAL={q(plan.round_interval_s)}
START_AT={q(plan.start_at or 0)}  # every host of a fleet collection starts its rounds at this moment
now=$(date +%s)
[ "$now" -lt "$START_AT" ] && sleep $((START_AT - now))
printf '%s\\n' "$(date -u +%s.%N)" > "$OUT/rounds-started.txt"
if command -v py-spy >/dev/null 2>&1; then
  round=1
  while [ "$round" -le "$ROUNDS" ]; do
    [ "$round" -gt 1 ] && sleep "$ROUND_INTERVAL"
    for item in $PIDS; do
      group=${{item%%=*}}; pid=${{item#*=}}
      title=$(tr '\\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -d' ' -f1)
      printf '# capture ts=%s host=%s pid=%s%s title=%s\\n' "$(now)" "$HOST" "$pid" \\
        "${{group:+ group=$group}}" "${{title:-?}}" >> "$OUT/stacks/round-$round.txt"
      timeout 30 py-spy dump --pid "$pid"{native} >> "$OUT/stacks/round-$round.txt" 2>&1 \\
        || missing "stacks of pid $pid" "py-spy failed (see the dump)"
    done
    round=$((round + 1))
  done
else
  missing stacks "py-spy not found"
fi
"""


def _kernel_sh(plan: Plan, until: str, journal: str) -> str:
    """The kernel's messages of the window: `journalctl -k`, else dmesg."""
    q = sh_quote
    return f"""# the kernel's messages of the window (Xid, the OOM killer), else dmesg
if command -v journalctl >/dev/null 2>&1 && timeout 60 journalctl -k -o export --no-pager --since {q(plan.since)} \\
    {until} {journal} > "$OUT/journal/$HOST-kernel.export" 2>/dev/null && [ -s "$OUT/journal/$HOST-kernel.export" ]; then
  :
else
  rm -f "$OUT/journal/$HOST-kernel.export"
  mkdir -p "$OUT/logs/$HOST"
  timeout 30 dmesg --time-format iso > "$OUT/logs/$HOST/dmesg.log" 2>/dev/null || {{ rm -f "$OUT/logs/$HOST/dmesg.log"; missing "kernel messages" "neither journalctl -k nor dmesg could be read"; }}
fi
"""


def _flight_recorder_sh() -> str:
    """Flight Recorder dumps at the prefixes the dumped processes' environment names."""
    return f"""# Flight Recorder dumps, where the dumped processes' torch writes them (else torch's default prefix)
mkdir -p "$OUT/flight_recorder/$HOST"
PREFIXES=""
for item in $PIDS; do
  pid=${{item#*=}}
  for prefix in $(tr '\\0' '\\n' < "/proc/$pid/environ" 2>/dev/null | sed -n 's/^TORCH_FR_DUMP_TEMP_FILE=//p; s/^TORCH_NCCL_DEBUG_INFO_TEMP_FILE=//p'); do
    PREFIXES="$PREFIXES $prefix"
  done
done
[ -n "$PREFIXES" ] || PREFIXES=/tmp/nccl_trace_rank_
found=0
for prefix in $PREFIXES; do
  for dump in "$prefix"*; do
    [ -f "$dump" ] && [ ! -L "$dump" ] || continue
    if [ "$(wc -c < "$dump")" -le {FR_MAX_BYTES} ]; then cp -- "$dump" "$OUT/flight_recorder/$HOST/" && found=1; fi
  done
done
[ "$found" = 1 ] || missing "Flight Recorder dumps" "none found under$PREFIXES"
"""


def _units_sh(plan: Plan) -> str:
    """The units' own state, and the bundle written out as a tar stream."""
    q = sh_quote
    return f"""# the units' own state, restart counters included
mkdir -p "$OUT/units"
UNITS={q(" ".join(plan.units))}  # unit names, checked: letters, digits and ":-_.\\@" only
for unit in $UNITS; do
  timeout 30 systemctl status "$unit" --no-pager -n 0 > "$OUT/units/$unit.status.txt" 2>&1
  timeout 30 systemctl show "$unit" --no-pager -p NRestarts,ActiveState,SubState,ExecMainStartTimestamp >> "$OUT/units/$unit.status.txt" 2>&1 \\
    || missing "systemctl show $unit" "systemctl failed"
done
tar -C "$OUT" -cf - .
rm -rf "$OUT"
"""
