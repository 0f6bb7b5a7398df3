"""The time stamps servers write at the start of a line, read from data (`profiles/stamps/forms.toml`).

Each form is a regular expression whose named groups say what the stamp holds (year, month or
month_name, day, time, frac; a level or glog's level letter; syslog's host, ident and pid). This
module turns the forms into polars expressions over a line's text: one struct column per form, the
stamp each line wrote as `YYYY-MM-DD HH:MM:SS[.f]` text, and the level, host, program and pid the
stamp carried. It knows the group names, never a form: a new form is a TOML entry.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import polars as pl

from forensics.errors import ForensicsError

FORMS_FILE = Path(__file__).resolve().parents[2] / "profiles" / "stamps" / "forms.toml"
GROUPS = frozenset({"year", "month", "month_name", "day", "time", "frac", "level", "level_letter", "host", "ident",
                    "pid"})
MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                      "Dec"), start=1)}
LEVEL_LETTERS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "FATAL"}


@dataclass(frozen=True)
class StampForm:
    """One way of writing a time at the start of a line."""

    name: str
    pattern: str
    groups: frozenset[str]
    sniff: bool
    samples: tuple[dict[str, object], ...]

    @property
    def column(self) -> str:
        return f"stamp_{self.name}"

    @property
    def has_year(self) -> bool:
        return "year" in self.groups


@cache
def forms(path: Path = FORMS_FILE) -> tuple[StampForm, ...]:
    """The stamp forms in the order they are tried; a form naming a group this module does not
    know, or lacking a day, month and time, is an error naming the form."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ForensicsError(f"{path}: {error}") from None
    out = []
    for entry in data.get("form", []):
        name, pattern = entry.get("name"), entry.get("pattern")
        try:
            groups = frozenset(re.compile(pattern).groupindex)
        except (re.error, TypeError) as error:
            raise ForensicsError(f"{path}: stamp form {name!r}: pattern does not compile ({error})") from None
        unknown = groups - GROUPS
        needed = {"day", "time"} <= groups and bool(groups & {"month", "month_name"})
        if unknown or not needed or not pattern.startswith("^"):
            raise ForensicsError(f"{path}: stamp form {name!r}: groups {sorted(groups)} (it needs day, time and "
                                 f"month or month_name, anchored at ^; known groups: {sorted(GROUPS)})")
        out.append(StampForm(name, pattern, groups, bool(entry.get("sniff")), tuple(entry.get("sample", ()))))
    return tuple(out)


def sniff_pattern() -> str:
    """The forms a file may be known by wherever it lies, as one alternation (groups unnamed, no anchor)."""
    unnamed = (re.sub(r"\(\?P<[a-z_]+>", "(?:", form.pattern[1:]) for form in forms() if form.sniff)
    return "|".join(f"(?:{pattern})" for pattern in unnamed)


def extract(text: pl.Expr) -> list[pl.Expr]:
    """One struct column per form: the groups that form found at the start of `text` (null fields
    where it does not match)."""
    return [text.str.extract_groups(form.pattern).alias(form.column) for form in forms()]


def _field(form: StampForm, group: str) -> pl.Expr:
    return pl.col(form.column).struct.field(group)


def matched(form: StampForm) -> pl.Expr:
    """Whether a line starts with this form's stamp."""
    return _field(form, "time").is_not_null()


def any_stamp() -> pl.Expr:
    """Whether a line starts with a stamp of any form."""
    return pl.any_horizontal([matched(form) for form in forms()])


def needs_year() -> pl.Expr:
    """Whether a line's stamp was written without a year."""
    return pl.any_horizontal([matched(form) for form in forms() if not form.has_year] or [pl.lit(False)])


def stated_year() -> pl.Expr:
    """The year a line's stamp wrote, if its form writes one."""
    return pl.coalesce([_field(form, "year").cast(pl.Int32, strict=False) for form in forms() if form.has_year]
                       or [pl.lit(None, pl.Int32)])


def written(year: int) -> pl.Expr:
    """A line's stamp, whatever its form, as `YYYY-MM-DD HH:MM:SS[.f]` text (null: none); `year`
    for the forms written without one."""
    texts = []
    for form in forms():
        stated = _field(form, "year") if form.has_year else pl.lit(str(year))
        month = (_field(form, "month").str.zfill(2) if "month" in form.groups else
                 _field(form, "month_name").replace_strict(MONTHS, default=None, return_dtype=pl.String).str.zfill(2))
        fraction = (pl.when(_field(form, "frac").is_not_null()).then(pl.lit(".") + _field(form, "frac")).otherwise(pl.lit(""))
                    if "frac" in form.groups else pl.lit(""))
        texts.append(pl.when(matched(form)).then(
            pl.format("{}-{}-{} {}{}", stated, month, _field(form, "day").str.zfill(2), _field(form, "time"), fraction)))
    return pl.coalesce(texts)


def carried(group: str) -> pl.Expr:
    """What the stamp carried beside the time: `level` (a level word, glog's letter spelt out),
    `host`, `ident` or `pid`; null when its form carries none."""
    values = []
    for form in forms():
        if group in form.groups:
            values.append(_field(form, group))
        if group == "level" and "level_letter" in form.groups:
            values.append(_field(form, "level_letter").replace_strict(LEVEL_LETTERS, default=None))
    return pl.coalesce(values) if values else pl.lit(None, pl.String)
