"""The line grammar of the Prometheus text exposition format (0.0.4) and OpenMetrics 1.0 text.

Specs: https://prometheus.io/docs/instrumenting/exposition_formats/ and
https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md.

Two halves. The regular expressions here recognise a well-formed line in one pass, so the reader
(`forensics.sources.prometheus.prometheus_text`) can classify and cut every line of a scrape with polars.
`parse_line` is the exact, character-by-character reader run only on the lines those expressions
reject: it names what is wrong in the words of Prometheus's own parser (`expfmt.TextParser`), e.g.
`expected float as value for 'quantile' label, got "x"`, so a message can be looked up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
QUOTED_NAME = r'"(?:[^"\\\n]|\\[\\"n])*"'
# strconv.ParseFloat as expfmt uses it: no hex floats, no digit separators ('p', 'P', '_' refused).
FLOAT = r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?)|[nN][aA][nN]"
INTEGER = r"[+-]?[0-9]+"
_LABEL_PAIR = rf"(?:{LABEL_NAME}|{QUOTED_NAME})[ \t]*=[ \t]*{LABEL_VALUE}"
LABELS = rf"\{{[ \t]*(?:(?:{_LABEL_PAIR}|{QUOTED_NAME})[ \t]*(?:,[ \t]*(?:{_LABEL_PAIR})[ \t]*)*,?[ \t]*)?\}}"
#: One `name="value"` pair (or a bare quoted metric name) inside a label set.
LABEL_PAIR = rf'(?:(?P<lname>{LABEL_NAME})|(?P<qname>{QUOTED_NAME}))(?:[ \t]*=[ \t]*(?P<lvalue>{LABEL_VALUE}))?'
#: `# HELP name text`, `# TYPE name type`, `# UNIT name unit`, `# EOF`.
METADATA = (rf"^#[ \t]+(?P<keyword>HELP|TYPE|UNIT)[ \t]+(?P<family>{METRIC_NAME}|{QUOTED_NAME})(?:[ \t]+(?P<detail>.*?))?[ \t]*$"
            r"|^(?P<eof># EOF)[ \t]*$")
TYPES = ("counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset", "untyped", "unknown")
#: Sample-name suffixes each type's family may carry (OpenMetrics adds _total, _created, _info,
#: _gcount, _gsum to what the Prometheus text format has).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("_count", "_sum", "_created"),
    "info": ("_info",),
}

#: Every such suffix, longest first (so `_gcount` is tried before `_count`).
METRIC_SUFFIXES = sorted({s for suffixes in SUFFIXES.values() for s in suffixes}, key=len, reverse=True)

_FLOAT_RE = re.compile(rf"^(?:{FLOAT})$")
_INTEGER_RE = re.compile(rf"^(?:{INTEGER})$")
_NAME_START = re.compile(r"[a-zA-Z_:]")
_NAME_CHAR = re.compile(r"[a-zA-Z0-9_:]")
_LABEL_START = re.compile(r"[a-zA-Z_]")
_LABEL_CHAR = re.compile(r"[a-zA-Z0-9_]")


def name_key(name: str) -> str:
    """A metric name as compared across sources: `:` read as `_`, since prometheus_client escapes
    colons in what it serves Prometheus (OpenMetrics, `escaping=underscores`) but not for curl."""
    return name.replace(":", "_")


def go_quote(text: str) -> str:
    """A string the way Go's %q prints it (what expfmt's messages contain)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def unescape(value: str) -> str:
    """A label value or HELP text with its escapes (`\\\\`, `\\"`, `\\n`) resolved."""
    if "\\" not in value:
        return value
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], value)


def is_float(token: str) -> bool:
    """Whether `token` is a value Prometheus's parser accepts."""
    return bool(_FLOAT_RE.match(token))


class _Line:
    """A cursor over one line, with expfmt's error words."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else "\n"

    def skip_blank(self) -> None:
        while self.peek() in " \t":
            self.at += 1

    def token(self) -> str:
        start = self.at
        while self.peek() not in " \t\n":
            self.at += 1
        return self.text[start:self.at]

    def name(self, start: re.Pattern[str], char: re.Pattern[str]) -> str:
        begin = self.at
        if start.match(self.peek()):
            self.at += 1
            while char.match(self.peek()):
                self.at += 1
        return self.text[begin:self.at]

    def quoted(self, what: str) -> str:
        """A quoted string from just after its opening quote; raises ValueError with expfmt's words."""
        out: list[str] = []
        while True:
            ch = self.peek()
            if ch == "\n":
                raise ValueError(f"{what} {go_quote(''.join(out))} contains unescaped new-line")
            self.at += 1
            if ch == '"':
                return "".join(out)
            if ch == "\\":
                escaped = self.peek()
                if escaped not in '\\"n':
                    raise ValueError(f"invalid escape sequence '\\{escaped}'")
                self.at += 1
                out.append("\n" if escaped == "n" else escaped)
            else:
                out.append(ch)


def _labels(line: _Line, metric: str | None, family_type: str | None,
            pairs: list[tuple[str, str]], utf8_names: bool = True) -> str | None:
    """Read a label set from just after `{` into `pairs`; returns the metric name if the set carried it.
    Quoted (UTF-8) names are read only with `utf8_names`: the text format's legacy reader, the one
    promtool runs, refuses them."""
    seen: set[str] = set()
    while True:
        line.skip_blank()
        if line.peek() == "}":
            line.at += 1
            return metric
        if line.peek() == '"' and not utf8_names:
            if metric is None:
                raise ValueError("invalid metric name")
            raise ValueError(f"invalid label name for metric {go_quote(metric)}")
        if line.peek() == '"':
            line.at += 1
            name = line.quoted("label name")
        else:
            name = line.name(_LABEL_START, _LABEL_CHAR)
        if not name:
            raise ValueError(f"invalid label name for metric {go_quote(metric or '')}")
        line.skip_blank()
        if line.peek() != "=":
            if metric is None and line.peek() in ",}":  # a quoted metric name inside the braces
                metric = name
                if line.peek() == ",":
                    line.at += 1
                continue
            if metric is None:
                raise ValueError(f"unexpected end of metric name {_go_byte(line.peek())}")
            raise ValueError(f"expected '=' after label name, found {_go_byte(line.peek())}")
        line.at += 1
        if name == "__name__":
            raise ValueError('label name "__name__" is reserved')
        if name in seen:
            raise ValueError(f"duplicate label names for metric {go_quote(metric or '')}")
        seen.add(name)
        line.skip_blank()
        if line.peek() != '"':
            raise ValueError(f"expected '\"' at start of label value, found {_go_byte(line.peek())}")
        line.at += 1
        value = line.quoted("label value")
        if name == "quantile" and family_type == "summary" and not is_float(value):
            raise ValueError(f"expected float as value for 'quantile' label, got {go_quote(value)}")
        if name == "le" and family_type in ("histogram", "gaugehistogram") and not is_float(value):
            raise ValueError(f"expected float as value for 'le' label, got {go_quote(value)}")
        pairs.append((name, value))
        line.skip_blank()
        if line.peek() == ",":
            line.at += 1
        elif line.peek() != "}":
            raise ValueError(f"unexpected end of label value {go_quote(value)}")


def _go_byte(ch: str) -> str:
    """A byte the way Go's %q prints a byte value (a rune literal)."""
    return "'\\n'" if ch == "\n" else f"'{ch}'"


@dataclass(frozen=True)
class Sample:
    """One sample line, read."""

    name: str
    labels: tuple[tuple[str, str], ...]  # in the order written, values unescaped
    value: str
    timestamp: str | None
    exemplar: str | None


def parse_line(text: str, family_type: str | None = None, *, openmetrics: bool = False) -> Sample:
    """Read one sample line exactly; ValueError says what is wrong in expfmt's words."""
    line = _Line(text)
    line.skip_blank()
    pairs: list[tuple[str, str]] = []
    metric: str | None = line.name(_NAME_START, _NAME_CHAR) or None
    if metric is None and not (openmetrics and line.peek() == "{"):
        raise ValueError("invalid metric name")  # `{} 3.14`; OpenMetrics may name it inside the braces
    line.skip_blank()
    if line.peek() == "{":
        line.at += 1
        metric = _labels(line, metric, family_type, pairs, utf8_names=openmetrics)
        if not metric:
            raise ValueError("invalid metric name")
        line.skip_blank()
    value = line.token()
    if not is_float(value):
        raise ValueError(f"expected float as value, got {go_quote(value)}")
    line.skip_blank()
    stamp = exemplar = None
    if line.peek() not in "#\n":
        stamp = line.token()
        if openmetrics and not is_float(stamp):
            raise ValueError(f"expected float as timestamp, got {go_quote(stamp)}")
        if not openmetrics and not _INTEGER_RE.match(stamp):
            raise ValueError(f"expected integer as timestamp, got {go_quote(stamp)}")
        after_stamp = line.at  # expfmt quotes what follows the timestamp, blanks included
        line.skip_blank()
        if line.peek() != "\n" and not (line.peek() == "#" and openmetrics):
            raise ValueError(f"spurious string after timestamp: {go_quote(text[after_stamp:])}")
    if line.peek() == "#" and openmetrics:
        exemplar = text[line.at + 1:].strip()
        _exemplar(exemplar)
    elif line.peek() != "\n":
        raise ValueError(f"spurious string after timestamp: {go_quote(text[line.at:])}")
    assert metric is not None  # both ways of reading a name above end with one, or raise
    return Sample(metric, tuple(pairs), value, stamp, exemplar)


def _exemplar(text: str) -> None:
    """Check an OpenMetrics exemplar: `{labels} value [timestamp]`."""
    line = _Line(text)
    if line.peek() != "{":
        raise ValueError(f"exemplar must start with a label set, got {go_quote(text)}")
    line.at += 1
    _labels(line, "exemplar", None, [])
    line.skip_blank()
    tokens = text[line.at:].split()
    if not tokens or not is_float(tokens[0]) or len(tokens) > 2 or (len(tokens) == 2 and not is_float(tokens[1])):
        raise ValueError(f"exemplar needs a float value and an optional float timestamp, got {go_quote(text)}")


def help_problem(text: str) -> str | None:
    """An invalid escape in a HELP text (only `\\\\` and `\\n` are allowed), or None."""
    for escape in re.finditer(r"\\(.|$)", text):  # pairs, left to right: `\\i` is `\\` then `i`
        if escape[1] not in ("\\", "n"):
            return f"invalid escape sequence '\\{escape[1]}'"
    return None


def series_key() -> pl.Expr:
    """`name{a="1",b="2"}` from the sorted labels (values escaped as in the exposition)."""
    pair = pl.format('{}="{}"', pl.element().struct.field("name"),
                     pl.element().struct.field("value").str.replace_all("\\", "\\\\", literal=True)
                     .str.replace_all('"', '\\"', literal=True).str.replace_all("\n", "\\n", literal=True))
    inside = pl.col("label_list").list.eval(pair).list.join(",")
    return pl.when(pl.col("label_list").list.len() > 0).then(pl.format("{}{{{}}}", "name", inside)) \
        .otherwise(pl.col("name"))
