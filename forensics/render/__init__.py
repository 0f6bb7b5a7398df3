"""Render: turn an `Analysis` into what people read and share.

`swimlanes` draws the timeline (lanes named by `lanes`, with the `metric_panels` below, on the time
`axis` every figure shares, in the colours of `palette`); `figures` the smaller ones (the incident
at a glance, stack phases, the merged-stack icicle, error templates per minute); `html` escapes every piece of log text, writes
the self-contained `timeline.html` and the batch `index.html`; `redact` replaces secrets and
identities with stable pseudonyms; `postmortem` drafts `postmortem.md`; `tables` shows frames as
escaped HTML tables in notebooks. The notebooks call these; nothing here runs a notebook
(that is `forensics.report`).
"""

MAIN_NOTEBOOK = "incident_report.ipynb"
DEEP_DIVES = ("logs.ipynb", "metrics.ipynb", "stacks.ipynb")
#: What a report folder holds (the only names a report writes or replaces there).
FAILED_NOTEBOOK = "incident_report.failed.ipynb"  # a failed render's executed notebook, with its traceback
OUTPUTS = (MAIN_NOTEBOOK, "report.html", "timeline.html", "postmortem.md", "summary.json", "alerts.yml",
           "alerts.test.yml", "screens", FAILED_NOTEBOOK, *DEEP_DIVES)
