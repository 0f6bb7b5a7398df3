"""What a notebook cell shows of a report section: a plotly `Figure` (plotly's mimetype for
JupyterLab, an HTML div for nbconvert's page) or escaped `Html` that reads as plain text in a terminal."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from forensics.render import html


class Figure:
    """A plotly figure for a notebook output: plotly's mimetype (JupyterLab draws it) and an HTML
    div that expects plotly.js on the page (the report's template inlines it once)."""

    _count = 0

    def __init__(self, fig: go.Figure, name: str) -> None:
        self.fig = fig
        self.name = name

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        Figure._count += 1
        return {"application/vnd.plotly.v1+json": json.loads(pio.to_json(self.fig, validate=False)),
                "text/html": html.no_time_note(self.fig)
                + html.figure_div(self.fig, html.element_id("fig", Figure._count, self.name)),
                "text/plain": f"<figure {self.name}: {len(self.fig.data)} traces>"}


class _PlainText(HTMLParser):
    """The text of a section's HTML, laid out for a terminal: a line per paragraph, heading, list
    item and table row (cells joined by " | ")."""

    BLOCKS = {"p", "h1", "h2", "h3", "h4", "li", "tr", "pre", "table", "ul", "div"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.cells = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.BLOCKS or tag == "br":
            self.out.append("\n")
            self.cells = 0
        if tag == "li":
            self.out.append("- ")
        if tag in ("td", "th"):
            if self.cells:
                self.out.append(" | ")
            self.cells += 1

    def handle_data(self, data: str) -> None:
        self.out.append(data)

    def text(self) -> str:
        lines = ("".join(self.out)).splitlines()
        return "\n".join(line.rstrip() for line in lines if line.strip())


class Html:
    """Escaped HTML for a notebook output; as plain text (a terminal, `print`, a text-only
    front end) it reads as its words and tables, not as an object's address."""

    def __init__(self, body: str) -> None:
        self.body = body

    def _repr_html_(self) -> str:
        return self.body

    def __repr__(self) -> str:
        reader = _PlainText()
        reader.feed(self.body)
        return reader.text()

    def __str__(self) -> str:
        return repr(self)
