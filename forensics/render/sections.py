"""The report's sections, built from one analysis, for the notebooks to show.

`ReportSession.open(bundle, ...)` analyzes a bundle once; each method returns something a notebook
cell displays (escaped HTML, or a figure carrying both plotly's own mimetype for JupyterLab and a
div for nbconvert's HTML, whose page inlines plotly.js once). `write_outputs` writes
`summary.json`, `timeline.html` (redacted unless `redact="none"`) and `postmortem.md`, and
`record` leaves the summary in the notebook as `application/json` so tests and scripts read values,
not printed text.

Redaction modes: `none` (nothing redacted), `timeline` (the default: the shareable
`timeline.html` only) and `all` (the report, the post-mortem draft and `summary.json` too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import polars as pl

from forensics.timeline.host_read import gaps_in_sources
from forensics.analyze import Analysis, analyze, in_display_zone, no_incident_heading, profile_said
from forensics.case.opened import to_pandas
from forensics.case.targets import check_output_target
from forensics.detect import errors
from forensics.detect.stacks import latest
from forensics.errors import ForensicsError
from forensics.profiles import MetricPanel, load_profile
from forensics.render import figures, html, postmortem
from forensics.render.axis import own_time
from forensics.render.lanes import Mark, lane_expr
from forensics.render.swimlanes import timeline_figure
from forensics.render.redact import Redactor
from forensics.render.text import Redact, code_spans, safe, title_redact
from forensics.render import OUTPUTS
from forensics.render.cells import Figure, Html
from forensics.render.deep_dives import DeepDives
from forensics.render.outputs import Outputs

REDACT_MODES = ("none", "timeline", "all")
# The checkout this package runs from (notebooks/, data/, exports/ beside it), when it runs from one.
REPOSITORY = Path(__file__).resolve().parents[2]


def _one_line_errors() -> None:
    """In a notebook, a ForensicsError (a bundle not found, an unknown zone or profile) shows as its
    one sentence, not a traceback deep in the package: what to change is in the sentence."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    def handler(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None) -> None:
        shell.showtraceback((etype, value, tb), exception_only=True)

    shell.set_custom_exc((ForensicsError,), handler)


_one_line_errors()


def resolve_bundle(bundle: str | Path) -> Path:
    """A bundle path as given, or — when it is relative and not found from the working folder, as in
    a notebook opened by JupyterLab, whose kernel starts in notebooks/ — from the repository."""
    path = Path(bundle).expanduser()
    if path.exists() or path.is_absolute() or not (REPOSITORY / path).exists():
        return path
    return REPOSITORY / path


def default_out(bundle: Path) -> Path:
    """Where outputs go when no folder is given: exports/<bundle name> from the working folder, or
    the repository's exports/ when working inside its notebooks/ (nothing is left beside notebooks)."""
    here = Path.cwd().resolve()
    base = REPOSITORY if here == REPOSITORY / "notebooks" or REPOSITORY / "notebooks" in here.parents else here
    return base / "exports" / bundle.resolve().name


@dataclass
class ReportSession(DeepDives, Outputs):
    """One analyzed bundle and where its outputs go."""

    analysis: Analysis
    out_dir: Path
    redact_mode: str = "timeline"
    _report_redactor: Redactor | None = field(default=None, repr=False)
    panels: list[MetricPanel] = field(default_factory=list)  # added from notebook cells
    marks: list[Mark] = field(default_factory=list)
    timeline_statement: str | None = None  # what write_outputs redacted in timeline.html

    @classmethod
    def open(cls, bundle: str | Path, out_dir: str | Path = "", display_tz: str = "UTC", profile: str = "",
             redact: str = "timeline", case: str | Path = "") -> ReportSession:
        """Analyze `bundle` (its case under `out_dir/case`, or at `case`: a folder or an object-store
        URL); outputs go to `out_dir` (default exports/<bundle name>)."""
        if redact not in REDACT_MODES:
            raise ForensicsError(f"redact must be one of {', '.join(REDACT_MODES)}, not {redact!r}")
        bundle = resolve_bundle(bundle)
        if not bundle.exists():
            raise ForensicsError(f"bundle {str(bundle)!r} not found (from {Path.cwd()}, nor from {REPOSITORY}): "
                                 "set the `bundle` parameter to a folder or tarball of evidence")
        out = check_output_target(Path(out_dir) if out_dir else default_out(bundle), bundle, OUTPUTS)
        analysis = analyze(bundle, case or out / "case", load_profile(profile) if profile else None, display_tz)
        session = cls(analysis, out, redact)
        if redact == "all":
            session._report_redactor = session.redactor()
        return session

    @property
    def redact(self) -> Redact | None:
        """What the report and the post-mortem pass text through (None unless redact="all")."""
        return self._report_redactor

    # -- the report's sections --------------------------------------------------------------

    def header(self) -> Html:
        """Incident, window, display zone, bundle."""
        return Html(f"<h1>{safe(self.analysis.timeline.incident.title, title_redact(self.analysis.timeline.incident.title_written, self.redact))}"
                    f"</h1>{self.facts().body}")

    def facts(self) -> Html:
        """The bundle, its window in UTC, the display zone, the profile, and the incident's notes."""
        a, r = self.analysis, self.redact
        window = a.summary()["window"]
        return Html(f"<table><tr><th>bundle</th><td>{safe(a.bundle, r)}</td></tr>"
                    f"<tr><th>window (UTC)</th><td>{safe(window[0])} — {safe(window[1])}</td></tr>"
                    f"<tr><th>display time zone</th><td>{safe(a.display_zone)}</td></tr>"
                    f"<tr><th>profile</th><td>{safe(profile_said(a))}</td></tr></table>"
                    + "".join(f'<p class="note">{safe(n, r)}</p>' for n in a.timeline.incident.notes))

    def answer(self) -> Html:
        """The report's first screen: the title, the incident's day in the display zone (and in
        UTC when that is another day), what happened in one sentence, and the key times with
        TTD / TTM / TTR."""
        a, r = self.analysis, self.redact
        with in_display_zone(a):
            # a day only from the evidence's own times, never from a copied file's modification time
            day = postmortem.incident_day(a) if own_time(a) else "date unknown (nothing carries a time of its own)"
            sentence = code_spans(postmortem.verdict_sentence(a, lambda text: safe(text, r)))
            # "no incident found … Checked:" is followed by what was checked, on the first screen too
            checked = ("" if a.incident_found else
                       "<ul>" + "".join(f"<li>{safe(line, r)}</li>" for line in a.checked()) + "</ul>")
            return Html(f"<h1>{safe(a.timeline.incident.title, title_redact(a.timeline.incident.title_written, r))}</h1>"
                        f'<p class="note">{safe(day) + " · " if day else ""}times in {safe(a.display_zone)} · '
                        f"{safe(a.bundle.name, r)} · {safe(profile_said(a))}</p>"
                        f'<p class="verdict">{sentence}</p>{checked}{html.first_screen_notes(a, r)}'
                        f"{html.key_times_block(a, r)}")

    def sources(self) -> Html:
        """Records, parsed, quarantined and time span per input."""
        def second(at: str | None) -> str | None:  # ISO text: its width goes to paths and notes, not to "T…+00:00"
            return at[:19].replace("T", " ") if at else at

        rows = [{**{k: e.get(k) for k in ("path", "format", "records", "parsed", "quarantined")},
                 "first (UTC)": second(e.get("first_ts")), "last (UTC)": second(e.get("last_ts")),
                 "error": e.get("error"), "notes": "; ".join(e.get("notes", [])) or None}
                for e in self.analysis.timeline.manifest["inputs"]]
        rows += [{"path": s["path"], "format": "skipped", "notes": s["reason"]}
                 for s in self.analysis.timeline.manifest["skipped"]]
        return Html(html.table(rows, self.redact, numeric=("records", "parsed", "quarantined")))

    def findings(self) -> Html:
        """The symptom tracks and their findings in plain sentences, and what links them."""
        with in_display_zone(self.analysis):
            return self._findings()

    def _findings(self) -> Html:
        r = self.redact
        parts = [html.findings_block(self.analysis, r)]
        if self.analysis.links:
            parts.append("<h3>between tracks</h3>" + "".join(f"<p>{safe(t, r)}</p>" for t in self.analysis.links))
        earlier = self.summary().get("seen_before")
        if earlier:
            parts.insert(0, f'<p class="verdict">Seen before: {earlier["count"]} time{"s" if earlier["count"] > 1 else ""} '
                         f'with the same signature, last on {safe(earlier["last"][:10])} '
                         f'({safe(earlier["incidents"][-1]["incident"], r)}).</p>')
        if not self.analysis.incident_found:
            parts.insert(0, f'<p class="verdict">{safe(no_incident_heading(self.analysis))}</p><ul>'
                         + "".join(f"<li>{safe(line, r)}</li>" for line in self.analysis.checked()) + "</ul>")
        return Html("".join(parts))

    def key_times(self) -> Html:
        """Started, detected, mitigated, resolved with TTD / TTM / TTR and any contradiction."""
        return Html(html.key_times_block(self.analysis, self.redact))

    def overview(self) -> Figure | Html:
        """Each component's progress and freeze as a bar under the key times (the first screen's
        picture); a sentence when no component logs progress."""
        if not own_time(self.analysis):  # the header says the date is unknown; the timeline says why
            return Html("")
        with in_display_zone(self.analysis):
            fig = figures.overview_figure(self.analysis, self.redact)
        if not fig.data:
            # said from what the timeline draws: its progress strip, lane by lane
            drawn = self.analysis.timeline.progress_counts.with_columns(lane_expr())
            lines, lanes = drawn.get_column("lines").sum(), drawn.get_column("lane").n_unique()
            if lines:  # progress is logged, by logs the profile names no role for (a plain server.log)
                return Html(f'<p class="note">{lines:,} progress line{"s are" if lines > 1 else " is"} logged, by no '
                            "component the profile names (no bar per component): the timeline below draws "
                            f"{'them' if lines > 1 else 'it'} in the lane{'s' if lanes > 1 else ''} "
                            f"{safe(', '.join(sorted(drawn.get_column('lane').unique())), self.redact)}.</p>")
            return Html('<p class="note">No progress lines in the evidence: '
                        "the timeline below shows what there is.</p>")
        return Figure(fig, "overview")

    def timeline(self) -> Figure:
        """Swimlanes and metric panels on one time axis, with the panels and marks added from
        notebook cells (`add_panel`, `mark`)."""
        return Figure(timeline_figure(self.analysis, self.redact, extra_panels=self.panels,
                                              marks=self.marks), "timeline")

    def add_panel(self, title: str, gauges: Sequence[str] = (), rates: Sequence[str] = ()) -> Figure:
        """A metric panel of one's own under the timeline (gauges as they are, counters as
        per-second rates, names compared with `:` read as `_`); returns the timeline redrawn.
        `timeline.html` written afterwards (`write_outputs`) carries it too."""
        if not gauges and not rates:
            raise ForensicsError(f"panel {title!r} names no gauges and no rates")
        present = (self.analysis.timeline.samples.select(pl.col("name").cast(pl.String)).unique().collect()
                   .get_column("name").to_list())
        for name in (*gauges, *rates):
            if name not in present and name.replace(":", "_") not in present:
                _warn_unknown(f"add_panel {title!r}: no metric named {name!r} in this case", name, present)
        self.panels.append(MetricPanel(title, tuple(gauges), tuple(rates)))
        return self.timeline()

    def mark(self, label: str, where: pl.Expr) -> Figure:
        """A lane of markers for the events a polars expression picks (e.g.
        `pl.col("message").str.contains("OOM")`; on a big case's lean timeline it searches every
        record's text in the case: `forensics.render.lanes.marked_rows`); returns the timeline redrawn."""
        columns = self.analysis.timeline.events.columns
        for name in where.meta.root_names():
            if name not in columns:  # the lane could not be drawn: stop here, with the names there are
                raise ForensicsError(f"mark {label!r}: the events have no column {name!r}"
                                     + _closest(name, columns))
        self.marks.append(Mark(label, where))
        return self.timeline()

    def frames(self, backend: str = "polars") -> dict[str, Any]:
        """The analysis' frames to dig in: the timeline's `events` (the case's, with the profile's
        reading of each line; a big case's lean timeline holds only the lines worth a finding, and
        its case all of them), `samples`, `stacks`, `quarantine`, and `findings`; as pandas with
        `backend="pandas"`."""
        t = self.analysis.timeline
        frames: dict[str, Any] = {"events": t.events, "samples": t.samples.collect(), "stacks": t.stacks,
                                  "quarantine": t.quarantine, "findings": self.analysis.findings_frame()}
        # categorical columns (hosts, units, metric names) as plain strings: `.str` works on every
        # text column a notebook filters, and the frames equal what a user would build by hand
        frames = {name: frame.with_columns(pl.col(pl.Categorical).cast(pl.String)) for name, frame in frames.items()}
        if backend == "pandas":
            return {name: to_pandas(frame) for name, frame in frames.items()}
        if backend != "polars":
            raise ForensicsError(f"backend must be polars or pandas, not {backend!r}")
        return frames

    def stacks(self) -> list[Any]:
        """Phase per rank (every round) and the merged-stack icicle of each group's last round; then
        one table per process group of what the Flight Recorder, the watchdog and the stacks say."""
        verdicts = self.analysis.verdicts
        if not verdicts:
            return [Html("<p>No py-spy stacks in this bundle.</p>"), *self._collectives()]
        rows = [{"group": v.group, "round": v.round + 1, "at": v.at, "verdict": v.verdict, "collective": v.collective,
                 "ranks by phase": "; ".join(f"{p}: {', '.join(map(str, ranks))}"
                                             for p, ranks in v.ranks_by_phase.items()),
                 "missing": ", ".join(f"{m.label} ({m.reason})" for m in v.missing) or "—"} for v in verdicts]
        out: list[Any] = [Html(html.table(rows, self.redact)),
                          Figure(figures.stack_phase_figure(verdicts, self.redact), "phases")]
        for v in latest(verdicts):
            out += [Html(f"<p>{safe(v.explanation, self.redact)}</p>"),
                    Figure(figures.icicle_figure(v, self.redact), f"icicle-{v.group}")]
        return out + self._collectives()

    def _collectives(self) -> list[Any]:
        """Per process group, a row per rank: its last collective (seq, op, state, sizes), its group's
        last enqueued and completed work, what the watchdog named, its py-spy phase."""
        table = self.analysis.collectives()
        out: list[Any] = []
        for (job, pg), rows in table.group_by("job", "pg", maintain_order=True):
            title = f"{str(job).split('/')[0] + ': ' if job else ''}process group {pg}"
            out.append(Html(f"<h3>collectives: {safe(title, self.redact)}</h3>"
                            + html.table(rows.drop("job", "pg"), self.redact,
                                         numeric=("rank", "seq", "last_enqueued", "last_completed", "watchdog_seq"))))
        return out

    def errors(self) -> list[Any]:
        """Notable lines per minute, templates new in the incident window, folded tracebacks."""
        a = self.analysis
        start = a.key_times.started or (a.timeline.incident.window[0] if a.timeline.incident.window else None)
        out: list[Any] = [Figure(figures.errors_figure(a, self.redact), "errors")]
        if start is not None:
            table = (errors.templates(a.timeline, start).filter(pl.col("new_in_window"))
                     .select("component", "template", "count", "first", "last", "peak_per_minute"))
            out.append(Html("<h3>templates new in the incident window</h3>"
                            + html.table(table, self.redact, numeric=("count", "peak_per_minute"))))
        tracebacks = errors.fold_tracebacks(a.timeline.events).select("ts", "component", "pid", "lines", "message")
        out.append(Html("<h3>tracebacks</h3>" + ("".join(self._traceback(row) for row in tracebacks.iter_rows(named=True))
                                                   if tracebacks.height else "<p>none</p>")))
        return out

    def _traceback(self, row: dict[str, Any]) -> str:
        """A folded traceback: who and when, and its last line (the exception) in the summary; a
        long one's every line a click away."""
        head = f'{safe(row["ts"])} {safe(row["component"], self.redact)} pid {safe(row["pid"])} ({row["lines"]} lines)'
        body = f'<pre class="log">{safe(row["message"], self.redact)}</pre>'
        if row["lines"] <= html.FOLD_ROWS:
            return f"<p>{head}</p>{body}"
        last = next((line for line in reversed(row["message"].splitlines()) if line.strip()), "")
        return f"<details><summary>{head}: <code>{safe(last.strip(), self.redact)}</code></summary>{body}</details>"

    def data_quality(self) -> Html:
        """Quarantined records, clock offsets applied, wall-clock jumps, and gaps in each source."""
        a, r = self.analysis, self.redact
        q = a.timeline.quarantine
        parts = [f"<h3>quarantine ({q.height} records)</h3>"]
        if q.height:
            parts.append(html.table(q.group_by("source_file", "reason").agg(pl.len().alias("records"),
                                                                            pl.col("line").min().alias("first line"),
                                                                            pl.col("excerpt").first())
                                    .sort("records", descending=True).head(50), r, numeric=("records",)))
        parts.append("<h3>clocks</h3>" + html.table(a.timeline.clock_checks, r))
        if a.timeline.jumps.height:
            parts.append("<h3>wall-clock steps</h3>" + html.table(a.timeline.jumps, r))
        if a.timeline.out_of_range is not None:
            parts.append("<h3>records far outside the incident (left out of the analysis)</h3>"
                         + html.table(a.timeline.out_of_range, r, numeric=("records",)))
        gaps = source_gaps(a)
        parts.append("<h3>gaps in each source</h3>" + (html.table(gaps, r, numeric=("gap_s", "median_interval_s"))
                                                        if gaps.height else "<p>none</p>"))
        return Html("".join(parts))

    def postmortem(self) -> Html:
        """The post-mortem draft (also written to postmortem.md), rendered: headings, tables and
        lists as HTML. The draft quotes evidence inertly, and any raw HTML left in it is escaped."""
        import mistune

        text = postmortem.draft(self.analysis, self.redact)
        return Html(f'<div id="postmortem">{mistune.create_markdown(escape=True, plugins=["table"])(text)}</div>')

def _warn_unknown(what: str, name: str, known: Sequence[str]) -> None:
    """A name the case does not have, said with the closest names it does (a typo shows at once
    instead of as an empty panel or lane)."""
    import warnings

    warnings.warn(what + _closest(name, known), UserWarning, stacklevel=3)


def _closest(name: str, known: Sequence[str]) -> str:
    import difflib

    closest = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    return f"; closest: {', '.join(closest)}" if closest else f"; {len(known)} names known"


def source_gaps(analysis: Analysis) -> pl.DataFrame:
    """Pauses in each source longer than GAP_FACTOR × its median interval and GAP_MIN_S: journal
    files by unit (and host, when there are several: found per host by the timeline), scrapes by
    instance."""
    samples = (analysis.timeline.samples.select("ts", pl.format("{} (scrapes)", pl.col("instance").cast(pl.String))
                                                .alias("source")).unique().collect())
    return pl.concat([analysis.timeline.source_gaps, gaps_in_sources(samples)]).sort("from", "source")