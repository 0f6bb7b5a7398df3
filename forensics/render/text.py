"""Text that goes into HTML and charts: always escaped, optionally redacted, wrapped for hovers.

Log lines carry whatever clients and models wrote — `<script>`, `onerror=`, tool-call markup such
as `<｜DSML｜invoke name="get_weather">` — and must show as text, never run. Every string from
the evidence passes through `safe` (HTML tables, page text) or `hover` (plotly text, whose
pseudo-HTML understands entities, so `&lt;` shows as `<`), after the output's redactor.
"""

from __future__ import annotations

import html
import re
import textwrap
from collections.abc import Callable

Redact = Callable[[str | None], str | None]


def safe(text: object, redact: Redact | None = None) -> str:
    """`text` redacted (when a redactor is given) and HTML-escaped, quotes included."""
    value = "" if text is None else str(text)
    if redact is not None:
        value = redact(value) or ""
    return html.escape(value, quote=True)


def hover(text: object, redact: Redact | None = None, width: int = 100, max_lines: int = 12) -> str:
    """`text` for a plotly hover or label: redacted, escaped, wrapped at `width` characters with
    `<br>` (the only markup added), at most `max_lines` lines."""
    value = "" if text is None else str(text)
    if redact is not None:
        value = redact(value) or ""
    lines: list[str] = []
    for paragraph in value.splitlines() or [""]:
        lines += textwrap.wrap(paragraph, width, break_long_words=True, replace_whitespace=False) or [""]
    if len(lines) > max_lines:
        lines = lines[:max_lines - 1] + [f"… ({len(lines) - max_lines + 1} more lines)"]
    # quotes stay as they are: with `<` escaped no tag (and so no attribute) can form, and plotly's
    # legends show `&quot;` literally
    return "<br>".join(html.escape(line, quote=False) for line in lines)


def code_spans(escaped: str) -> str:
    """Backtick pairs in already-escaped text (the findings quote commands and frames that way)
    shown as code, not as backticks."""
    return re.sub(r"`([^`\n]+)`", r"<code>\1</code>", escaped)
