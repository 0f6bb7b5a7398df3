"""The reference incident at 1 M journal entries: ingest + every detector, and the question an SRE
asks first — when did each component last make progress? — beside lnav answering it with SQL over
`journalctl -o json`, in one run.

Inputs (generated once into bench/.cache/, seed fixed): `forensics reference --scale 100` (the
same story, ~1 M entries) and journalctl's JSON of its journal (through systemd-journal-remote).
Targets: ingest + all detectors <= 5 s; the last-progress query alone <= 0.5 s. Each is run
BENCH_ROUNDS times (default 3), taking turns with lnav; the tables give medians and every run.

lnav runs twice per round: the issue's single last-progress query, and the questions the
detectors answer from the journal (progress gaps with the health checks answered during them,
systemd's and sudo's lifecycle lines with the first healthy answer after the restart, the notable
line kinds per unit) in the fastest form found: one pass of the log into a temporary table, then
three queries over it (the same three straight over the log took 25 s, not 9). Its answers are
checked against the reference incident's times, so the comparison is between equal answers.
Last, the step before either tool when it starts from a host's journal: journalctl writing the
export forensics reads, and the JSON lnav reads (the issue's "about 20 s" is close to the latter).
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.inputs import reference_bundle
from bench.measure import Measurement, median_of, python, run

SCALE = int(os.environ.get("BENCH_REFERENCE_SCALE", "100"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
ANALYSIS_TARGET_S, QUERY_TARGET_S = 5.0, 0.5
# The analysis against lnav in the same run (issue 35): this many times faster than lnav's single
# query and than lnav answering the detectors' questions, within this peak.
LNAV_QUERY_RATIO, LNAV_QUESTIONS_RATIO, PEAK_TARGET_MIB = 2.5, 4.0, 1536
CACHE = Path(__file__).resolve().parent / ".cache"
JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"
PROGRESS_SQL = ("SELECT _SYSTEMD_UNIT, max(log_time) FROM journald_json_log "
                "WHERE log_body LIKE '% batch. #%' OR log_body LIKE '% batch, #%' GROUP BY _SYSTEMD_UNIT")
# The detectors' journal questions for lnav. One pass keeps the lines any question needs (the
# profile's patterns as LIKE, which lnav runs faster than REGEXP), then one query per question.
_KINDS = {  # sglang.toml's line kinds (its patterns as LIKE)
    "request_aborted": ("%Abort request%", "%abort_request%"),
    "kv_transfer_failure": ("%KV transfer failed%", "%KVTransferError%", "%ransfer failed%", "%KVPoll.Failed%"),
    "watchdog_timeout": ("%atchdog timeout%",),
    "request_timeout": ("%Request waiting timeout reached%", "%Request running timeout reached%"),
    "health_check_failed": ("%health check failed%", "%health check is pending with error%"),
    "markup_leak": ("%Finish: obj=%out={%DSML%",),
    "traceback": ("Traceback%",),
}


def _like_any(patterns: tuple[str, ...]) -> str:
    return "(" + " OR ".join(f"log_body LIKE '{p}'" for p in patterns) + ")"


_PROGRESS_LINE = _like_any(("% batch. #%", "% batch, #%"))
_HEALTH_200 = _like_any(('%"GET /health% 200%',))
_KIND = "CASE " + " ".join(f"WHEN {_like_any(likes)} THEN '{kind}'" for kind, likes in _KINDS.items()) + " END"
DETECTOR_SQL = (
    "CREATE TEMP TABLE notable AS SELECT log_time, _SYSTEMD_UNIT AS unit, SYSLOG_IDENTIFIER AS who, log_body "
    f"FROM journald_json_log WHERE {_PROGRESS_LINE} OR {_HEALTH_200} OR SYSLOG_IDENTIFIER IN ('systemd', 'sudo') OR "
    + " OR ".join(_like_any(likes) for likes in _KINDS.values()),
    # progress + silent hang: gaps of over 30 s between progress lines, health checks answered 200 in them
    f"WITH progress AS (SELECT unit, log_time FROM notable WHERE {_PROGRESS_LINE}), "
    "gaps AS (SELECT unit, last_progress, next_progress FROM (SELECT unit, lag(log_time) OVER (PARTITION BY unit "
    "ORDER BY log_time) AS last_progress, log_time AS next_progress FROM progress) "
    "WHERE julianday(next_progress) - julianday(last_progress) > 30.0 / 86400), "
    f"health AS (SELECT unit, log_time FROM notable WHERE {_HEALTH_200}) "
    "SELECT gaps.unit, last_progress, next_progress, count(health.log_time) AS health_200 FROM gaps "
    "LEFT JOIN health ON health.unit = gaps.unit AND health.log_time > last_progress "
    "AND health.log_time < next_progress GROUP BY 1, 2, 3",
    # lifecycle + resolved: systemd's and sudo's lines, each unit's first healthy answer after the restart
    "WITH started AS (SELECT max(log_time) AS at FROM notable WHERE who = 'systemd' AND log_body LIKE 'Started %') "
    "SELECT log_time, who, log_body FROM notable WHERE who IN ('systemd', 'sudo') UNION ALL "
    "SELECT min(log_time), unit, 'healthy' FROM notable, started "
    f"WHERE {_HEALTH_200} AND log_time > started.at GROUP BY unit",
    # errors: the notable line kinds per unit, first and last
    f"SELECT unit, kind, count(*) AS lines, min(log_time) AS first, max(log_time) AS last FROM (SELECT unit, "
    f"log_time, {_KIND} AS kind FROM notable) WHERE kind IS NOT NULL GROUP BY 1, 2",
)

# Timed as a whole process (imports included), as lnav's rows are: cold against cold.
ANALYZE = """
import shutil, sys
shutil.rmtree(sys.argv[2], ignore_errors=True)  # a case of its own each run: ingest is in the time
from forensics.analyze import analyze
result = analyze(sys.argv[1], sys.argv[2])
assert result.key_times.started.strftime("%H:%M:%S") == "21:34:47", result.key_times
assert {v.group: v.verdict for v in result.verdicts if v.round == max(w.round for w in result.verdicts)}.get(
    "decode") == "TP_DESYNC", "not the reference incident's verdict"
print(len(result.findings), "findings")
"""

LAST_PROGRESS = """
import sys, time
import polars as pl
from forensics import load_case
start = time.perf_counter()
case = load_case(sys.argv[1])
last = (case.events.filter(pl.col("message").str.contains(r"(?:Prefill|Decode) batch[.,]"))
        .group_by("unit").agg(pl.col("ts").max()).collect())
assert sorted(last.get_column("unit").cast(pl.String)) == ["sglang-dsv4-decode.service", "sglang-dsv4-prefill.service"], last
print(last.height, time.perf_counter() - start)
"""


def inputs() -> tuple[Path, Path, Path, int]:
    """The bundle, its journal (through systemd-journal-remote), journalctl's JSON of that, and how
    many journal entries it has."""
    CACHE.mkdir(exist_ok=True)
    as_json = CACHE / f"reference-x{SCALE}.json"
    journals = CACHE / f"reference-x{SCALE}-journal"
    bundle = reference_bundle(CACHE / f"reference-x{SCALE}", as_json, journals, scale=SCALE)
    export = bundle / "journal" / "gpu-node-00.export.zst"
    if not as_json.exists() or not journals.is_dir():
        plain = CACHE / "reference.export"
        with open(plain, "wb") as out:
            subprocess.run(["zstd", "-dcq", str(export)], check=True, stdout=out)
        shutil.rmtree(journals, ignore_errors=True)
        journals.mkdir()
        subprocess.run([JOURNAL_REMOTE, f"--output={journals}/ref.journal", str(plain)], check=True,
                       capture_output=True)
        with open(as_json.with_suffix(".tmp"), "wb") as out:
            subprocess.run(["journalctl", "-D", str(journals), "-o", "json"], check=True, stdout=out)
        as_json.with_suffix(".tmp").rename(as_json)
        plain.unlink()
    with open(as_json, "rb") as lines:
        entries = sum(1 for _ in lines)
    return bundle, journals, as_json, entries


def collect(journals: Path, output: str) -> Measurement:
    """journalctl writing the journal in `output` form (export: what forensics reads; json: what
    lnav reads), to /dev/null: the step before either tool, when it starts from a host's journal."""
    label = f"collect: journalctl -o {output} of the journal"
    return run(label, ["sh", "-c", f'exec journalctl -D "{journals}" -o {output} > /dev/null'])[0]


def lnav_detector_questions(as_json: Path, label: str) -> Measurement:
    """lnav answering the detectors' journal questions (DETECTOR_SQL), its answers checked against
    the reference incident: the decode and prefill freezes with health checks answered in them, the
    restart command, and both units healthy again at 21:42:00."""
    with tempfile.TemporaryDirectory() as answers:
        commands = [DETECTOR_SQL[0]]
        for number, query in enumerate(DETECTOR_SQL[1:], 1):
            commands += [query, f":write-csv-to {answers}/{number}.csv"]
        argv = ["lnav", "-n"] + [arg for c in commands for arg in ("-c", c if c.startswith(":") else f";{c}")]
        measured = run(label, argv + [str(as_json)])[0]
        gaps, lifecycle, kinds = (list(csv.DictReader(Path(answers, f"{n}.csv").read_text().splitlines()))
                                  for n in (1, 2, 3))
    frozen = {row["unit"]: row["last_progress"][11:19] for row in gaps if int(row["health_200"]) > 0}
    healthy = {row["who"]: row["log_time"][11:19] for row in lifecycle if row["log_body"] == "healthy"}
    restart = [row["log_time"][11:19] for row in lifecycle if "systemctl restart" in row["log_body"]]
    found = {row["kind"] for row in kinds}
    expected = {"sglang-dsv4-decode.service": "21:34:47", "sglang-dsv4-prefill.service": "21:39:07"}
    if (frozen != expected or restart != ["21:40:45"] or set(healthy.values()) != {"21:42:00"}
            or not {"request_aborted", "kv_transfer_failure", "markup_leak"} <= found):
        raise RuntimeError(f"lnav's answers differ from the reference incident: frozen {frozen}, restart {restart}, "
                           f"healthy {healthy}, kinds {sorted(found)}")
    return measured


def _met(held: bool) -> str:
    return "met" if held else "NOT met"


def main() -> None:
    bundle, journals, as_json, entries = inputs()
    case = CACHE / f"reference-x{SCALE}-case"
    lnav_labels = {"lnav": "lnav, cold: same question in SQL over journalctl JSON",
                   "lnav_questions": "lnav, cold: the detectors' journal questions in SQL (one pass + 3 queries)"}
    measures: dict[str, Callable[[], Measurement]] = {
        "analysis": lambda: run("forensics analyze, cold: whole process (imports, ingest, timeline, all detectors)",
                                [sys.executable, "-c", ANALYZE, str(bundle), str(case)])[0],
        "query": lambda: python("last progress per unit, warm: load_case + query on the built case (imports "
                                "excluded; no lnav counterpart: lnav -n reads its input anew each run)", LAST_PROGRESS, str(case)),
        "lnav": lambda: run(lnav_labels["lnav"], ["lnav", "-n", "-c", f";{PROGRESS_SQL}", str(as_json)])[0],
        "lnav_questions": lambda: lnav_detector_questions(as_json, lnav_labels["lnav_questions"]),
        "export": lambda: collect(journals, "export"),
        "json": lambda: collect(journals, "json"),
    }
    if not shutil.which("lnav"):
        for name in lnav_labels:
            del measures[name]
    runs: dict[str, list[Measurement]] = {name: [] for name in measures}
    # They take turns, ROUNDS times: a drift in the machine's speed then reaches them all.
    for _ in range(ROUNDS):
        for name, measure in measures.items():
            runs[name].append(measure())
    medians = {name: median_of(runs[name]) if name in runs
               else Measurement(lnav_labels[name], float("nan"), float("nan"), "lnav not installed")
               for name in ("analysis", "query", "lnav", "lnav_questions", "export", "json")}
    analysis, query, lnav = medians["analysis"], medians["query"], medians["lnav"]
    print(f"\n## The reference incident at {entries:,} journal entries (scale {SCALE}), {os.cpu_count()} cores\n")
    print("| what | seconds (median) | peak RSS MiB | lnav / this | note |")
    print("|---|---:|---:|---:|---|")
    for m in medians.values():
        ratio = f"{lnav.seconds / m.seconds:.1f}" if m in (analysis, query) and lnav.seconds == lnav.seconds else ""
        print(f"| {m.label} | {m.seconds:.2f} | {m.peak_mib:,.0f} | {ratio} | {m.note} |")
    print(f"\ntargets: ingest + all detectors <= {ANALYSIS_TARGET_S:g} s (median {analysis.seconds:.2f} s); "
          f"last-progress query <= {QUERY_TARGET_S:g} s (median {query.seconds:.2f} s)")
    if lnav.seconds == lnav.seconds:
        questions = medians["lnav_questions"].seconds / analysis.seconds
        print(f"as ratios: lnav / analysis {lnav.seconds / analysis.seconds:.2f} (target {LNAV_QUERY_RATIO:g}: "
              f"{_met(lnav.seconds / analysis.seconds >= LNAV_QUERY_RATIO)}); lnav's detector questions / analysis "
              f"{questions:.2f} (target {LNAV_QUESTIONS_RATIO:g}: {_met(questions >= LNAV_QUESTIONS_RATIO)}); "
              f"peak {analysis.peak_mib:,.0f} MiB (target <= {PEAK_TARGET_MIB:,}: "
              f"{_met(analysis.peak_mib <= PEAK_TARGET_MIB)}); lnav / query {lnav.seconds / query.seconds:.0f}")
        with_lnav = medians["json"].seconds + lnav.seconds
        with_forensics = medians["export"].seconds + analysis.seconds
        print(f"from a host's journal (journalctl first): lnav's query {with_lnav:.1f} s / "
              f"forensics {with_forensics:.1f} s = {with_lnav / with_forensics:.1f}")
