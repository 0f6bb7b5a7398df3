"""The `forensics` command: `report` a bundle (notebook, report.html, timeline.html, postmortem.md,
summary.json), `batch` many, `ingest` a bundle into a case, `summary` of a case, `analyze` a bundle
(findings, tracks, key times), `stacks` verdicts, `pull` metrics from a Prometheus API into a
bundle, `reference` / `synth` generated data."""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from forensics.capture.kubernetes import add_flags as add_kubernetes_flags, run_from_args as run_kubernetes
from forensics.case.bundle import open_bundle
from forensics.errors import ForensicsError
from forensics.case.places import is_url

# The data stack (polars, numpy, pyarrow) is imported where a command needs it, not here: `--help`
# and argument errors answer at once.


def _default_case(bundle: Path) -> Path:
    """Where a command keeps a bundle's case when no `--case` is given: the per-user cache
    (`$XDG_CACHE_HOME/forensics`, else `~/.cache/forensics`), never the folder it was run from; one
    folder per bundle path, so two bundles of one name do not share a case."""
    import hashlib
    import os

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "forensics"
    resolved = bundle.resolve()
    key = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    return cache / f"{resolved.name}-{key}" / "case"


def _case_place(text: str) -> Path | str:
    """A `--case` as given: a folder, or kept as text when it is a URL (`s3://bucket/cases/x`:
    a Path would fold its `//`)."""
    return text if is_url(text) else Path(text)


# what each kind of task is part of, for its progress bar
PHASES = {"inputs": "ingest: inputs", "partitions": "ingest: host folders", "objects uploaded": "ingest: upload",
          "hosts": "timeline: hosts"}


def _progress(items: Iterable[Any], what: str) -> Iterable[Any]:
    """A progress bar on stderr over a run's tasks (`forensics.case.cluster.Progress`)."""
    from tqdm import tqdm

    return tqdm(items, desc=PHASES.get(what, what), unit="task", file=sys.stderr)


def _ingest(bundle: Path, case_dir: Path | str) -> None:
    """Ingest with a progress bar, saying where the case goes first."""
    from forensics.case.build import ingest
    from forensics.case.targets import check_case_target

    check_case_target(case_dir, bundle)  # a refusal is the only line printed
    print(f"case: {case_dir}", file=sys.stderr)
    ingest(bundle, case_dir, progress=_progress)


def _case_for(path: Path | str) -> Path | str:
    """A case folder or URL as given, or the default case of a bundle, ingested now."""
    if isinstance(path, str):
        return path
    if (path / "manifest.json").is_file():
        return path
    case_dir = _default_case(path)
    _ingest(path, case_dir)
    sys.stderr.flush()
    return case_dir


def _expected(pairs: list[str]) -> dict[str, int]:
    expected = {}
    for pair in pairs:
        group, sep, size = pair.partition("=")
        if not sep or not size.isdigit():
            raise ForensicsError(f"--expect {pair!r}: write GROUP=RANKS, e.g. decode=4")
        expected[group] = int(size)
    return expected


def _groups(pairs: list[str]) -> dict[int, str]:
    by_pid = {}
    for pair in pairs:
        group, sep, pids = pair.partition("=")
        numbers = pids.split(",")
        if not sep or not group or not all(n.strip().isdigit() for n in numbers):
            raise ForensicsError(f"--group {pair!r}: write GROUP=PID,PID,…, e.g. decode=4242,4243")
        by_pid.update({int(n): group for n in numbers})
    return by_pid


def _utc(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ForensicsError(f"{text!r} is not an ISO-8601 time (e.g. 2026-06-18T21:30:00Z)") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _report_options(parser: argparse.ArgumentParser) -> None:
    _dask_option(parser)
    parser.add_argument("--display-tz", default="UTC", help="time zone the report shows times in (default: UTC)")
    parser.add_argument("--profile", default="", help="profile name or .toml path (default: chosen from the evidence)")
    redaction = parser.add_mutually_exclusive_group()
    redaction.add_argument("--redact", dest="redact", action="store_const", const="all", default="timeline",
                           help="redact every output (default: timeline.html only)")
    redaction.add_argument("--no-redact", dest="redact", action="store_const", const="none",
                           help="redact nothing, not even timeline.html")
    parser.add_argument("--library", type=Path, help="a folder of earlier reports (a batch's output): the report "
                                                     "says when the same problem was seen before")


def _dask_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dask", metavar="tcp://HOST:8786", default="",
                        help="run ingest's per-input and per-host work on this Dask scheduler's workers (default: "
                             "$FORENSICS_DASK, else this process); bundle and case must be on a path every worker sees")


def _parser() -> argparse.ArgumentParser:
    """The `forensics` command line: its subcommands in the order `--help` lists them."""
    parser = argparse.ArgumentParser(prog="forensics", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_report_commands, _add_evidence_commands, _add_lab_commands, _add_capture_commands):
        add(sub)
    return parser


def _add_report_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`report` one bundle and `batch` many."""
    p_report = sub.add_parser("report", help="render a bundle's incident report with papermill into exports/")
    p_report.add_argument("bundle", type=Path)
    p_report.add_argument("--out", type=Path, help="output folder (default: exports/<bundle name>)")
    p_report.add_argument("--case", type=_case_place, help="put the case here instead of OUT/case: a folder or an "
                                                          "object-store URL such as s3://bucket/cases/x")
    p_report.add_argument("--screens", action="store_true", help="also write PNG pictures of the report's first "
                                                               "screen and timeline into screens/ (headless Chromium)")
    _report_options(p_report)
    p_batch = sub.add_parser("batch", help="render many bundles in parallel and write an index.html")
    p_batch.add_argument("bundles", nargs="+", metavar="DIR_OR_GLOB",
                         help="bundle folders, folders of bundles, or globs matching either")
    p_batch.add_argument("--out", type=Path, default=Path("exports"), help="output folder (default: exports)")
    p_batch.add_argument("--workers", type=int, default=2, help="bundles rendered at once (default: 2)")
    p_batch.add_argument("--cases", metavar="FOLDER_OR_URL", help="put each bundle's case under this folder or "
                                                                 "object-store URL (default: in its output folder)")
    _report_options(p_batch)


def _add_evidence_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """What reads or fetches evidence: `ingest` a bundle into a case, its `summary`, the `stacks`
    verdicts, `pull` metrics from a Prometheus-compatible API, `analyze` a bundle."""
    p_ingest = sub.add_parser("ingest", help="read a bundle's inputs into a case (Parquet) and print its summary")
    p_ingest.add_argument("bundle", type=Path)
    p_ingest.add_argument("--case", type=_case_place, help="case folder or object-store URL such as s3://bucket/cases/x "
                                                           "(default: ~/.cache/forensics/<bundle>-<id>/case)")
    _dask_option(p_ingest)
    p_summary = sub.add_parser("summary", help="print what a case holds")
    p_summary.add_argument("case", type=_case_place, help="a case folder or URL")
    p_stacks = sub.add_parser("stacks", help="judge the py-spy dumps of a bundle or case: TP desync and friends")
    p_stacks.add_argument("path", type=_case_place, help="a bundle folder (ingested first), or a case folder or URL")
    p_stacks.add_argument("--profile", default="sglang", help="profile name or .toml path (default: sglang)")
    p_stacks.add_argument("--expect", action="append", default=[], metavar="GROUP=RANKS",
                          help="how many ranks a group has, when the highest may be missing (e.g. decode=4)")
    p_stacks.add_argument("--group", action="append", default=[], metavar="GROUP=PID,PID,…",
                          help="put these processes in this group, whatever headers and titles say")
    p_stacks.add_argument("--all-rounds", action="store_true", help="a verdict per dump round, not just the last")
    p_pull = sub.add_parser("pull", help="pull the incident window from a Prometheus-compatible API into a bundle")
    p_pull.add_argument("url", help="base URL, e.g. http://prometheus:9090")
    p_pull.add_argument("--start", required=True, help="ISO-8601 (UTC unless it has a zone)")
    p_pull.add_argument("--end", required=True, help="ISO-8601 (UTC unless it has a zone)")
    p_pull.add_argument("--query", action="append", default=[], help="a PromQL range query (repeatable)")
    p_pull.add_argument("--metric", action="append", default=[], help="all series of this metric name (repeatable)")
    p_pull.add_argument("--step", type=float, help="seconds between points (default: from the window)")
    p_pull.add_argument("--bundle", type=Path, default=Path("."), help="bundle folder (default: .)")
    p_an = sub.add_parser("analyze", help="findings, symptom tracks and key times of a bundle")
    p_an.add_argument("bundle", type=Path)
    p_an.add_argument("--case", type=_case_place, help="case folder or object-store URL such as s3://bucket/cases/x "
                                                      "(default: ~/.cache/forensics/<bundle>-<id>/case)")
    p_an.add_argument("--json", action="store_true", help="print summary.json instead of text")
    p_an.add_argument("--brief", action="store_true", help="print the headline only: what happened, TTD/TTM/TTR, "
                                                         "the other symptom tracks (the README's block)")
    p_an.add_argument("--profile", default="", help="profile name or .toml path (default: chosen from the evidence)")
    p_an.add_argument("--display-tz", default="UTC", help="time zone the text writes times in (default: UTC)")
    _dask_option(p_an)


def _add_lab_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The generated data: the `reference` incident and a `synth` journal export."""
    p_ref = sub.add_parser("reference", help="write the reference incident bundle (deterministic), at any scale")
    p_ref.add_argument("out", type=Path)
    p_ref.add_argument("--scale", type=int, default=1, help="multiply request traffic (1: ~10k journal entries)")
    p_ref.add_argument("--hosts", type=int, default=1, help="hosts; only the first has the incident")
    p_ref.add_argument("--time-zone", default="UTC", help="the incident host's local time zone")
    p_ref.add_argument("--skew-s", type=float, default=0.0, help="the incident host's clock minus true time")
    p_ref.add_argument("--undeclared-skew", action="store_true",
                       help="leave the incident host's offset out of incident.toml (align estimates it)")
    p_ref.add_argument("--journal-format", action="append", choices=["export", "json", "journal"],
                       help="journal forms to write (default: export)")
    p_synth = sub.add_parser("synth", help="write a generated SGLang-shaped journal export")
    p_synth.add_argument("out", type=Path)
    p_synth.add_argument("--entries", type=int, default=10_000)
    p_synth.add_argument("--hosts", type=int, default=1)
    p_synth.add_argument("--seed", type=int, default=0)


def _add_capture_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`collect` a bundle on the affected host (here or over ssh), and `watch` engines to capture the
    moment one hangs or fails."""
    p_collect = sub.add_parser("collect", help="capture a bundle on the affected host before the restart "
                                                "(read-only, every step time-bounded)")
    p_collect.add_argument("out", type=Path, help="a new folder for the bundle")
    p_collect.add_argument("--unit", action="append", default=[], help="a systemd unit (repeat)")
    p_collect.add_argument("--since", default="-1h", help="journal window start (journalctl syntax; default -1h)")
    p_collect.add_argument("--until", help="journal window end")
    p_collect.add_argument("--journal", type=Path, help="a journal directory or file instead of the running journald")
    p_collect.add_argument("--metrics", action="append", default=[], metavar="[GROUP=]HOST:PORT",
                           help="a /metrics endpoint to scrape (repeat)")
    p_collect.add_argument("--scrapes", type=int, default=3)
    p_collect.add_argument("--scrape-interval", type=float, default=5.0)
    p_collect.add_argument("--title", action="append", default=[], help="process-title pattern to dump (repeat; "
                                                                        "default: the profile's)")
    p_collect.add_argument("--pids", action="append", default=[], metavar="GROUP=PID,…", help="processes to dump")
    p_collect.add_argument("--rounds", type=int, default=2)
    p_collect.add_argument("--round-interval", type=float, default=2.0)
    p_collect.add_argument("--native", action="store_true", help="py-spy --native")
    p_collect.add_argument("--config", type=Path, help="a TOML file of these choices (units, endpoints, titles, "
                                                       "pids, rounds, …); flags given as well win")
    p_collect.add_argument("--script", action="store_true",
                           help="print a POSIX sh script doing the same on a remote host (a tar on stdout)")
    p_collect.add_argument("--host", action="append", default=[], metavar="SSH_DESTINATION",
                           help="collect on this host over ssh instead (repeat; nothing is installed there); each "
                                "host's bundle goes to OUT/<host>/")
    p_collect.add_argument("--inventory", type=Path, help="a TOML file of hosts ([[host]] name = …, with their own "
                                                          "units, endpoints, titles, pids; [defaults] for all)")
    p_collect.add_argument("--ssh-config", type=Path, help="an ssh config file for the hosts (ssh -F)")
    p_collect.add_argument("--concurrency", type=int, default=8, help="hosts collected at once (default 8)")
    p_collect.add_argument("--deadline", type=float, default=300.0, help="seconds one host may take (default 300)")
    add_kubernetes_flags(p_collect)
    p_watch = sub.add_parser("watch", help="poll metrics endpoints and collect a bundle the moment an engine hangs")
    p_watch.add_argument("out", type=Path, help="the folder bundles go under (one per capture, named by time)")
    p_watch.add_argument("--follow-journal", action="store_true",
                         help="follow the journal of the units and the kernel, and capture at the first line of a "
                              "failure mode (collective timeout, Xid, OOM kill, crash loop, a killed main process)")
    p_watch.add_argument("--follow", type=Path, metavar="LOG_FILE",
                         help="the same, following a log file as it grows (where no journald runs)")
    p_watch.add_argument("--restarts", type=int, default=3, help="a restart counter from which a crash loop is a "
                                                                 "sign (default 3)")
    p_watch.add_argument("--flight-recorder-wait", type=float, default=30.0,
                         help="seconds to wait for Flight Recorder dumps after the stacks (default 30)")
    p_watch.add_argument("--host", action="append", default=[], metavar="SSH_DESTINATION",
                         help="with --follow/--follow-journal: follow this host over ssh too (repeat); a sign on "
                              "any host collects every host")
    p_watch.add_argument("--inventory", type=Path, help="hosts to follow and collect, as for collect --inventory")
    p_watch.add_argument("--ssh-config", type=Path, help="an ssh config file for the hosts (ssh -F)")
    p_watch.add_argument("--metrics", action="append", default=[], metavar="[GROUP=]HOST:PORT",
                         help="a /metrics endpoint to watch (repeat)")
    p_watch.add_argument("--after", type=float, default=60.0, help="seconds of flat progress with requests pending "
                                                                   "that make a hang (default 60)")
    p_watch.add_argument("--poll", type=float, default=5.0, help="seconds between polls (default 5)")
    p_watch.add_argument("--webhook", help="URL to POST the capture to (JSON)")
    p_watch.add_argument("--then", help="a command to run once the evidence is safe (e.g. a restart)")
    p_watch.add_argument("--forever", action="store_true", help="keep watching after a capture")
    for flag, kwargs in (("--unit", {"action": "append", "default": []}), ("--title", {"action": "append",
                                                                                    "default": []}),
                         ("--pids", {"action": "append", "default": []}), ("--journal", {"type": Path}),
                         ("--rounds", {"type": int, "default": 2}), ("--round-interval", {"type": float,
                                                                                         "default": 2.0})):
        p_watch.add_argument(flag, **kwargs, help="as for collect")  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `forensics` console script."""
    args = _parser().parse_args(argv)
    from forensics.render.text import TerminalSafe

    # what commands print comes from the evidence: its control characters are shown, never acted on
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalSafe(out), TerminalSafe(err, keep_carriage_return=True)  # type: ignore[assignment]
    try:
        return _main(args)
    finally:
        sys.stdout, sys.stderr = out, err


def console() -> NoReturn:
    """The `forensics` console script: `main`, then an exit without the interpreter's teardown.

    After an analysis the interpreter spent ~0.09 s more taking every module and object apart, memory
    the kernel takes back at once (measured: `bench/cli_exit.py`). Its shutdown steps that do work
    are taken first, in its own order: threads still running are waited for (and thread pools shut
    down), atexit handlers run (logging, temporary folders left for exit, Dask clients), Python's
    and C's output buffers are flushed. What is skipped is the last collection: a `__del__` of an
    object in a reference cycle, or of a file left open in a module's globals, does not run (none
    was left after an analysis, checked; the other commands close what they open in `with`)."""
    try:
        code: object = main()
    except SystemExit as done:  # argparse's --help and usage errors
        code = done.code
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None:  # not CPython's threading module: the ordinary exit
        sys.exit(code)  # type: ignore[arg-type]
    if code is not None and not isinstance(code, int):  # sys.exit("why") prints why and exits with 1
        print(code, file=sys.stderr)
    status = code if isinstance(code, int) else 0 if code is None else 1
    try:
        shutdown()
    except KeyboardInterrupt:  # interrupted while waiting for a thread: said as a command interrupted
        status = 130
    atexit._run_exitfuncs()
    os._exit(_flushed(status) & 0xFF)


def _flushed(status: int) -> int:
    """`status` once every standard stream (and C's stdio) is written out; 120 when one cannot be,
    as the interpreter exits (a reader gone: `forensics … | head`), without its traceback."""
    import ctypes

    streams = {id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__) if s is not None}
    for stream in streams.values():
        try:
            if not stream.closed:
                stream.flush()
        except (OSError, ValueError):
            status = 120
    ctypes.CDLL(None).fflush(None)
    return status


def _main(args: argparse.Namespace) -> int:
    """Run the parsed command, its failures as one line each."""
    try:
        with open_bundle(getattr(args, "bundle", None) or getattr(args, "path", None) or ".") as folder:
            if getattr(args, "bundle", None) is not None:
                args.bundle = folder
            elif getattr(args, "path", None) is not None:
                args.path = folder
            return _run(args)
    except ForensicsError as error:
        print(f"forensics: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("forensics: interrupted; outputs already there were left as they were", file=sys.stderr)
        return 130
    except OSError as error:  # a full disk, a read-only folder, a file that vanished: one line, no traceback
        where = f" ({error.filename})" if error.filename else ""
        print(f"forensics: {error.strerror or error}{where}; outputs already there were left as they were",
              file=sys.stderr)
        return 1


def _collect_fleet(args: argparse.Namespace, plan: Any) -> int:
    """`collect --host …/--inventory`: every host over ssh at once; 1 when any could not be collected
    or sent anything but files and folders."""
    from dataclasses import replace

    from forensics.capture.plan import checked
    from forensics.capture.fleet import collect_fleet, folder_name, load_inventory

    hosts = load_inventory(args.inventory, args.out) if args.inventory else []
    hosts += [(h, checked(replace(plan, out=args.out / folder_name(h)), f"--host {h}")) for h in args.host]
    results = collect_fleet(args.out, hosts, concurrency=args.concurrency, deadline_s=args.deadline,
                            ssh_config=args.ssh_config)
    for r in results:
        print(f"{r.host}: {r.status} ({r.files} files, {r.seconds:.1f} s)" + (f": {r.why}" if r.why else ""))
        for refused in r.refused[:20]:  # a host's stream holds files and folders only: anything else is an attack
            print(f"  {r.host}: refused {refused['path']}: {refused['reason']}")
        if len(r.refused) > 20:
            print(f"  {r.host}: {len(r.refused) - 20} more refused members in fleet.json")
    print(f"fleet record: {args.out / 'fleet.json'}")
    return 0 if all(r.status == "collected" and not r.refused for r in results) else 1


def _pid_groups(pairs: list[str]) -> dict[str, list[int]]:
    """`--pids GROUP=PID,PID` flags as a mapping."""
    pids: dict[str, list[int]] = {}
    for pair in pairs:
        group, _, listed = pair.partition("=")
        try:
            pids.setdefault(group, []).extend(int(p) for p in listed.split(",") if p)
        except ValueError:
            raise ForensicsError(f"--pids {pair!r}: write GROUP=PID,PID") from None
    return pids


def _check_choices(args: argparse.Namespace) -> None:
    """A display zone or profile that cannot be used stops the command before any work, in one line."""
    zone = getattr(args, "display_tz", None)
    if zone:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ForensicsError(f"--display-tz {zone!r}: not a time zone (e.g. UTC, Asia/Shanghai, "
                                 "America/New_York)") from None
    if getattr(args, "profile", None):
        from forensics.profiles import load_profile

        load_profile(args.profile)  # a ProfileError names the shipped ones or the file's problem


def _run(args: argparse.Namespace) -> int:
    """Carry out one parsed command."""
    _check_choices(args)
    if getattr(args, "dask", ""):
        import os

        from forensics.case.cluster import DASK_ENV

        # read where each case is ingested, in this process and in report notebooks' kernels
        os.environ[DASK_ENV] = args.dask
    if getattr(args, "library", None) is not None:
        import os

        # read by the report notebook's kernel, which inherits this process's environment
        os.environ["FORENSICS_LIBRARY"] = str(args.library.resolve())
    return _COMMANDS[args.command](args)


def _run_report(args: argparse.Namespace) -> int:
    """`report`: render one bundle's report."""
    from forensics.report import render
    rendered = render(args.bundle, args.out, args.display_tz, args.profile, args.redact, screens=args.screens,
                      case=args.case)
    for name, path in rendered.files.items():
        print(f"{name:<14} {path}")
    return 0


def _run_batch(args: argparse.Namespace) -> int:
    """`batch`: render many bundles and their index; 1 when any failed."""
    from forensics.report import batch
    rows = batch([str(b) for b in args.bundles], args.out, args.workers, args.display_tz, args.profile,
                 args.redact, cases=args.cases)
    failed = [r for r in rows if r.get("error")]
    print(f"{len(rows) - len(failed)} rendered, {len(failed)} failed; index: {args.out / 'index.html'}")
    for row in failed:
        print(f"  failed {row['bundle']}: {row['error'].splitlines()[0]}")
    return 1 if failed else 0


def _run_ingest(args: argparse.Namespace) -> int:
    """`ingest`: a bundle into its case, then the case's summary."""
    case_dir = args.case or _default_case(args.bundle)
    _ingest(args.bundle, case_dir)
    sys.stderr.flush()
    from forensics.render.text_report import print_summary

    print_summary(case_dir)
    return 0


def _run_watch(args: argparse.Namespace) -> int:
    """`watch`: poll the engines, or follow journals and logs, and capture."""
    from forensics.capture.plan import Plan
    from forensics.capture.watch import Watch, watch

    plan = Plan(args.out, units=args.unit, journal=args.journal, endpoints=args.metrics, scrapes=2,
                scrape_interval_s=1.0, titles=args.title, pids=_pid_groups(args.pids), rounds=args.rounds,
                round_interval_s=args.round_interval)
    if args.follow_journal or args.follow:
        from dataclasses import replace

        from forensics.capture.plan import checked
        from forensics.capture.fleet import folder_name, load_inventory
        from forensics.capture.signs import SignWatch, follow

        hosts = load_inventory(args.inventory, args.out) if args.inventory else []
        hosts += [(h, checked(replace(plan, out=args.out / folder_name(h)), f"--host {h}")) for h in args.host]
        for bundle in follow(SignWatch(plan, args.follow, args.unit, args.restarts, args.flight_recorder_wait,
                                       once=not args.forever, hosts=hosts, ssh_config=args.ssh_config)):
            print(bundle)
        return 0
    if not args.metrics:
        raise ForensicsError("watch needs --metrics (an engine's /metrics to poll), --follow-journal or --follow")
    for bundle in watch(Watch(args.metrics, plan, after_s=args.after, poll_s=args.poll, webhook=args.webhook,
                              then=args.then, once=not args.forever)):
        print(bundle)
    return 0


def _run_collect(args: argparse.Namespace) -> int:
    """`collect`: a bundle here, over ssh, from Kubernetes, or the script that takes one."""
    if args.k8s_namespace:
        return run_kubernetes(args)
    from forensics.capture.collect import collect
    from forensics.capture.plan import Plan, plan_from_toml
    from forensics.capture.sh_script import script

    plan = plan_from_toml(args.config, args.out) if args.config else Plan(args.out)
    given = {"units": args.unit, "until": args.until, "journal": args.journal, "endpoints": args.metrics,
             "titles": args.title, "pids": _pid_groups(args.pids), "native": args.native or None}
    for name, value in given.items():
        if value:
            setattr(plan, name, value)
    for name, value, default in (("since", args.since, "-1h"), ("scrapes", args.scrapes, 3),
                                 ("scrape_interval_s", args.scrape_interval, 5.0), ("rounds", args.rounds, 2),
                                 ("round_interval_s", args.round_interval, 2.0)):
        if value != default or not args.config:
            setattr(plan, name, value)
    if args.script:
        print(script(plan), end="")
        return 0
    if args.host or args.inventory:
        return _collect_fleet(args, plan)
    done = collect(plan)
    for path in done.written:
        print(f"wrote {path}")
    for item in done.missing:
        print(f"could not collect {item['what']}: {item['why']}")
    return 0


def _run_summary(args: argparse.Namespace) -> int:
    """`summary`: what a case holds."""
    from forensics.render.text_report import print_summary

    print_summary(args.case)
    return 0


def _run_stacks(args: argparse.Namespace) -> int:
    """`stacks`: the stack verdicts of a bundle or case."""
    expected, by_pid = _expected(args.expect), _groups(args.group)  # bad flags fail before work
    from forensics.render.text_report import print_stacks

    print_stacks(_case_for(args.path), args.profile, expected, args.all_rounds, by_pid)
    return 0


def _run_pull(args: argparse.Namespace) -> int:
    """`pull`: a Prometheus API's range queries into a bundle."""
    from forensics.capture.pull import pull
    files = pull(args.url, _utc(args.start), _utc(args.end), queries=args.query, metrics=args.metric,
                 step=args.step, bundle=args.bundle)
    for path in files:
        print(path)
    return 0


def _run_analyze(args: argparse.Namespace) -> int:
    """`analyze`: findings, tracks and key times, as text or JSON."""
    import json

    from forensics.analyze import analyze
    from forensics.render.text_report import report_text
    from forensics.profiles import load_profile
    case_dir = args.case or _default_case(args.bundle)
    print(f"case: {case_dir}", file=sys.stderr)
    result = analyze(args.bundle, case_dir, load_profile(args.profile) if args.profile else None,
                     display_zone=args.display_tz, on_progress=_progress)
    if args.brief:
        from forensics.render.postmortem import brief
        print(brief(result))
    else:
        print(json.dumps(result.summary(), indent=2) if args.json else report_text(result))
    return 0


def _run_reference(args: argparse.Namespace) -> int:
    """`reference`: the reference incident bundle."""
    from forensics.lab.reference import write_reference
    write_reference(args.out, scale=args.scale, hosts=args.hosts, time_zone=args.time_zone,
                    skew_s=args.skew_s, declare_skew=not args.undeclared_skew,
                    journal_formats=tuple(args.journal_format or ["export"]))
    print(f"wrote the reference incident to {args.out}")
    return 0


def _run_synth(args: argparse.Namespace) -> int:
    """`synth`: a generated journal export."""
    from forensics.lab.synth import write_export
    write_export(args.out, args.entries, hosts=args.hosts, seed=args.seed)
    print(f"wrote {args.entries:,} entries to {args.out}")
    return 0


_COMMANDS = {"report": _run_report, "batch": _run_batch, "ingest": _run_ingest, "watch": _run_watch,
             "collect": _run_collect, "summary": _run_summary, "stacks": _run_stacks, "pull": _run_pull,
             "analyze": _run_analyze, "reference": _run_reference, "synth": _run_synth}


if __name__ == "__main__":
    console()
