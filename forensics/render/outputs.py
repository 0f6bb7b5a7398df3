"""What a report session writes beside the notebook: `summary.json`, `timeline.html`,
`postmortem.md` and, when the evidence gives one, the alert that would have caught it with its
promtool test; and what each output redacted. A part of `ReportSession` (`forensics.render.sections`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import polars as pl

from forensics.analyze import Analysis, in_display_zone, seen_before
from forensics.detect.alert import promtool_test
from forensics.render import html, postmortem
from forensics.render.cells import Html
from forensics.render.lanes import Mark
from forensics.render.redact import Redactor
from forensics.render.swimlanes import timeline_figure
from forensics.render.text import Redact, safe
from forensics.profiles import MetricPanel

LIBRARY_ENV = "FORENSICS_LIBRARY"  # a folder of earlier reports, for "seen before"
SUDO_USER = r"^\s*([a-z_][a-z0-9_.-]*) : (?:TTY|PWD|USER|COMMAND)="  # who ran the command


def hosts_and_users(analysis: Analysis) -> tuple[list[str], list[str]]:
    """Host names the evidence names (journal, scrapes, stacks, manifest) and the users sudo's audit
    lines name: redaction hides them wherever they appear, free text included."""
    events = analysis.timeline.events
    users = (events.filter(pl.col("identifier") == "sudo")
             .select(pl.col("message").str.extract(SUDO_USER, 1)).to_series().drop_nulls().unique().to_list())
    hosts = {h for h in analysis.timeline.hosts if h}
    hosts |= set(analysis.timeline.stacks.get_column("host").drop_nulls().unique().to_list())
    hosts |= {str(h) for h in analysis.timeline.samples.select(pl.col("host").cast(pl.String)).unique()
              .collect().get_column("host").drop_nulls().to_list()}
    hosts |= set(analysis.timeline.incident.hosts)
    return sorted(h for h in hosts if h), sorted(users)


class Outputs:
    """The outputs of one analysis (`analysis`) written into `out_dir`."""

    analysis: Analysis
    out_dir: Path
    redact_mode: str
    redact: Redact | None
    _report_redactor: Redactor | None
    panels: list[MetricPanel]
    marks: list[Mark]
    timeline_statement: str | None

    def redactor(self) -> Redactor:
        """A fresh redactor knowing this bundle's host names; the title the user wrote is theirs and kept."""
        hosts, users = hosts_and_users(self.analysis)
        incident = self.analysis.timeline.incident
        return Redactor(hosts, users, keep=[incident.title] if incident.title_written else [])

    def summary(self) -> dict[str, Any]:
        """summary.json's content (redacted when redact="all"), with the earlier incidents of the
        same signature when a library of reports is given (`FORENSICS_LIBRARY`)."""
        data = self.analysis.summary()
        with in_display_zone(self.analysis):  # the one-sentence answer, as the first screen says it
            data["what_happened"] = postmortem.verdict_sentence(self.analysis, str)
        library = os.environ.get(LIBRARY_ENV)
        if library and (earlier := seen_before(data, Path(library), self.out_dir / "summary.json")) is not None:
            data["seen_before"] = earlier
        if self._report_redactor is not None:
            data = self._report_redactor.structure(json.loads(json.dumps(data, default=str)))
        return data

    def write_outputs(self) -> dict[str, str]:
        """Write summary.json, timeline.html and postmortem.md into the output folder."""
        out = self.out_dir
        (out / "summary.json").write_text(json.dumps(self.summary(), indent=2, default=str) + "\n")
        timeline_redactor = None if self.redact_mode == "none" else self.redactor()
        fig = timeline_figure(self.analysis, timeline_redactor, extra_panels=self.panels, marks=self.marks)
        statement = timeline_redactor.statement() if timeline_redactor else None
        self.timeline_statement = statement
        (out / "timeline.html").write_text(html.timeline_page(self.analysis, fig, timeline_redactor, statement))
        draft = postmortem.draft(self.analysis, self.redact)
        if self._report_redactor is not None:
            draft += f"\n*{self._report_redactor.statement()}*\n"
        (out / "postmortem.md").write_text(draft)
        written = ["summary.json", "timeline.html", "postmortem.md"]
        rule = self.analysis.alert()
        if rule is not None:  # the alert that would have caught it, and a promtool test that shows it
            (out / "alerts.yml").write_text(rule.as_yaml())
            written.append("alerts.yml")
            if rule.fires_at is not None:
                (out / "alerts.test.yml").write_text(promtool_test(self.analysis.timeline, rule, "alerts.yml"))
                written.append("alerts.test.yml")
        return {name: str(out / name) for name in written}

    def redaction_note(self) -> Html:
        """What each output redacted (after `write_outputs`), kinds and counts."""
        timeline = self.timeline_statement or "not redacted (redact=none)"
        report = (self._report_redactor.statement() if self._report_redactor is not None
                  else "not redacted (redact=all would redact it, the post-mortem draft and summary.json too)")
        return Html(f"<p><b>timeline.html</b>: {safe(timeline)}</p><p><b>this report</b>: {safe(report)}</p>")

    def record(self) -> Any:
        """The summary as a notebook output of type application/json (what tests read)."""
        from IPython.display import JSON
        return JSON(json.loads(json.dumps(self.summary(), default=str)), metadata={"forensics": "summary"})
