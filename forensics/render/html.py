"""HTML pages: the shareable `timeline.html`, the batch `index.html`, and escaped tables.

Every page is self-contained (plotly.js inlined, no other script, no font or CDN request), so it
opens from a mail attachment or a chat upload with no network. Every string from the evidence is
escaped (`forensics.render.text`); `timeline.html` is redacted unless told otherwise and says
what it redacted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
from plotly.offline import get_plotlyjs

from forensics.analyze import Analysis, in_display_zone, is_anomaly
from forensics.detect import Finding, clock, span
from forensics.render.metric_panels import idle_gpus_sentence
from forensics.render.text import Redact, code_spans, safe, title_redact

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.4em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #555; font-size: 0.9em; } .bad { color: #b00; } .verdict { font-weight: 600; }
pre.log { white-space: pre-wrap; font-size: 0.85em; background: #f8f8f8; padding: 0.5em; }
"""
NOT_REDACTED = "Not redacted: this page shows host names, addresses and log text as recorded."


def plotly_js_tag() -> str:
    """plotly.js, inlined once per page."""
    return f'<script type="text/javascript">{get_plotlyjs()}</script>'


def element_id(*parts: object) -> str:
    """An HTML id made from `parts`: ASCII letters, digits, `-` and `_` only, so no value from the
    evidence (a stack group, a unit) can leave the attribute or the script plotly writes it into."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", "-".join(str(p) for p in parts)).strip("-") or "figure"


def figure_div(fig: go.Figure, div_id: str) -> str:
    """A figure as a div and the script that draws it (plotly.js must already be on the page).
    plotly's JSON writer escapes `<`, `>` and `/`, so no string in the figure can end the script;
    plotly writes the id into the div and the script as it is, so it is made safe here."""
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=element_id(div_id),
                       config={"displaylogo": False, "responsive": True})


def no_time_note(fig: go.Figure) -> str:
    """Why a figure draws no time axis (`swimlanes._without_time` leaves it in the layout), as a
    note above it; "" for a figure on a time axis."""
    meta = fig.layout.meta
    why = meta.get("no_time_axis") if isinstance(meta, dict) else None
    return f'<p class="note no-time-axis">{safe(why)}</p>' if why else ""


FOLD_ROWS = 12  # a longer table shows its first rows, the whole of it a click away
WRAP_CHARS = 32  # a cell longer than this wraps within WRAP_WIDTH instead of widening its table
WRAP_WIDTH = "28em"
# the table scrolls inside the output area rather than widening the page; cells wrap anywhere
TABLE_BOX = "max-width:100%;overflow-x:auto"
LEFT = "text-align:left"  # words read from the left; JupyterLab's own style aligns every cell right
WRAPPED_CELL = f"max-width:{WRAP_WIDTH};min-width:10em;overflow-wrap:anywhere;white-space:normal;{LEFT}"


def table(frame: pl.DataFrame | Sequence[dict[str, Any]], redact: Redact | None = None,
          columns: Sequence[str] | None = None, numeric: Iterable[str] = (), fold: int | None = FOLD_ROWS) -> str:
    """Rows as an HTML table, every cell escaped (and redacted when asked), in the width of the
    page: long cells wrap, and a wide table scrolls in its own box. More than `fold` rows show
    the first `fold`, with every row in a `<details>` one click away (`fold=None`: all at once).

    Styles are inline because a notebook's output carries no stylesheet of ours."""
    rows = frame.to_dicts() if isinstance(frame, pl.DataFrame) else list(frame)
    names = list(columns or (rows[0].keys() if rows else []))
    numbers = set(numeric)
    head = "".join(f'<th style="{LEFT}">{safe(n)}</th>' for n in names)

    def cell(name: str, value: Any) -> str:
        text = _cell(value)
        if name in numbers:
            return f'<td class="num" style="text-align:right">{safe(text)}</td>'
        return f'<td style="{WRAPPED_CELL if len(text) > WRAP_CHARS else LEFT}">{safe(text, redact)}</td>'

    body = ["<tr>" + "".join(cell(n, row.get(n)) for n in names) + "</tr>" for row in rows]

    def box(lines: list[str]) -> str:
        return (f'<div style="{TABLE_BOX}"><table><thead><tr>{head}</tr></thead>'
                f"<tbody>{''.join(lines)}</tbody></table></div>")

    if fold is None or len(body) <= fold:
        return box(body)
    return (f"{box(body[:fold])}<details><summary>all {len(body):,} rows ({len(body) - fold:,} more)</summary>"
            f"{box(body)}</details>")


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def key_times_rows(analysis: Analysis) -> list[dict[str, str]]:
    """The key times as table rows: name, time in the display zone, time since started, how found."""
    with in_display_zone(analysis):
        return _key_times_rows(analysis)


def _key_times_rows(analysis: Analysis) -> list[dict[str, str]]:
    t = analysis.key_times
    rows = []
    for name in ("started", "detected", "mitigated", "resolved"):
        at = getattr(t, name)
        seconds = t.seconds(name)
        local = f"{at.astimezone(ZoneInfo(analysis.display_zone)):%Y-%m-%d %H:%M:%S}" if at else None
        # with a zone other than UTC the date goes with the time: 05:34:47 there may be the next day
        row = {"key time": name, f"time ({analysis.display_zone})": (
            (local if analysis.display_zone != "UTC" else clock(at)) if at else "not in the evidence")}
        if analysis.display_zone != "UTC":
            row["UTC"] = f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S}" if at else "—"
        row.update({"since started": span(seconds) if seconds is not None and name != "started" else "",
                    "how it was found": t.how.get(name, "")})
        rows.append(row)
    return rows


def key_times_block(analysis: Analysis, redact: Redact | None) -> str:
    """The key-times table, TTD / TTM / TTR, and any contradiction between the key times."""
    t = analysis.key_times
    measures = " · ".join(f"{label} {span(s) if (s := t.seconds(name)) is not None else '—'}"
                          for label, name in (("TTD", "detected"), ("TTM", "mitigated"), ("TTR", "resolved")))
    contradictions = "".join(f'<p class="bad">contradiction: {safe(c, redact)}</p>' for c in t.contradictions)
    return f"{table(key_times_rows(analysis), redact)}\n<p><b>{safe(measures)}</b></p>{contradictions}"


def first_screen_notes(analysis: Analysis, redact: Redact | None) -> str:
    """What the first screen says beside its one answer: GPUs DCGM saw idle (an idle GPU beside a
    hang is evidence), and non-fatal device errors, said apart as no fault (never the incident)."""
    out = []
    if idle := idle_gpus_sentence(analysis, lambda said: safe(said, redact)):
        out.append(f'<p class="gpu-idle">{idle}</p>')
    non_fatal = [f for f in analysis.reported() if f.facts.get("non_fatal")]
    if non_fatal:
        what = "; ".join(f.text for f in non_fatal[:3])
        more = f" (and {len(non_fatal) - 3} more)" if len(non_fatal) > 3 else ""
        out.append(f'<p class="note non-fatal">Reported apart, not the incident (non-fatal, no fault): '
                   f"{code_spans(safe(what, redact))}{more}</p>")
    return "".join(out)


# How much a finding weighs in the report: the verdict and the freezes first, the requests they
# cost and the logs' repeats later, people's own notes last. Kinds not named weigh as symptoms.
WEIGHTS = {"frozen": 1, "silent_hang": 2, "stack_verdict": 3, "gpu_xid_error": 3, "gpu_idle_while_hung": 3,
           "gpu_busy_while_hung": 3, "unit_failed": 3, "key_times_contradiction": 3, "restart": 4, "mitigation": 4,
           "metrics_restart": 6, "clock_jump": 6, "out_of_range": 6, "annotation": 7}
SYMPTOM_WEIGHT = 5
NEVER_FOLDED = 3  # findings weighing less than this are each shown, even when of one kind


def finding_weight(finding: Finding) -> int:
    """0 for a stack verdict showing a hang, then freezes, blind spots, other verdicts, ... notes."""
    if finding.kind == "stack_verdict" and is_anomaly(finding):
        return 0
    return WEIGHTS.get(finding.kind, SYMPTOM_WEIGHT)


def _finding_item(finding: Finding, redact: Redact | None) -> str:
    when = f"<b>{safe(clock(finding.at))}</b> " if finding.at else ""
    head = f"{when}<code>{safe(finding.kind)}</code> {code_spans(safe(finding.text, redact))}"
    if not finding.evidence:
        return f'<li class="finding">{head}</li>'
    rows = [{"time": clock(e.at) if e.at else None, "file": e.source,
             "line or offset": e.line if e.line is not None else e.offset, "excerpt": e.excerpt}
            for e in finding.evidence]
    return (f'<li class="finding"><details><summary>{head}</summary>'
            f"{table(rows, redact, numeric=('line or offset',))}</details></li>")


def findings_block(analysis: Analysis, redact: Redact | None) -> str:
    """Each symptom track's findings, heaviest first (a hang verdict, the freezes, the blind
    spots), each unfolding to the evidence rows behind it; lighter findings of one kind that
    repeat are folded into one line that unfolds to them. Times in the display zone set by the caller."""
    parts = []
    for track in analysis.tracks:
        shown = sorted(analysis.reported(track.findings), key=lambda f: (finding_weight(f), f.at is None, f.at))
        foldable: dict[str, list[Finding]] = {}
        for f in shown:
            if finding_weight(f) >= NEVER_FOLDED:
                foldable.setdefault(f.kind, []).append(f)
        items, done = [], set()
        for f in shown:
            group = foldable.get(f.kind, [])
            if f not in group or len(group) == 1:
                items.append(_finding_item(f, redact))
            elif f.kind not in done:
                done.add(f.kind)
                times = sorted({clock(g.at) for g in group if g.at})
                where = sorted({g.component for g in group if g.component})
                items.append(f'<li class="folded"><details><summary><code>{safe(f.kind)}</code> × {len(group)}'
                             + (f" ({safe(', '.join(where), redact)})" if where else "")
                             + (f", {safe(times[0])}" + (f"–{safe(times[-1])}" if len(times) > 1 else "")
                                if times else "")
                             + f"</summary><ul>{''.join(_finding_item(g, redact) for g in group)}</ul></details></li>")
        parts.append(f'<h3>track: {safe(track.name, redact)}</h3><ul class="findings">{"".join(items)}</ul>')
    return "".join(parts)


def timeline_page(analysis: Analysis, fig: go.Figure, redact: Redact | None, statement: str | None) -> str:
    """The whole shareable timeline page: title, key times, tracks, the figure, what was redacted."""
    with in_display_zone(analysis):
        return _timeline_page(analysis, fig, redact, statement)


def _timeline_page(analysis: Analysis, fig: go.Figure, redact: Redact | None, statement: str | None) -> str:
    tracks = "".join(f"<li><b>{safe(track.name, redact)}</b>: {len(track.findings)} findings, "
                     f"{safe(clock(track.first))}–{safe(clock(track.last))}</li>" for track in analysis.tracks)
    title = safe(analysis.timeline.incident.title, title_redact(analysis.timeline.incident.title_written, redact))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} — timeline</title><style>{STYLE}</style>
{plotly_js_tag()}
</head><body>
<h1>{title}</h1>
<p class="note">Times in {safe(analysis.display_zone)}; stored and exported in UTC. Made by forensics from
{safe(_bundle_name(analysis), redact)}.</p>
<h2>Key times</h2>
{key_times_block(analysis, redact)}
<h2>Symptom tracks</h2>{f"<ul>{tracks}</ul>" if tracks else "<p>No findings.</p>"}
<h2>Timeline</h2>
{no_time_note(fig)}{figure_div(fig, "timeline")}
<p class="note" id="redaction">{safe(statement or NOT_REDACTED)}</p>
</body></html>
"""


def _bundle_name(analysis: Analysis) -> str:
    return Path(analysis.bundle).name


def index_page(rows: Sequence[dict[str, Any]], groups: Sequence[dict[str, Any]] = (),
               title: str = "Incident reports") -> str:
    """The batch index: the recurring problems (incidents grouped by signature: what it says, how
    many, first and last seen, the mean time between, the reports), then one row per incident
    (title, window, verdicts, TTD, TTM, seen before, links), failed bundles with their error.
    Every value is escaped; links are relative to the index."""
    recurring = "".join(
        "<tr>" + "".join([
            f"<td><code>{safe(g['id'])}</code><br><span class='note'>{safe('; '.join(g['parts']))}</span></td>",
            f"<td class='num'>{g['count']}</td>", f"<td>{safe(g['first'] or '—')}</td>",
            f"<td>{safe(g['last'] or '—')}</td>",
            f"<td class='num'>{safe(span(g['mean_between_s']) if g['mean_between_s'] is not None else '—')}</td>",
            "<td>" + " · ".join(f'<a href="{safe(href)}">{n + 1}</a>' for n, href in enumerate(g["reports"]))
            + "</td>"]) + "</tr>" for g in groups)
    signatures = ('<table id="signatures"><thead><tr><th>signature</th><th>incidents</th><th>first seen</th>'
                  '<th>last seen</th><th>mean time between</th><th>reports</th></tr></thead>'
                  f"<tbody>{recurring}</tbody></table>" if groups
                  else "<p>No incident with a signature (nothing found wrong, or every bundle failed).</p>")
    body = []
    for row in rows:
        links = " · ".join(f'<a href="{safe(href)}">{safe(name)}</a>' for name, href in row.get("links", []))
        status = (f'<span class="bad">failed: {safe(row["error"])}</span>' if row.get("error") else "rendered")
        body.append("<tr>" + "".join([
            f"<td>{safe(row.get('title') or row.get('bundle'))}<br>"
            f"<span class='note'>{safe(row.get('bundle'))}</span></td>",
            f"<td>{safe(row.get('what_happened') or '—')}</td>",
            f"<td>{safe(row.get('window') or '—')}</td>",
            f"<td class='verdict'>{safe(row.get('verdicts') or '—')}</td>",
            f"<td class='num'>{safe(row.get('ttd') or '—')}</td>",
            f"<td class='num'>{safe(row.get('ttm') or '—')}</td>",
            f"<td class='num'>{safe(row['seen_before']) if row.get('seen_before') else '—'}</td>",
            f"<td>{status}</td>", f"<td>{links}</td>"]) + "</tr>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{safe(title)}</title><style>{STYLE}</style></head><body>
<h1>{safe(title)}</h1>
<p class="note">{len(rows)} bundles, {sum(1 for r in rows if r.get('error'))} failed.</p>
<h2>Recurring problems</h2>
{signatures}
<h2>Incidents</h2>
<table id="incidents"><thead><tr><th>incident</th><th>what happened</th><th>window</th><th>verdicts</th><th>TTD</th><th>TTM</th>
<th>seen before</th><th>status</th><th>outputs</th></tr></thead><tbody>{''.join(body)}</tbody></table>
<script type="application/json" id="index-data">{_json_for_script(rows)}</script>
</body></html>
"""


def _json_for_script(value: Any) -> str:
    """JSON that cannot close its <script> element."""
    return (json.dumps(value, default=str).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026"))
