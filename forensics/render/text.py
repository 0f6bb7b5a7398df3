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


# Characters that act rather than show, kept out of every output as visible escapes (`\x1b`,
# `\u202e`): control characters (C0 but tab, newline and carriage return; DEL; C1, NEL among them),
# the Unicode line and paragraph separators (editors and some terminals start a new line there, so
# evidence could begin a line of its own that poses as the report's), and the bidirectional
# embeddings, overrides, isolates and marks (an unclosed right-to-left override in a log line
# reverses the report's own words after it: "rank 3" reads "3 knar").
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A, 0x0D)}
_FORMATS = {c: f"\\u{c:04x}" for c in (0x2028, 0x2029, 0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F),
                                        *range(0x2066, 0x206A))}
SHOWN = {**_CONTROLS, **_FORMATS}  # str.translate's table: what `visible` writes out


def visible(text: str) -> str:
    """`text` with every character that would act rather than show (controls, line separators,
    bidirectional overrides) written out as `\\xNN` / `\\uNNNN`; tab, newline and carriage return kept."""
    return text.translate(SHOWN)


def safe(text: object, redact: Redact | None = None) -> str:
    """`text` redacted (when a redactor is given), its acting characters made `visible`, and
    HTML-escaped, quotes included."""
    value = "" if text is None else str(text)
    if redact is not None:
        value = redact(value) or ""
    return html.escape(visible(value), quote=True)


def shorten(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters, its middle left out (`…`): both the
    host at the start and the rank at the end of a long lane name stay readable."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def hover(text: object, redact: Redact | None = None, width: int = 100, max_lines: int = 12) -> str:
    """`text` for a plotly hover or label: redacted, escaped, wrapped at `width` characters with
    `<br>` (the only markup added), at most `max_lines` lines."""
    value = "" if text is None else str(text)
    if redact is not None:
        value = redact(value) or ""
    value = visible(value)
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


# Control characters a terminal would act on (C0 but tab and newline, DEL, C1): an escape sequence
# in a log line can clear the screen, set the window title, write the clipboard (OSC 52) or hide a
# link (OSC 8). Shown as `\x1b` instead; line separators and bidirectional overrides too (`SHOWN`).
_TERMINAL_CONTROLS = {**SHOWN, 0x0D: "\\x0d"}
_TERMINAL_CONTROLS_BUT_CR = {c: v for c, v in _TERMINAL_CONTROLS.items() if c != 0x0D}


def terminal_safe(text: str, keep_carriage_return: bool = False) -> str:
    """`text` with every control character a terminal acts on written out as `\\xNN` (tab and
    newline kept; carriage return too when asked, for progress bars)."""
    return text.translate(_TERMINAL_CONTROLS_BUT_CR if keep_carriage_return else _TERMINAL_CONTROLS)


class TerminalSafe:
    """A text stream that writes through `terminal_safe`: what a command prints from the evidence
    (messages, host and file names) cannot act on the terminal it is shown in."""

    def __init__(self, stream: object, keep_carriage_return: bool = False) -> None:
        self._stream = stream
        self._keep_cr = keep_carriage_return

    def write(self, text: str) -> int:
        """Write `text`, its control characters shown, not acted on."""
        self._stream.write(terminal_safe(text, self._keep_cr))  # type: ignore[attr-defined]
        return len(text)

    def __getattr__(self, name: str) -> object:  # flush, isatty, fileno, encoding: the stream's own
        return getattr(self._stream, name)


def title_redact(written_by_user: bool, redact: Redact | None) -> Redact | None:
    """How an incident's title is redacted: not at all when the user wrote it (incident.toml: their
    own words, which they chose to share), as any evidence when it is the bundle's folder name."""
    return None if written_by_user else redact
