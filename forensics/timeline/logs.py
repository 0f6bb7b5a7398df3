"""Log lines read with a profile's `[logs]` rules: progress lines with their numbers, health checks,
readiness, and the line kinds worth a finding — all as polars expressions over the `events` frame.

For SGLang that is `[2026-06-18 21:34:47 TP0] Decode batch. #running-req: 12, …`: the prefix gives
the line's own local time (`line_local`, a naive time: `forensics.timeline.clocks` turns it into UTC) and the
scheduler tag (`DP0 TP3 EP3`, `PP1 TP0`, none on one GPU), the progress pattern the kind (Prefill / Decode),
and each `[logs.fields]` entry one numeric column.

A progress line's numbers are all written `label: number`, so they are read in one pass over each
line (`label_numbers`, in C) rather than one regular expression per field: at 1 M journal entries
the 19 patterns of SGLang's batch lines cost about 1 CPU-s, the largest piece of an analysis. The
patterns read each distinct line once (`distinct_messages`, in C too): real logs repeat lines word
for word.
"""

from __future__ import annotations

import functools
import re
import secrets
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa

from forensics.timeline import _lines
from forensics.profiles import LogRules, Profile, load_profile, matches_nothing

RANKS = ("dp", "tp", "pp", "ep")
STAMP_FORMATS = ("%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M:%S")
# the reading's texts of few distinct values (kinds, tags, methods), held as categories
FEW_VALUED = ("tag", "progress", "event", "track", "http_method")
# the seed of `distinct_lines`' hash, new in every process: lines cannot be written ahead to share hashes
_HASH_SEED = secrets.randbits(64)
_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


def _spread(frame: pl.DataFrame, rows: pl.Series, computed: pl.DataFrame) -> list[pl.Series]:
    """Columns computed for a subset of `frame`'s rows (at positions `rows`) as full-length
    columns, null elsewhere: cheaper than joining back on a row index, which copies every column."""
    return [pl.Series(name, [None], dtype=column.dtype).extend_constant(None, frame.height - 1)
            .scatter(rows, column) if frame.height else column.clear()
            for name, column in computed.to_dict().items()]


def _string_buffers(messages: pl.Series) -> tuple[pa.Array, object, object, list[object]]:
    """`messages` as one Arrow StringView array and its buffers (validity, views, data), as the C
    readers of `_lines.c` take them."""
    array = messages.cast(pl.String).rechunk().to_arrow(compat_level=pl.CompatLevel.newest())
    validity, views, *data = array.buffers()
    return array, validity, views, data


def label_numbers(messages: pl.Series, fields: dict[str, tuple[str, ...]], only: pl.Series | None = None
                  ) -> pl.DataFrame:
    """One Float64 column per field: the number after the field's label in each message (null
    where the message has none, or where the Boolean mask `only` is not true). A label counts
    where it starts the message or follows a punctuation mark and a space; the number is an
    optional "-", digits and at most one "."; the first occurrence in a message wins."""
    if messages.is_empty():
        return pl.DataFrame(schema={name: pl.Float64 for name in fields})
    array, validity, views, data = _string_buffers(messages)
    if only is not None:  # the lines not asked for are skipped as the scanner skips nulls: by the validity bits
        asked = (only.fill_null(False) & messages.is_not_null()).to_numpy()
        validity = np.packbits(np.concatenate([np.zeros(array.offset, bool), asked]), bitorder="little").tobytes()
    labels = [(label.encode(), column) for column, name in enumerate(fields) for label in fields[name]]
    numbers = _lines.label_numbers(views, validity, data, array.offset, len(array), labels, len(fields))
    block = np.frombuffer(numbers, np.float64).reshape(len(fields), len(array))
    return pl.DataFrame([pl.Series(name, block[i], nan_to_null=True) for i, name in enumerate(fields)],
                        schema={name: pl.Float64 for name in fields})


# The most top-level branches one search takes: an alternation of more literals than the regex
# engine's fastest literal search holds falls back to a slower one, while each search reads every
# line once more (measured over the 1 M reference's lines, the stack's line kinds apart and the
# layers' 88 branches in one search: 0.32 CPU-s; in runs of at most 32 branches 0.22; of 48 0.17).
MOST_BRANCHES = 48


def _structure(pattern: str) -> Iterator[tuple[int, str, int]]:
    """Each `(`, `)` and `|` of `pattern` outside escapes and classes: its index, itself, and the
    group depth after it."""
    depth, in_class, i = 0, False, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char in "(|)":
            depth += {"(": 1, ")": -1, "|": 0}[char]
            yield i, char, depth
        i += 1


def _top_level(pattern: str) -> list[str]:
    """`pattern`'s alternatives at its top level (split at its `|` outside groups and classes)."""
    cuts = [i for i, char, depth in _structure(pattern) if char == "|" and depth == 0]
    return [pattern[start + 1:end] for start, end in zip([-1, *cuts], [*cuts, len(pattern)])]


def top_level_branches(pattern: str) -> int:
    """How many alternatives `pattern` has at its top level (its `|` outside groups and classes)."""
    return len(_top_level(pattern))


_ASSERTION = re.compile(r"^(?:\\[bBA]|\^|\(\?-?u:\\b\)|\(\?[a-zA-Z-]+\))+")
_GROUP_HEAD = re.compile(r"^\((?:\?:|\?P<\w+>|\?[a-zA-Z-]+:)?")
_CLASS_ESCAPE = set("dDwWsSpPbBAzZ0123456789")
_FEW_LETTERS = re.compile(r"^\[[A-Za-z]{1,4}\]")  # `[Tt]`: the engine reads it as a few literals
_WHOLE_FLAGS = re.compile(r"\(\?[a-zA-Z-]+\)")


def _group_end(branch: str) -> int:
    """Where the group `branch` opens with closes (the index of its `)`), or -1."""
    return next((i for i, char, depth in _structure(branch) if char == ")" and depth == 0), -1)


def leads_with_literal(pattern: str) -> bool:
    """Whether every alternative of `pattern` begins with a literal character once its anchors and
    word boundaries are passed (a group counts when each of its alternatives does and it is not
    optional). One alternative that begins with a class (`[0-9]`, `\\d`, `.`) in a search of many
    takes the regex engine's literal search from all of them: 0.28 s for one pattern over a million
    lines, 0.03 s searched alone (measured on the 1 M reference's lines)."""
    for branch in _top_level(pattern):
        branch = _ASSERTION.sub("", branch)
        if not branch:
            return False
        if branch[0] == "(":
            end = _group_end(branch)
            head = _GROUP_HEAD.match(branch)  # matches: the branch opens with "("
            if end < 0 or branch[end + 1:end + 2] in ("?", "*") or branch[end + 1:end + 3] == "{0" \
                    or not leads_with_literal(branch[head.end():end]):
                return False
            continue
        few = _FEW_LETTERS.match(branch)
        if few:
            branch = "x" + branch[few.end():]  # a letter for the quantifier check below
        if branch[0] in "[.$)" or (branch[0] == "\\" and branch[1:2] in _CLASS_ESCAPE):
            return False
        after = 2 if branch[0] == "\\" else 1
        if branch[after:after + 1] in ("?", "*") or branch[after:after + 2] == "{0":
            return False
    return True


def _searches(patterns: list[str]) -> list[list[str]]:
    """`patterns` in runs of at most MOST_BRANCHES top-level branches. A pattern that does
    not lead with a literal (`leads_with_literal`) is cut into its alternatives, and each that does
    not is a search of its own (they are asked only whether any matches, so the cut changes no
    answer). Case-insensitive patterns (`(?i)…`, whose flag holds for every alternative) are not
    given here."""
    runs: list[list[str]] = [[]]
    alone: list[list[str]] = []
    size = 0
    for pattern in patterns:
        # a flag set for the whole pattern (`(?s)…`) would not hold for its alternatives cut apart
        whole = leads_with_literal(pattern) or _WHOLE_FLAGS.match(pattern)
        for part in [pattern] if whole else _top_level(pattern):
            if not leads_with_literal(part):
                alone.append([part])
                continue
            branches = top_level_branches(part)
            if runs[-1] and size + branches > MOST_BRANCHES:
                runs.append([])
                size = 0
            runs[-1].append(part)
            size += branches
    return [run for run in runs if run] + alone


def _any_of(message: pl.Expr, *pattern_lists: list[str]) -> pl.Expr:
    """Whether `message` matches any of the patterns in `pattern_lists`, in as few passes as can
    stay fast: for each list, its case-sensitive patterns in searches of at most MOST_BRANCHES
    branches, and one for the rest. A single case-insensitive branch (`(?i)…`) in one alternation
    takes the regex engine's literal search from all of it (measured: 3× slower over a million
    lines), as would a pattern for lines the stack never writes (`matches_nothing`), which is left
    out. The stack's and the layers' patterns are given apart (the layers' are the same for every
    stack)."""
    groups = []
    for patterns in pattern_lists:
        patterns = [p for p in patterns if not matches_nothing(p)]
        insensitive = [p for p in patterns if p.startswith("(?i)")]
        groups += [*_searches([p for p in patterns if p not in insensitive]), insensitive]
    # Group names made plain: two patterns may name the same group, which one pattern cannot.
    found = [message.str.contains("|".join(f"(?:{_NAMED_GROUP.sub('(?:', p)})" for p in group))
             for group in groups if group]
    return pl.any_horizontal(found) if found else pl.lit(False)


def distinct_messages(messages: pl.Series) -> tuple[pl.Series, pl.Series | None]:
    """The distinct values of `messages` (nulls read as "") in order of first appearance, and each
    row's place among them (None when every row is distinct already: nothing to map back). Real
    logs repeat their lines word for word (a router's "Sending concurrent requests…", health checks'
    access lines, a warning in a loop): each distinct line is read once. Exact: lines are the same
    when their bytes are (`_lines.distinct_lines`)."""
    text = messages.cast(pl.String).fill_null("")
    if text.is_empty():
        return text, None
    array, validity, views, data = _string_buffers(messages)
    found = _lines.distinct_lines(views, validity, data, array.offset, len(array), _HASH_SEED)
    if found is None:  # lines crafted to share hashes: each read as its own
        return text, None
    place, first = found
    first = pl.Series(np.frombuffer(first, np.bool_))
    distinct = text.filter(first)  # in order of appearance (a filter keeps the text where it is)
    if distinct.len() == text.len():
        return text, None
    return distinct, pl.Series(np.frombuffer(place, np.uint32))


def local_stamp() -> pl.Expr:
    """The log line's own stamp (`stamp`) as a naive time, `line_local` (its host's zone and offset
    are applied later: `forensics.timeline.clocks`)."""
    return pl.coalesce([pl.col("stamp").str.to_datetime(f, strict=False, time_unit="us")
                        for f in STAMP_FORMATS]).alias("line_local")


def read_lines(events: pl.DataFrame | pl.LazyFrame, profile: Profile | None = None) -> pl.DataFrame:
    """`events` with the profile's reading of each message: its own stamp as a naive time
    (`line_local`), tag, ranks, progress kind, one column per field of a progress line, HTTP
    method / path / status of access lines, health_ok, ready, event kind / track (the texts of few
    values as categories), and the request id a router sent (`rid_sent`) or an engine received
    (`rid_received`).

    Each distinct message is read once (`distinct_messages`). A progress line is read for its
    fields only; the other lines are searched for the line kinds, and the patterns that rarely
    match (line kinds, access lines) run only on the lines a cheap first pass picks out."""
    rules: LogRules = (profile or load_profile()).logs
    # Eager, not a lazy query: the streaming engine hands back columns in many chunks, and the
    # first single-chunk column added afterwards made polars copy the whole frame into one.
    frame = events.collect() if isinstance(events, pl.LazyFrame) else events
    distinct, place = distinct_messages(frame.get_column("message"))
    read = _read_distinct(distinct.alias("message").to_frame(), rules)
    # the numbers and ranks a line says by itself, read once per distinct line too: read in place,
    # the other lines masked (no copy of the progress lines out and back)
    read = read.with_columns(label_numbers(read.get_column("message"), rules.fields,
                                           read.get_column("progress").is_not_null()))
    # A handful of distinct tags (TP0 … TP7): ranks are read from those, then mapped onto every line.
    tags = read.select(pl.col("tag").unique().drop_nulls()).with_columns(
        pl.col("tag").str.extract(rf"\b{r.upper()}(\d+)\b", 1).cast(pl.Int32).alias(f"line_{r}") for r in RANKS)
    read = read.with_columns(pl.col("tag").replace_strict(tags.get_column("tag"), tags.get_column(f"line_{r}"),
                                                          default=None, return_dtype=pl.Int32).alias(f"line_{r}")
                             for r in RANKS)
    # The stamp read as a time once per distinct line, and the few-valued texts held as categories:
    # each is then gathered onto every line as 8 or 4 bytes, not as a 16-byte string view.
    read = read.with_columns(local_stamp(), *(pl.col(c).cast(pl.Categorical) for c in FEW_VALUED))
    read = read.drop("message", "stamp")  # the frame has the message already; the stamp is in line_local
    if place is not None:
        # A column no distinct line has a value in (a field this stack's lines never write, a rank
        # it has not) is null on every line: made so, not gathered — 13 of the 34 columns on the
        # 1 M reference, whose gather took 0.10 s of 0.36 s.
        counts = read.null_count().row(0, named=True)
        read = read.select(pl.lit(None, read.schema[name]).alias(name) if counts[name] == read.height
                           else pl.col(name).gather(place) for name in read.columns)
    return frame.with_columns(read)


class _Reading(NamedTuple):
    """The expressions `_read_distinct` reads messages with, made once per set of rules: building
    them (the line kinds' patterns grouped into searches) cost ~10 ms a call, a host's whole
    reading when its lines are few (a 128-host fleet: 1.3 s of its timeline)."""

    prefix: pl.Expr
    progress: pl.Expr
    dropped: frozenset[str]  # the profile's own groups of the prefix, beside stamp and tag
    rare: pl.Expr  # any of the rarely matching patterns
    notable: tuple[pl.Expr, ...]  # health_ok, ready, event, track, rid_sent, rid_received
    access: pl.Expr


def _reading_key(rules: LogRules) -> tuple:
    """What `_reading` is made from (rules themselves hold a dict, so are no cache key)."""
    return (rules.prefix, rules.progress, rules.request_sent, rules.request_received, rules.access,
            rules.health_ok, rules.ready, tuple((e.kind, e.pattern, e.track, e.layer) for e in rules.events))


@functools.lru_cache(maxsize=16)
def _reading(key: tuple) -> _Reading:
    """`_Reading` for the rules `key` stands for (`_reading_key`)."""
    prefix, progress, request_sent, request_received, access, health_ok, ready, events = key
    message = pl.col("message")
    kind = message.str.extract(progress.replace("(?P<kind>", "("), 1) if "(?P<kind>" in progress \
        else pl.when(message.str.contains(progress)).then(pl.lit("progress"))
    # the stack's own line kinds, and the layers' (the same for every stack), searched apart
    rare = [pattern for _, pattern, _, layer in events if layer is None] + [health_ok, ready, request_sent,
                                                                            request_received]
    layered = [pattern for _, pattern, _, layer in events if layer is not None]
    # The first matching rule wins: its place among the rules, then its kind and track from that place
    # (flat, not a chain of 51 nested conditions, which polars took twice as long to run).
    first = pl.coalesce([pl.when(message.str.contains(pattern)).then(pl.lit(place, pl.UInt32))
                         for place, (_, pattern, _, _) in enumerate(events)]) if events else pl.lit(None, pl.UInt32)
    places = list(range(len(events)))

    def of_rule(values: list[str | None]) -> pl.Expr:
        return first.replace_strict(places, values, default=None, return_dtype=pl.String) if events \
            else pl.lit(None, pl.String)

    notable = (message.str.contains(health_ok).alias("health_ok"), message.str.contains(ready).alias("ready"),
               of_rule([kind for kind, _, _, _ in events]).alias("event"),
               of_rule([track for _, _, track, _ in events]).alias("track"),
               message.str.extract_groups(request_sent).struct.field("rid").alias("rid_sent"),
               message.str.extract_groups(request_received).struct.field("rid").alias("rid_received"))
    return _Reading(message.str.extract_groups(prefix), kind,
                    frozenset(set(re.compile(prefix).groupindex) - {"stamp", "tag"}),
                    _any_of(message, rare, layered), notable, message.str.extract_groups(access))


def _read_distinct(messages: pl.DataFrame, rules: LogRules) -> pl.DataFrame:
    """What a message says by itself, read once per distinct message (`messages`, one column):
    stamp, tag, progress kind, access line's parts, health_ok, ready, event kind and track, the
    request ids."""
    message = pl.col("message")
    reading = _reading(_reading_key(rules))
    # The prefix's struct unnested, not two field expressions: those ran the pattern twice.
    frame = messages.with_columns(reading.prefix.alias("_prefix"), reading.progress.alias("progress")).unnest("_prefix")
    frame = frame.drop(reading.dropped)
    # A progress line is read for its numbers only, never as another kind (a lean timeline keeps
    # no progress line as notable either): the other kinds are searched among the rest.
    others = frame.get_column("progress").is_null().arg_true()
    picked = messages[others].select(reading.rare.alias("rare"),
                                     message.str.contains(" HTTP/", literal=True).alias("access"))
    columns: list[pl.Series] = []
    rows = others.gather(picked.get_column("rare").arg_true())
    columns += _spread(frame, rows, messages[rows].select(reading.notable))
    rows = others.gather(picked.get_column("access").arg_true())
    access = messages[rows].select(reading.access.alias("a")).select(
        pl.col("a").struct.field("method").alias("http_method"), pl.col("a").struct.field("path").alias("http_path"),
        pl.col("a").struct.field("status").cast(pl.Int16, strict=False).alias("http_status"))
    columns += _spread(frame, rows, access)
    return frame.with_columns(columns).with_columns(pl.col("health_ok").fill_null(False),
                                                    pl.col("ready").fill_null(False))
