"""The reference incident at 1 M journal entries: ingest + every detector, and the question an SRE
asks first — when did each component last make progress? — beside lnav answering it with SQL, in
one run.

Inputs (generated once into bench/.cache/, seed fixed): `forensics reference --scale 100` (the
same story, ~1 M entries), its journal (through systemd-journal-remote: the host's own `.journal`)
and journalctl's JSON of that journal. Targets: ingest + all detectors <= 5 s; the last-progress
query alone <= 0.5 s. Each is run BENCH_ROUNDS times (default 3), taking turns with lnav; the
tables give medians and every run, wall and CPU time (the whole process tree: forensics runs on
both cores, so each lead is also given per CPU-second) and peak memory (the tree's: journalctl
under the `.journal` rows).

Two comparisons, both printed:
- from what each tool reads (different inputs): forensics analysing the bundle's
  journal export, lnav querying the JSON journalctl made beforehand; neither pays for its input's
  making;
- like for like: both start from the host's `.journal` and pay for their own conversion —
  forensics analysing a bundle holding the `.journal` (its own reader writes each file's export;
  journalctl, a child counted with it, only where a file is not ordinary),
  lnav's query after `journalctl -o json` writes the JSON it reads.
lnav also answers the questions the detectors answer from the journal (progress gaps with the
health checks answered during them, systemd's and sudo's lifecycle lines with the first healthy
answer after the restart, the notable line kinds per unit): one pass of the log into a temporary
table, then three queries over it. Every answer is checked: the analysis finds the reference
incident, lnav's last-progress answer equals forensics' (unit by unit, to the millisecond lnav
prints), lnav's detector answers match the incident's times.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.inputs import STAMP, reference_bundle
from bench.measure import Measurement, cores, median_of, python_out, run

SCALE = int(os.environ.get("BENCH_REFERENCE_SCALE", "100"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
ANALYSIS_TARGET_S, QUERY_TARGET_S = 5.0, 0.5
# The analysis against lnav in the same run (issue 35): this many times faster than lnav's single
# query and than lnav answering the detectors' questions, within this peak.
LNAV_QUERY_RATIO, LNAV_QUESTIONS_RATIO, PEAK_TARGET_MIB = 2.5, 4.0, 1536
CPU_PER_MILLION_GOAL = 2.0  # CPU-seconds of the whole analysis per million journal entries (issue 54)
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
import json, sys, time
import polars as pl
from forensics import load_case
start = time.perf_counter()
case = load_case(sys.argv[1])
last = (case.events.filter(pl.col("message").str.contains(r"(?:Prefill|Decode) batch[.,]"))
        .group_by("unit").agg(pl.col("ts").max()).collect())
seconds = time.perf_counter() - start
answer = {unit: ts.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] for unit, ts in last.iter_rows()}
print(json.dumps(answer))
print(seconds)
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


def journal_bundle(bundle: Path, journals: Path) -> Path:
    """The bundle with the host's `.journal` in place of its export (hard links, no copies): what
    forensics reads when it starts from the journal, as lnav's like-for-like row does."""
    folder = CACHE / f"{bundle.name}-from-journal"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "journal").mkdir(parents=True)
    for item in bundle.iterdir():
        if item.name not in ("journal", STAMP):
            (shutil.copytree(item, folder / item.name, copy_function=os.link) if item.is_dir()
             else os.link(item, folder / item.name))
    for number, part in enumerate(sorted(journals.glob("*.journal*"))):
        os.link(part, folder / "journal" / f"gpu-node-00-{number}.journal")
    return folder


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text().splitlines()))


def check_last_progress(lnav: list[dict[str, str]], ours: dict[str, str]) -> dict[str, str]:
    """lnav's last-progress answer (its CSV rows) against forensics' (unit -> last progress time,
    to the millisecond): the same two units, the same times, or the comparison is not between equal
    answers and the bench fails."""
    theirs = {row["_SYSTEMD_UNIT"]: row["max(log_time)"] for row in lnav}
    units = {"sglang-dsv4-decode.service", "sglang-dsv4-prefill.service"}
    if set(ours) != units or theirs != ours:
        raise RuntimeError(f"lnav's last progress {theirs} differs from forensics' {ours} (units expected: "
                           f"{sorted(units)}): not equal answers")
    return theirs


def lnav_last_progress(label: str, argv: list[str], answer: Path, ours: dict[str, str]) -> Measurement:
    """lnav's single query (`argv` ends by writing its answer to `answer`), its answer checked
    against forensics' `ours`."""
    answer.unlink(missing_ok=True)
    measured = run(label, argv)[0]
    check_last_progress(read_csv(answer), ours)
    return measured


def check_detector_answers(gaps: list[dict[str, str]], lifecycle: list[dict[str, str]],
                           kinds: list[dict[str, str]]) -> None:
    """lnav's answers to the detectors' questions against the reference incident: the decode and
    prefill freezes with health checks answered in them, the restart command, and both units
    healthy again at 21:42:00."""
    frozen = {row["unit"]: row["last_progress"][11:19] for row in gaps if int(row["health_200"]) > 0}
    healthy = {row["who"]: row["log_time"][11:19] for row in lifecycle if row["log_body"] == "healthy"}
    restart = [row["log_time"][11:19] for row in lifecycle if "systemctl restart" in row["log_body"]]
    found = {row["kind"] for row in kinds}
    expected = {"sglang-dsv4-decode.service": "21:34:47", "sglang-dsv4-prefill.service": "21:39:07"}
    if (frozen != expected or restart != ["21:40:45"] or set(healthy.values()) != {"21:42:00"}
            or not {"request_aborted", "kv_transfer_failure", "markup_leak"} <= found):
        raise RuntimeError(f"lnav's answers differ from the reference incident: frozen {frozen}, restart {restart}, "
                           f"healthy {healthy}, kinds {sorted(found)}")


def lnav_detector_questions(as_json: Path, label: str) -> Measurement:
    """lnav answering the detectors' journal questions (DETECTOR_SQL), its answers checked."""
    with tempfile.TemporaryDirectory() as answers:
        commands = [DETECTOR_SQL[0]]
        for number, query in enumerate(DETECTOR_SQL[1:], 1):
            commands += [query, f":write-csv-to {answers}/{number}.csv"]
        argv = ["lnav", "-n"] + [arg for c in commands for arg in ("-c", c if c.startswith(":") else f";{c}")]
        measured = run(label, argv + [str(as_json)])[0]
        check_detector_answers(*(read_csv(Path(answers, f"{n}.csv")) for n in (1, 2, 3)))
    return measured


def _met(held: bool) -> str:
    return "met" if held else "NOT met"


def _ratio(peer: Measurement, ours: Measurement) -> str:
    """peer / ours in wall time and in CPU-seconds."""
    return (f"{peer.seconds / ours.seconds:.1f}× in wall time ({peer.seconds:.2f} / {ours.seconds:.2f} s), "
            f"{peer.cpu_seconds / ours.cpu_seconds:.1f}× per CPU-second ({peer.cpu_seconds:.2f} / "
            f"{ours.cpu_seconds:.2f} CPU-s)")


def main() -> None:
    bundle, journals, as_json, entries = inputs()
    from_journal = journal_bundle(bundle, journals)
    case, journal_case = CACHE / f"reference-x{SCALE}-case", CACHE / f"reference-x{SCALE}-journal-case"
    answer, lnav_json = CACHE / "lnav-last-progress.csv", CACHE / f"reference-x{SCALE}-lnav-own.json"
    ours: dict[str, str] = {}
    lnav_query = ["-n", "-c", f";{PROGRESS_SQL}", "-c", f":write-csv-to {answer}"]
    lnav_labels = {
        "lnav": "lnav, cold: the same question in SQL over journalctl's JSON (made beforehand, not timed)",
        "lnav_journal": "like for like — lnav from the host's .journal: journalctl -o json to a file, then the query",
        "lnav_questions": "lnav, cold: the detectors' journal questions in SQL over the JSON (one pass + 3 queries)",
    }

    def query() -> Measurement:
        measured, out = python_out("last progress per unit, warm: load_case + query on the built case (imports "
                                   "excluded; no lnav counterpart: lnav -n reads its input anew each run)",
                                   LAST_PROGRESS, str(case))
        ours.update(json.loads(out.strip().splitlines()[-2]))
        return measured

    measures: dict[str, Callable[[], Measurement]] = {
        "analysis": lambda: run("forensics analyze, cold, of the bundle's journal export: whole process (imports, "
                                "ingest, timeline, all detectors)",
                                [sys.executable, "-c", ANALYZE, str(bundle), str(case)])[0],
        "query": query,
        "lnav": lambda: lnav_last_progress(lnav_labels["lnav"], ["lnav", *lnav_query, str(as_json)], answer, ours),
        "analysis_journal": lambda: run(
            "like for like — forensics analyze from the host's .journal (its own reader writes each file's export)",
            [sys.executable, "-c", ANALYZE, str(from_journal), str(journal_case)])[0],
        "lnav_journal": lambda: lnav_last_progress(
            lnav_labels["lnav_journal"],
            # $1 the journal, $2 the JSON; after `shift`, "$@" is lnav's query and then the JSON
            ["sh", "-c", 'journalctl -D "$1" -o json > "$2" && json=$2 && shift 2 && exec lnav "$@" "$json"', "sh",
             str(journals), str(lnav_json), *lnav_query], answer, ours),
        "lnav_questions": lambda: lnav_detector_questions(as_json, lnav_labels["lnav_questions"]),
    }
    if not shutil.which("lnav"):
        for name in lnav_labels:
            del measures[name]
    runs: dict[str, list[Measurement]] = {name: [] for name in measures}
    # They take turns, ROUNDS times: a drift in the machine's speed then reaches them all.
    for _ in range(ROUNDS):
        for name, measure in measures.items():
            runs[name].append(measure())
    lnav_json.unlink(missing_ok=True)
    medians = {name: median_of(runs[name]) if name in runs
               else Measurement(lnav_labels[name], float("nan"), float("nan"), "lnav not installed")
               for name in measures.keys() | lnav_labels.keys()}
    order = ("analysis", "query", "lnav", "lnav_questions", "analysis_journal", "lnav_journal")
    analysis, query_row, lnav = medians["analysis"], medians["query"], medians["lnav"]
    print(f"\n## The reference incident at {entries:,} journal entries (scale {SCALE}), {os.cpu_count()} cores, "
          f"{ROUNDS} rounds\n")
    print("| what | seconds (median) | CPU s | cores busy | peak RSS MiB (process tree) | note |")
    print("|---|---:|---:|---:|---:|---|")
    for name in order:
        m = medians[name]
        print(f"| {m.label} | {m.seconds:.2f} | {m.cpu_seconds:.2f} | {cores(m) if name != 'query' else ''} | {m.peak_mib:,.0f} | {m.note} |")
    print(f"\n(the query row's CPU is its whole process, imports included; its seconds exclude them.) "
          f"Last progress, both tools: {ours}")
    print(f"\ntargets: ingest + all detectors <= {ANALYSIS_TARGET_S:g} s (median {analysis.seconds:.2f} s); "
          f"last-progress query <= {QUERY_TARGET_S:g} s (median {query_row.seconds:.2f} s); "
          f"peak {analysis.peak_mib:,.0f} MiB (target <= {PEAK_TARGET_MIB:,}: {_met(analysis.peak_mib <= PEAK_TARGET_MIB)})")
    per_million = analysis.cpu_seconds / entries * 1e6
    print(f"CPU-seconds per million entries, the whole analysis: {per_million:.2f} "
          f"(goal <= {CPU_PER_MILLION_GOAL:g}: {_met(per_million <= CPU_PER_MILLION_GOAL)})")
    if lnav.seconds == lnav.seconds:
        questions = medians["lnav_questions"]
        print(f"- lnav's single query / analysis, DIFFERENT INPUTS (lnav reads the JSON journalctl made beforehand, "
              f"forensics the bundle's export; neither pays for making its input): {_ratio(lnav, analysis)} "
              f"(target {LNAV_QUERY_RATIO:g} in wall time: {_met(lnav.seconds / analysis.seconds >= LNAV_QUERY_RATIO)})")
        print(f"- like for like, both from the host's .journal, each paying its own conversion: lnav's query / "
              f"analysis {_ratio(medians['lnav_journal'], medians['analysis_journal'])}")
        print(f"- lnav's detector questions / analysis (different inputs, as the first): {_ratio(questions, analysis)} "
              f"(target {LNAV_QUESTIONS_RATIO:g} in wall time: "
              f"{_met(questions.seconds / analysis.seconds >= LNAV_QUESTIONS_RATIO)})")
        print(f"- lnav's single query / the warm query: {lnav.seconds / query_row.seconds:.0f}× in wall time")
