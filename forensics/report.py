"""Rendering reports: papermill runs the notebooks, nbconvert turns them into HTML, batch renders many.

`render(bundle, out)` executes `notebooks/incident_report.ipynb` with papermill (progress shown),
which writes `summary.json`, `timeline.html` and `postmortem.md` itself (so running the notebook
directly with papermill gives the same files), then converts the executed notebook into
`report.html` with code hidden and plotly.js inlined once (template
`render/templates/forensics_report`: nothing is fetched from a CDN). `batch(bundles)` renders
many bundles in worker processes, goes on past a failing bundle, records its error, and writes
`index.html` and `index.json`.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import tempfile
import traceback
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.case.targets import OUTPUT_MARKER, case_lock, check_output_target
from forensics.errors import ForensicsError
from forensics.render import DEEP_DIVES, FAILED_NOTEBOOK, MAIN_NOTEBOOK, OUTPUTS  # noqa: F401 - also read here

NOTEBOOKS = Path(os.environ.get("FORENSICS_NOTEBOOKS", Path(__file__).resolve().parents[1] / "notebooks"))
TEMPLATES = Path(__file__).resolve().parent / "render" / "templates"
BUNDLE_MARKERS = ("incident.toml", "journal", "metrics", "stacks", "logs", "kubernetes")
# files a folder of bundles may hold beside its bundles (a folder holding any other file is a bundle)
NOT_EVIDENCE = {"README.md", "README", ".gitkeep", "index.html", "index.json", ".DS_Store"}
RECORD_TAG = "record"
NOTEBOOK_ONLY_TAG = "notebook-only"
KERNEL_LOG = "kernel.log"


class ReportError(ForensicsError):
    """A report could not be rendered (the notebook failed, or a bundle is not one)."""


@dataclass
class Rendered:
    """What one report wrote."""

    bundle: Path
    out: Path
    files: dict[str, Path]
    summary: dict[str, Any]


WINDOW_UNKNOWN = "time unknown (nothing in it carries a time of its own)"  # never a file's copy time


def notebook_path(name: str = MAIN_NOTEBOOK) -> Path:
    """One of the suite's notebooks (`FORENSICS_NOTEBOOKS` overrides the folder)."""
    path = NOTEBOOKS / name
    if not path.is_file():
        raise ReportError(f"notebook {path} not found (set FORENSICS_NOTEBOOKS to the folder holding {name})")
    return path


def _ipc_kernel_manager(folder: str) -> type:
    """A kernel manager whose kernel talks over socket files in `folder` rather than TCP ports:
    no port open to other users of the machine (and no warning from ipykernel about it). The
    kernel's own output goes to `folder`/kernel.log, not to the terminal: an interrupt or a failure
    then ends in forensics' one line (a failure quotes the log's end)."""
    from jupyter_client.manager import AsyncKernelManager

    class IpcKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.transport = "ipc"
            self.ip = os.path.join(folder, "kernel")

        async def _async_pre_start_kernel(self, **kw: Any) -> Any:
            self._log = open(os.path.join(folder, KERNEL_LOG), "ab")  # noqa: SIM115 - closed once the kernel has it
            kw.setdefault("stdout", self._log)
            kw.setdefault("stderr", self._log)
            return await super()._async_pre_start_kernel(**kw)

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            try:
                await super()._async_launch_kernel(kernel_cmd, **kw)
            finally:  # the kernel process holds its own copy of the log; this one would leak
                self._log.close()

    return IpcKernelManager


def _log_tail(folder: str, lines: int = 8) -> str:
    path = Path(folder) / KERNEL_LOG
    text = path.read_text(errors="replace").strip() if path.is_file() else ""
    return "\n".join(text.splitlines()[-lines:])


def execute(notebook: Path, output: Path, parameters: dict[str, Any], progress: bool = True) -> Path:
    """Run one notebook with papermill; a failing cell raises ReportError naming the cell's error."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="forensics-kernel-") as sockets:
        try:
            papermill.execute_notebook(str(notebook), str(output), parameters=parameters, progress_bar=progress,
                                       kernel_name="python3", cwd=str(Path.cwd()),
                                       kernel_manager_class=_ipc_kernel_manager(sockets))
        except PapermillExecutionError as error:
            raise ReportError(f"{notebook.name} failed in cell {error.exec_count}: {error.ename}: {error.evalue} "
                              f"(executed copy with the traceback: {output})") from None
        except RuntimeError as error:  # the kernel died or would not start: its own words say why
            tail = _log_tail(sockets)
            raise ReportError(f"{notebook.name}: the kernel failed: {error}" + (f"\n{tail}" if tail else "")) from None
    return output


def to_html(executed: Path, output: Path) -> Path:
    """The executed notebook as one HTML page: outputs only, plotly.js inlined once, no CDN."""
    import nbformat
    from nbconvert import HTMLExporter
    from plotly.offline import get_plotlyjs

    from traitlets.config import Config

    config = Config()
    # the cell tagged "record" leaves the summary for scripts and tests; people read it in summary.json
    config.TagRemovePreprocessor.remove_all_outputs_tags = {RECORD_TAG}
    # how to run the notebook is for people who open it, not for readers of the report
    config.TagRemovePreprocessor.remove_cell_tags = {NOTEBOOK_ONLY_TAG}
    config.TagRemovePreprocessor.enabled = True
    exporter = HTMLExporter(config=config, template_name="forensics_report",
                            extra_template_basedirs=[str(TEMPLATES)],
                            exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    notebook = nbformat.read(executed, as_version=4)
    body, _ = exporter.from_notebook_node(notebook, resources={"plotly_js": get_plotlyjs()})
    output.write_text(body, encoding="utf-8")
    return output


def render(bundle: str | Path, out: str | Path | None = None, display_tz: str = "UTC", profile: str = "",
           redact: str = "timeline", progress: bool = True, screens: bool = False,
           case: str | Path | None = None) -> Rendered:
    """Render the incident report of `bundle` into `out` (default exports/<bundle name>); with
    `screens`, PNG pictures of its first screen and timeline too (`screens/`, headless Chromium).
    The case goes in `out/case`, or at `case` (a folder, or an object-store URL such as
    `s3://bucket/cases/x`).

    The outputs are made in a folder beside `out` and swapped in as a set when every one is
    written, under a lock on `out`: an interrupted, failed or out-of-space run leaves the previous
    outputs as they were (and its own half-made folder is removed, now or by the next run)."""
    bundle = Path(bundle).resolve()
    if not bundle.is_dir():
        raise ReportError(f"{bundle}: not a folder (a bundle is a folder of journal / metrics / stacks inputs)")
    out_dir = check_output_target(Path(out) if out else Path("exports") / bundle.name, bundle, OUTPUTS)
    with case_lock(out_dir):
        for leftover in out_dir.parent.glob(f".{out_dir.name}.partial-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
        try:
            files = _render_into(bundle, staging, display_tz, profile, redact, progress, case)
            if screens:
                from forensics.render.screens import SCREENS_DIR, take
                take(files["report.html"], staging / SCREENS_DIR)
                files["screens"] = staging / SCREENS_DIR
            summary = json.loads(files["summary.json"].read_text())
            # no interrupt between the two renames of the swap: the set is whole before or after
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                _swap_in(staging, out_dir)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        except ReportError as error:
            executed = staging / MAIN_NOTEBOOK
            kept = out_dir / FAILED_NOTEBOOK
            if executed.is_file():  # the traceback stays where the message says, beside the previous outputs
                shutil.copyfile(executed, kept)
            shutil.rmtree(staging, ignore_errors=True)
            raise ReportError(str(error).replace(str(executed), str(kept))) from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return Rendered(bundle, out_dir, {name: out_dir / path.name for name, path in files.items()}, summary)


def _render_into(bundle: Path, folder: Path, display_tz: str, profile: str, redact: str,
                 progress: bool, case: str | Path | None = None) -> dict[str, Path]:
    """Run the report notebook into `folder` and convert it; the files written, by name."""
    (folder / OUTPUT_MARKER).write_text("forensics report outputs: `forensics report` rewrites the files it made\n")
    executed = execute(notebook_path(), folder / MAIN_NOTEBOOK,
                       {"bundle": str(bundle), "out_dir": str(folder), "display_tz": display_tz,
                        "profile": profile, "redact": redact, "case": str(case or "")}, progress)
    files = {"notebook": executed, "report.html": to_html(executed, folder / "report.html")}
    for name in ("timeline.html", "postmortem.md", "summary.json"):
        path = folder / name
        if not path.is_file():
            raise ReportError(f"{executed} ran but wrote no {name}")
        files[name] = path
    return files


def _swap_in(staging: Path, out_dir: Path) -> None:
    """Replace `out_dir` by `staging` whole: a reader sees the old set or the new one. Files a
    person put in `out_dir` beside the outputs are carried over."""
    for path in out_dir.iterdir():
        if not (staging / path.name).exists() and path.name not in (*OUTPUTS, "case", OUTPUT_MARKER):
            path.rename(staging / path.name)
    retired = out_dir.with_name(f".{out_dir.name}.partial-old-{os.getpid()}")
    out_dir.rename(retired)
    try:
        staging.rename(out_dir)
    except BaseException:
        retired.rename(out_dir)  # put the previous outputs back
        raise
    shutil.rmtree(retired, ignore_errors=True)


def find_bundles(patterns: Iterable[str]) -> list[Path]:
    """Bundles named by folders or globs: a folder that looks like a bundle (incident.toml, a
    journal/metrics/stacks/logs/kubernetes folder, or evidence files in it) is one; any other
    folder holds bundles one level down."""
    found: list[Path] = []
    for pattern in patterns:
        matches = sorted(Path(p) for p in glob.glob(pattern)) or [Path(pattern)]
        for path in matches:
            if not path.is_dir():
                raise ReportError(f"{path}: no such folder")
            if _is_bundle(path):
                found.append(path)
            else:
                inner = [p for p in sorted(path.iterdir()) if p.is_dir() and _is_bundle(p)]
                if not inner:
                    raise ReportError(f"{path}: neither a bundle nor a folder of bundles "
                                      f"(a bundle holds one of {', '.join(BUNDLE_MARKERS)})")
                found += inner
    unique: dict[Path, None] = {}
    for path in found:
        unique.setdefault(path.resolve(), None)
    return list(unique)


def _is_bundle(path: Path) -> bool:
    """A folder `analyze` would take: one of the bundle layout's folders or incident.toml, or any
    file of evidence lying in it directly (a folder of logs as copied off a box)."""
    return any((path / marker).exists() for marker in BUNDLE_MARKERS) or any(
        p.is_file() and p.name not in NOT_EVIDENCE for p in path.iterdir())


def _out_names(bundles: Sequence[Path]) -> list[str]:
    """A folder name per bundle, unique even when two bundles share a name."""
    names: list[str] = []
    for bundle in bundles:
        name, n = bundle.name, 2
        while name in names:
            name, n = f"{bundle.name}-{n}", n + 1
        names.append(name)
    return names


def _render_one(bundle: Path, out: Path, display_tz: str, profile: str, redact: str,
                case: str | None = None) -> dict[str, Any]:
    """One batch job (in a worker process): the index row, with the error instead when it failed."""
    # relative to where batch ran: the index may be shared, the machine's folder layout need not be
    row: dict[str, Any] = {"bundle": os.path.relpath(bundle), "out": out.name}
    try:
        rendered = render(bundle, out, display_tz, profile, redact, progress=False, case=case)
    except Exception as error:  # noqa: BLE001 - a batch goes on past any failing bundle and records why
        row["error"] = str(error) if isinstance(error, ForensicsError) else (
            f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=3)}")
        if (out / MAIN_NOTEBOOK).is_file():
            row["links"] = [("executed notebook", f"{out.name}/{MAIN_NOTEBOOK}")]
        return row
    s = rendered.summary
    key = s.get("key_times", {})
    window = " — ".join(_as_read(w) for w in s.get("window") or [] if w) or WINDOW_UNKNOWN
    row.update(title=_title(bundle, s), window=window,
               started=(s.get("window") or [None])[0], signature=s.get("signature"),
               what_happened=s.get("what_happened"), verdicts=_verdicts(s),
               ttd=_seconds(key.get("ttd_s")), ttm=_seconds(key.get("ttm_s")), ttr=_seconds(key.get("ttr_s")),
               links=[(name, f"{out.name}/{name}") for name in ("report.html", "timeline.html", "postmortem.md",
                                                                "summary.json")])
    return row


def _title(bundle: Path, summary: dict[str, Any]) -> object:
    """The incident's title for the index: the user's own words from incident.toml as written (a
    redacted summary may have taken a host name in them for evidence), else the summary's."""
    from forensics.case.incident import load_incident

    try:
        incident = load_incident(bundle)
    except ForensicsError:  # the report was rendered, so its summary has a title
        return summary.get("incident")
    return incident.title if incident.title_written else summary.get("incident")


def _as_read(iso: object) -> str:
    """An ISO time as people read it in an index: to the second, with its zone ("2026-06-18 21:34:47 UTC")."""
    from datetime import datetime

    try:
        at = datetime.fromisoformat(str(iso))
    except ValueError:
        return str(iso)
    zone = "UTC" if at.utcoffset() is not None and not at.utcoffset() else at.strftime("%z")
    return f"{at:%Y-%m-%d %H:%M:%S} {zone}".rstrip()


def _verdicts(summary: dict[str, Any]) -> str:
    """The bundle's verdict, as its report gives it: the stack verdict (the hang verdicts when any
    group hung, else every group's), each verdict once with the groups it holds for ("decode DP0,
    decode DP1: UNIFORM_WAIT"), then the Flight Recorder's per process group and the collective
    timeouts with the ranks that never entered."""
    from forensics.detect.stack_verdict import HANG_VERDICTS, VERDICTS
    from forensics.detect.watchdog import who

    stacks = summary.get("stack_verdicts", [])
    hung = [v for v in stacks if v.get("verdict") in HANG_VERDICTS]
    groups: dict[str, list[str]] = {}
    for v in sorted(hung or stacks, key=lambda v: (VERDICTS.index(v["verdict"]) if v.get("verdict") in VERDICTS
                                                   else len(VERDICTS), str(v.get("group")))):
        groups.setdefault(str(v.get("verdict")), []).append(str(v.get("group")))
    said = [f"{', '.join(names)}: {verdict}" for verdict, names in groups.items()]
    for f in summary.get("findings", []):
        facts = f.get("facts") or {}
        if f.get("kind") == "collective_verdict" and facts.get("verdict"):
            said.append(f"{facts.get('group') or 'process group'}: {facts['verdict']}")
        elif f.get("kind") == "collective_timeout":
            seq = "/".join(str(q) for q in facts.get("seq", []))
            culprits = facts.get("culprits")
            # named as the finding names them: a million culprits are a range, not a million numbers
            said.append(f"collective timeout{f' at seq {seq}' if seq else ''}"
                        + (f": {who([str(c) for c in culprits])} never entered it" if culprits else ""))
    return "; ".join(dict.fromkeys(said))


def _seconds(value: float | None) -> str | None:
    from forensics.detect import span
    return span(value) if value is not None else None


def batch(patterns: Iterable[str], out: str | Path = "exports", workers: int = 2, display_tz: str = "UTC",
          profile: str = "", redact: str = "timeline", progress: bool = True,
          cases: str | None = None) -> list[dict[str, Any]]:
    """Render every bundle matched by `patterns` with `workers` processes; write out/index.html
    and out/index.json; return the index rows (failed bundles carry `error`). Each bundle's case
    goes in its output folder, or under `cases` (a folder or an object-store URL) by the same name."""
    from tqdm import tqdm

    from forensics.render.html import index_page

    bundles = find_bundles(patterns)
    if not bundles:
        raise ReportError("no bundles to render")
    out_root = Path(out)
    out_root.mkdir(parents=True, exist_ok=True)
    names = _out_names(bundles)
    rows: dict[int, dict[str, Any]] = {}
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(_render_one, b, (out_root / n).resolve(), display_tz, profile, redact,
                               f"{cases.rstrip('/')}/{n}" if cases else None): i
                   for i, (b, n) in enumerate(zip(bundles, names, strict=True))}
        with tqdm(total=len(futures), desc="reports", unit="bundle", disable=not progress) as bar:
            for future in as_completed(futures):
                i = futures[future]
                try:
                    rows[i] = future.result()
                except Exception as error:  # noqa: BLE001 - a worker that died still gets its row
                    rows[i] = {"bundle": os.path.relpath(bundles[i]), "out": names[i],
                               "error": f"worker died: {error!r}"}
                bar.update(1)
                if rows[i].get("error"):
                    bar.write(f"failed: {bundles[i]}: {rows[i]['error'].splitlines()[0]}")
    ordered = [rows[i] for i in range(len(bundles))]
    groups = recurring(ordered)
    (out_root / "index.json").write_text(json.dumps({"incidents": ordered, "signatures": groups}, indent=2,
                                                    default=str) + "\n")
    (out_root / "index.html").write_text(index_page(ordered, groups))
    return ordered


def recurring(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The incidents grouped by signature, most frequent first: what the signature says, how many,
    first and last seen, the mean time between them, and the reports; each row learns how many
    times its problem was seen before it (`seen_before`)."""
    from datetime import datetime

    by_id: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("signature"):
            by_id.setdefault(row["signature"]["id"], []).append(row)
    groups = []
    for signature, members in by_id.items():
        members.sort(key=lambda r: r.get("started") or "")
        for n, row in enumerate(members):
            row["seen_before"] = n
        times = [datetime.fromisoformat(r["started"]) for r in members if r.get("started")]
        gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)]
        first, last = members[0].get("started"), members[-1].get("started")
        # times as people read them in the index; the ISO times stay beside them for scripts
        groups.append({"id": signature, "parts": members[0]["signature"]["parts"], "count": len(members),
                       "first": _as_read(first) if first else None, "last": _as_read(last) if last else None,
                       "first_at": first, "last_at": last,
                       "mean_between_s": sum(gaps) / len(gaps) if gaps else None,
                       "reports": [f"{r['out']}/report.html" for r in members]})
    return sorted(groups, key=lambda g: (-g["count"], g["first_at"] or ""))
