"""journald's cursor held as its values, not its text (case version 6).

journald writes a cursor as `s=<seqnum id>;i=<seqnum>;b=<boot id>;m=<monotonic>;t=<realtime>;x=<xor
hash>` (`sd_journal_get_cursor`: the ids as 32 lowercase hex digits, the numbers as `%llx`). Its
boot id and clocks are the entry's own `_BOOT_ID`, `__MONOTONIC_TIMESTAMP` and
`__REALTIME_TIMESTAMP`, which the case holds anyway; so a cursor in exactly that form is kept as
its three other values (`cursor_seqnum_id` a category, `cursor_seqnum` and `cursor_xor` unsigned
64-bit) and written back byte for byte when asked for (`whole_cursor`). Any other cursor — another
spelling, one whose boot or clocks differ from its entry's, a collector's own — stays text in
`__CURSOR`. In a case written so, and in the `events` rows a journal reader hands over, `__CURSOR`
is null wherever the values hold the cursor; the case's readers (`forensics.case.store`) give it
whole, and `whole_cursor()` writes it back anywhere else (docs/scale.md has it in SQL).

The export reader's scanner parses cursors as it meets them (`_export_scan.c`: `@cursor *` columns
of the field frame); readers that hand over cursors as text (JSON, the `.journal` reader) have them
parsed here by the same rule (`parsed_cursor_columns`).
"""

from __future__ import annotations

import functools

import polars as pl

SEQNUM_ID, SEQNUM, XOR = "cursor_seqnum_id", "cursor_seqnum", "cursor_xor"
#: The `events` columns `whole_cursor` writes a cursor back from.
WHOLE_FROM = ("__CURSOR", SEQNUM_ID, SEQNUM, XOR, "_BOOT_ID", "__MONOTONIC_TIMESTAMP", "__REALTIME_TIMESTAMP")
#: A field frame's parsed cursor (`forensics.sources.journal.fields`): the six values, null where
#: the cursor is not in journald's form.
PARSED = ("@cursor s", "@cursor i", "@cursor b", "@cursor m", "@cursor t", "@cursor x")
#: A field frame's mark of the parsed cursors whose boot id and clocks are the entry's own, where the
#: reader knows it (the scanner); else `cursor_columns` compares them.
OWN = "@cursor own"
_NUMBER = "(0|[1-9a-f][0-9a-f]{0,15})"  # %llx of a 64-bit number
_ID = "([0-9a-f]{32})"  # sd_id128_to_string
JOURNALD_CURSOR = f"^s={_ID};i={_NUMBER};b={_ID};m={_NUMBER};t={_NUMBER};x={_NUMBER}$"


@functools.cache
def _quads() -> pl.Series:
    """The four hex digits of each 16-bit number, in order (made when first needed, in polars: a
    list of 65,536 strings made in Python cost 35 ms)."""
    digits = pl.Series(list("0123456789abcdef"))
    number = pl.int_range(1 << 16, dtype=pl.UInt32)
    return pl.select(pl.concat_str([pl.lit(digits).gather(number // (1 << 4 * k) % 16) for k in (3, 2, 1, 0)])
                     ).to_series()


def hex_text(number: pl.Expr) -> pl.Expr:
    """An unsigned 64-bit `number` as printf's `%llx` writes it (lowercase, no leading zeros)."""
    value = number.cast(pl.UInt64)
    quads = [pl.lit(_quads()).gather((value // (1 << (16 * k)) % (1 << 16)).cast(pl.UInt32)) for k in (3, 2, 1, 0)]
    padded = pl.concat_str(quads).str.strip_chars_start("0")
    return pl.when(value.is_null()).then(None).when(padded == "").then(pl.lit("0")).otherwise(padded)


def cursor_text(seqnum_id: pl.Expr, seqnum: pl.Expr, boot: pl.Expr, monotonic: pl.Expr, realtime: pl.Expr,
                xor: pl.Expr) -> pl.Expr:
    """A cursor written from its six values as journald writes it; null where any is null."""
    return pl.format("s={};i={};b={};m={};t={};x={}", seqnum_id.cast(pl.String), hex_text(seqnum),
                     boot.cast(pl.String), hex_text(monotonic), hex_text(realtime), hex_text(xor))


def whole_cursor() -> pl.Expr:
    """`__CURSOR` of an `events` frame whole: its text where it kept one, else written from the
    cursor's values and the entry's own boot id and clocks."""
    return pl.coalesce(pl.col("__CURSOR"), cursor_text(pl.col(SEQNUM_ID), pl.col(SEQNUM), pl.col("_BOOT_ID"),
                                                       pl.col("__MONOTONIC_TIMESTAMP"),
                                                       pl.col("__REALTIME_TIMESTAMP"), pl.col(XOR))).alias("__CURSOR")


def cursor_identity(texts: bool = True) -> pl.Expr:
    """What makes two `events` rows' cursors the same, whichever way each is held: journald's six
    values (from the row's cursor values and its own boot id and clocks, or read from its text), or
    the text of a cursor not in journald's form. Equal exactly when the cursors' texts are equal.
    Without `texts` (no row keeps its cursor as text) only the values are compared."""
    own = (pl.col("_BOOT_ID").cast(pl.Categorical), pl.col("__MONOTONIC_TIMESTAMP"), pl.col("__REALTIME_TIMESTAMP"))
    if not texts:
        return pl.struct(pl.col(SEQNUM_ID), pl.col(SEQNUM), pl.col(XOR), *own)
    held = pl.col(SEQNUM_ID).is_not_null()
    read = pl.col("__CURSOR").str.extract_groups(JOURNALD_CURSOR)

    def number(n: int) -> pl.Expr:
        return read.struct.field(str(n)).str.to_integer(base=16, dtype=pl.UInt64, strict=False)

    def either(from_values: pl.Expr, from_text: pl.Expr, name: str) -> pl.Expr:
        return pl.when(held).then(from_values).otherwise(from_text).alias(name)

    # ids compared as categories (one dictionary in a process): no text made for every row
    return pl.struct(
        either(pl.col(SEQNUM_ID), read.struct.field("1").cast(pl.Categorical), "s"),
        either(pl.col(SEQNUM), number(2), "i"),
        either(own[0], read.struct.field("3").cast(pl.Categorical), "b"),
        either(own[1].cast(pl.UInt64, strict=False), number(4), "m"),
        either(own[2].cast(pl.UInt64, strict=False), number(5), "t"),
        either(pl.col(XOR), number(6), "x"),
        pl.when(held | read.struct.field("1").is_not_null()).then(None).otherwise(pl.col("__CURSOR")).alias("text"))


def has_cursor() -> pl.Expr:
    """Whether an `events` row has a cursor (as text or as values)."""
    return pl.col("__CURSOR").is_not_null() | pl.col(SEQNUM_ID).is_not_null()


def parsed_cursor_columns(text: pl.Expr) -> list[pl.Expr]:
    """The `PARSED` columns of cursors given as text: journald's form only, else nulls."""
    groups = text.str.extract_groups(JOURNALD_CURSOR)
    columns = []
    for n, name in enumerate(PARSED, start=1):
        part = groups.struct.field(str(n))
        columns.append((part.cast(pl.Categorical) if name in ("@cursor s", "@cursor b")
                        else part.str.to_integer(base=16, dtype=pl.UInt64, strict=False)).alias(name))
    return columns


def cursor_columns(fields: pl.DataFrame, text: pl.Series, boot: pl.Series, monotonic: pl.Series,
                   realtime: pl.Series) -> dict[str, pl.Series]:
    """`__CURSOR`, SEQNUM_ID, SEQNUM and XOR of a field frame's good rows (`fields`, with the
    `PARSED` columns) whose cursor text, boot id and clocks are given: the values where they and
    the entry's own give the cursor back exactly, else the text (the scanner gives none where it
    parsed the cursor; a reader's text is given whole)."""
    s, i, b, m, t, x = (fields.get_column(name) for name in PARSED)
    parsed = s.is_not_null()
    if OWN in fields.columns:  # the scanner compared them with the entry's plainly written fields
        held = fields.get_column(OWN)
    else:  # categories compared as categories (one dictionary for all): no text made for a million rows
        held = (parsed & (m == monotonic.cast(pl.UInt64, strict=False))
                & (t == realtime.cast(pl.UInt64, strict=False)) & (b == boot.cast(pl.Categorical))).fill_null(False)
    if (held == parsed).all() and not (parsed & text.is_not_null()).any():
        # the rule (every parsed cursor is its entry's, the text given only where not parsed): as they are
        return {"__CURSOR": text.cast(pl.String), SEQNUM_ID: s.cast(pl.Categorical), SEQNUM: i, XOR: x}
    # a cursor parsed whose boot or clocks are not its entry's: written back as the text it was
    differs = parsed & ~held
    if differs.any():
        rows = differs.arg_true()
        written = pl.DataFrame([c.gather(rows) for c in (s, i, b, m, t, x)]).select(
            cursor_text(*(pl.col(name) for name in PARSED))).to_series()
        text = text.cast(pl.String).scatter(rows, written)
    frame = pl.DataFrame({"held": held, "s": s, "i": i, "x": x, "text": text.cast(pl.String)})
    out = frame.select(
        pl.when(~pl.col("held")).then(pl.col("text")).alias("__CURSOR"),
        pl.when(pl.col("held")).then(pl.col("s").cast(pl.Categorical)).alias(SEQNUM_ID),
        pl.when(pl.col("held")).then(pl.col("i")).alias(SEQNUM),
        pl.when(pl.col("held")).then(pl.col("x")).alias(XOR))
    return {name: out.get_column(name) for name in out.columns}
