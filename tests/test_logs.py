"""Progress lines' numbers read in one pass (`forensics.timeline.logs.label_numbers`): the reading rules a
profile author relies on, checked against the regular expressions they replace on generated lines."""

from __future__ import annotations

import dataclasses
import random
import re

import polars as pl
import pytest

from forensics.timeline.logs import distinct_messages, label_numbers, read_lines
from forensics.profiles import LogEvent, load_profile, matches_nothing

FIELDS = {"running": ("#running-req",), "usage": ("token usage", "full token usage"), "swa": ("swa token usage",),
          "hit": ("cache hit rate",), "gen": ("gen throughput (token/s)",)}


def read(*lines: str | None) -> list[dict]:
    return label_numbers(pl.Series("message", lines, dtype=pl.String), FIELDS).to_dicts()


def test_each_label_gives_its_number_and_a_missing_one_null() -> None:
    row, = read("[2026-06-18 21:34:47 TP0] Decode batch. #running-req: 12, token usage: 0.44, "
                "gen throughput (token/s): 1234.50, ")
    assert row == {"running": 12.0, "usage": 0.44, "swa": None, "hit": None, "gen": 1234.5}


def test_a_label_counts_only_at_the_start_or_after_punctuation_and_a_space() -> None:
    swa_first, = read("Prefill batch, swa token usage: 0.20, full token usage: 0.10, cache hit rate: 20.00%")
    assert (swa_first["usage"], swa_first["swa"], swa_first["hit"]) == (0.10, 0.20, 20.0)
    assert read("token usage: 0.5")[0]["usage"] == 0.5  # the message starts with it
    inside_a_word, glued = read("xswa token usage: 0.3", "batch.#running-req: 4")
    assert inside_a_word["usage"] is None and inside_a_word["swa"] is None
    assert glued["running"] is None


@pytest.mark.parametrize("text, value", [
    ("7", 7.0), ("-3.5", -3.5), ("0.1", 0.1), ("1.", 1.0), (".5", 0.5), ("12abc", 12.0),
    ("1.2.3", None), ("abc", None), (".", None), ("-", None), ("", None),
    ("123456789012345678901234567890", 123456789012345678901234567890.0),  # too long for the exact path
    ("0.1234567890123456789", 0.1234567890123456789),
])
def test_numbers_read_as_python_reads_them(text: str, value: float | None) -> None:
    assert read(f"x, #running-req: {text}, y")[0]["running"] == value


def test_the_first_occurrence_wins_and_nulls_and_empty_input_are_kept() -> None:
    first, missing, empty = read("#running-req: 1, #running-req: 2", None, "")
    assert first["running"] == 1.0
    assert missing == empty == {name: None for name in FIELDS}
    assert label_numbers(pl.Series("message", [], dtype=pl.String), FIELDS).shape == (0, len(FIELDS))


def test_a_slice_of_a_column_reads_its_own_rows() -> None:
    lines = pl.Series("message", [f"#running-req: {i}, long enough to be stored out of line" for i in range(50)])
    assert label_numbers(lines.slice(7, 5), FIELDS).get_column("running").to_list() == [7.0, 8.0, 9.0, 10.0, 11.0]
    assert label_numbers(lines.gather([40, 3]), FIELDS).get_column("running").to_list() == [40.0, 3.0]


def test_lines_masked_out_are_not_read_and_a_slice_keeps_its_mask_in_place() -> None:
    lines = pl.Series("message", [None if i == 9 else f"#running-req: {i}, long enough to be stored out of line"
                                  for i in range(50)])
    odd = pl.Series([i % 2 == 1 for i in range(50)])
    assert label_numbers(lines, FIELDS, odd).get_column("running").to_list() == [
        float(i) if i % 2 and i != 9 else None for i in range(50)]
    assert label_numbers(lines.slice(7, 5), FIELDS, odd.slice(7, 5)).get_column("running").to_list() == [
        7.0, None, None, None, 11.0]


def test_same_numbers_as_one_regular_expression_per_field_on_random_batch_lines() -> None:
    """The profile's fields were regular expressions before; on lines made of SGLang's parts in
    random order and forms, the one-pass reading gives what they gave."""
    fields = load_profile().logs.fields
    patterns = {name: f"(?:^|[[:punct:]] )(?:{'|'.join(re.escape(label) for label in labels)}): (-?[0-9.]*)"
                for name, labels in fields.items()}
    chance = random.Random(18)
    lines = []
    for _ in range(3000):
        parts = [f"{chance.choice(labels)}: {chance.choice(['0', '12', '0.44', '20.00%', '4594.01', '1.2.3', 'x'])}"
                 for labels in chance.sample(list(fields.values()), chance.randint(0, len(fields)))]
        lines.append(chance.choice(["[2026-06-18 21:34:47 TP0] ", "", "[2025-01-10 08:02:11.123 DP0 TP3 EP3] "])
                     + chance.choice(["Decode batch. ", "Prefill batch, ", ""]) + ", ".join(parts)
                     + chance.choice(["", ", "]))
    frame = pl.DataFrame({"message": lines})
    expected = frame.select(
        pl.col("message").str.extract(pattern, 1).cast(pl.Float64, strict=False).alias(name)
        for name, pattern in patterns.items())
    assert label_numbers(frame.get_column("message"), fields).equals(expected)


def test_read_lines_puts_the_numbers_on_progress_lines_only() -> None:
    frame = pl.DataFrame({"message": ["[2026-06-18 21:34:47 TP0] Decode batch. #running-req: 12, #queue-req: 3",
                                      "some other line: #running-req: 5"]})
    read_back = read_lines(frame)
    assert read_back.get_column("running_req").to_list() == [12.0, None]
    assert read_back.get_column("queue_req").to_list() == [3.0, None]


def test_distinct_messages_are_each_line_once_in_order_of_first_appearance() -> None:
    """A null line reads as the empty one; every row maps back to a line equal to its own."""
    messages = pl.Series("message", ["a", "b", "a", None, "", "b", "a long line of more than twelve bytes",
                                     "a long line of more than twelve bytes"])
    distinct, place = distinct_messages(messages)
    assert distinct.to_list() == ["a", "b", "", "a long line of more than twelve bytes"]
    assert place is not None and place.to_list() == [0, 1, 0, 2, 2, 1, 3, 3]
    # a slice reads its own rows; a column with no line twice has nothing to map back
    distinct, place = distinct_messages(messages.slice(4, 3))
    assert distinct.to_list() == ["", "b", "a long line of more than twelve bytes"] and place is None


def test_distinct_messages_across_chunks_and_lines_equal_but_for_one_byte() -> None:
    """Lines that differ in one byte anywhere (first, middle, last, or only in length) are
    different lines, also when they come in different chunks of the column."""
    base = "x" * 40
    variants = [base, "y" + base[1:], base[:20] + "y" + base[21:], base[:-1] + "y", base + "x", base[:-1]]
    chunks = [pl.Series("message", variants), pl.Series("message", list(reversed(variants)))]
    messages = pl.concat(chunks, rechunk=False)
    assert messages.n_chunks() == 2
    distinct, place = distinct_messages(messages)
    assert distinct.to_list() == variants
    assert place is not None and distinct.gather(place).to_list() == messages.to_list()


def test_lines_that_differ_only_in_their_last_bytes_are_told_apart_by_the_hash() -> None:
    """Every bit of a line reaches the hash table's slot: lines alike but for their last bytes do
    not pile into the same slots (which would make the pass give up and read every row)."""
    for length in (8, 24, 40):
        lines = [f"{'a' * (length - 3)}{i:03d}" for i in range(1000)] * 5
        distinct, place = distinct_messages(pl.Series("message", lines))
        assert place is not None and distinct.len() == 1000


def test_reading_each_distinct_line_once_reads_as_reading_every_line() -> None:
    """`read_lines` over a column whose lines repeat gives, row for row, what reading each row
    alone gives (a frame of one row has no line twice)."""
    profile = load_profile("sglang")
    lines = [s.line for s in profile.logs.samples] + ["", "plain line",
                                                      "INFO:     10.0.0.1:4 - \"GET /health HTTP/1.1\" 200 OK"]
    rows = random.Random(7).choices(lines, k=200) + [None]
    frame = pl.DataFrame({"message": rows}, schema={"message": pl.String})
    together = read_lines(frame, profile)
    alone = pl.concat([read_lines(frame.slice(i, 1), profile) for i in range(frame.height)], how="vertical_relaxed")
    assert distinct_messages(frame.get_column("message"))[1] is not None  # the lines do repeat
    assert together.equals(alone.select(together.columns))


def test_a_progress_line_is_read_for_its_numbers_only_never_as_another_kind() -> None:
    """A lean timeline keeps no progress line as a notable one (`host_read._notable`): the full
    reading gives a progress line no other kind either, whatever words it carries."""
    profile = load_profile("sglang")
    odd = ("[2026-06-18 21:34:47 TP0] Decode batch. #running-req: 12, CUDA out of memory, "
           "\"GET /health HTTP/1.1\" 200")
    read_back = read_lines(pl.DataFrame({"message": [odd, "CUDA out of memory. Tried to allocate 2.00 GiB"]}), profile)
    assert read_back.get_column("progress").to_list() == ["Decode", None]
    assert read_back.get_column("running_req").to_list() == [12.0, None]
    assert read_back.get_column("event").to_list()[0] is None and read_back.get_column("event").to_list()[1]
    assert read_back.get_column("http_status").to_list() == [None, None]
    assert read_back.get_column("health_ok").to_list() == [False, False]


def test_an_empty_or_missing_line_is_no_line_of_a_kind_the_stack_never_writes() -> None:
    """SGLang's profile has no request-sent line (`(?P<rid>$^)`): `$^` matches an empty string, so
    an empty message was read as a request sent with id "" (and, in the combined search of line
    kinds, the pattern made the regex engine read every line whole)."""
    profile = load_profile("sglang")
    assert profile.logs.request_sent == "(?P<rid>$^)"
    read_back = read_lines(pl.DataFrame({"message": ["", None, "INFO:     10.0.0.1:4 - \"GET /health HTTP/1.1\" 200 OK"]},
                                        schema={"message": pl.String}), profile)
    assert read_back.get_column("rid_sent").to_list() == [None, None, None]
    assert read_back.get_column("health_ok").to_list() == [False, False, True]


@pytest.mark.parametrize(("pattern", "nothing"), [
    ("$^", True), ("(?P<rid>$^)", True), ("(?P<method>$^)(?P<path>)(?P<status>)", True),
    ("(?P<rid>[0-9]+)", False), ("$^|ready", False), ("a$^", False), ("", False),
])
def test_the_pattern_for_lines_a_stack_never_writes_is_known_in_every_spelling(pattern: str, nothing: bool) -> None:
    assert matches_nothing(pattern) is nothing


@pytest.mark.parametrize(("pattern", "branches"), [
    ("a", 1), ("a|b", 2), (r"a\|b", 1), ("a(b|c)d", 1), ("[|]|x", 2), (r"(?m:^Killed$)| Killed  ", 2),
    (r"x[\]|]y|z", 2),
])
def test_top_level_branches_are_counted_as_the_regex_grammar_reads_them(pattern: str, branches: int) -> None:
    from forensics.timeline.logs import top_level_branches

    assert top_level_branches(pattern) == branches


@pytest.mark.parametrize(("pattern", "literal"), [
    ("abc", True), (r"\(PCI", True), (r"^\[x", True), (r"(?:Warning|Normal)\s+Evicted\b", True),
    (r"(?m:^Killed$)| Killed  ", True), (r"[Tt]ransfer failed", True), (r"x[\]|]y|z", True),
    (r"\bFailedScheduling\b|\b[0-9]{1,6}/[0-9]{1,6} nodes", False), (r"(?:a|[0-9])x", False), (r"(?:ab)?c", False),
    (r"\d+x", False), (r"a?b", False), (r".*x", False), (r"(?P<rid>[0-9]+)", False), ("", False),
])
def test_a_pattern_leads_with_a_literal_as_the_regex_grammar_reads_it(pattern: str, literal: bool) -> None:
    """A search of many alternatives keeps the regex engine's literal search only when each begins
    with a literal: one that begins with a class, an optional atom or nothing does not."""
    from forensics.timeline.logs import leads_with_literal

    assert leads_with_literal(pattern) is literal


def test_an_alternative_without_a_leading_literal_is_searched_alone() -> None:
    """Kubernetes' FailedScheduling kind has an alternative that begins with a digit class: it is
    a search of its own, its literal alternative stays in a run with the others."""
    from forensics.timeline.logs import _searches

    runs = _searches(["alpha", r"\bFailedScheduling\b|\b[0-9]{1,6}/[0-9]{1,6} nodes are available: ", "beta"])
    assert runs == [["alpha", r"\bFailedScheduling\b", "beta"], [r"\b[0-9]{1,6}/[0-9]{1,6} nodes are available: "]]


@pytest.mark.parametrize("stack", ["sglang", "vllm"])
def test_searching_the_line_kinds_in_runs_finds_what_each_pattern_finds(stack: str) -> None:
    """The line kinds are searched in several runs (`MOST_BRANCHES`): a line is picked exactly when
    some pattern matches it, as Python's `re` reads each pattern alone — on every real sample line
    of the stack and the layers, and on lines that are none of them."""
    from forensics.profiles import layers
    from forensics.timeline.logs import MOST_BRANCHES, _any_of, _searches, top_level_branches

    rules = load_profile(stack).logs
    stack_kinds = [e.pattern for e in rules.events if e.layer is None]
    layered = [e.pattern for e in rules.events if e.layer is not None]
    assert len(_searches(layered)) > 1  # the layers' kinds do not fit one search
    assert all(sum(map(top_level_branches, run)) <= MOST_BRANCHES or len(run) == 1 for run in _searches(layered))
    lines = [s.line for s in rules.samples] + [s.line for layer in layers() for s in layer.samples] + [
        "", "plain line", "INFO:     127.0.0.1:1 - \"GET /metrics HTTP/1.1\" 200 OK"]
    found = pl.DataFrame({"message": lines}).select(_any_of(pl.col("message"), stack_kinds, layered)).to_series()
    every = [p for p in stack_kinds + layered if not matches_nothing(p)]
    assert found.to_list() == [any(re.search(p, line) for p in every) for line in lines]


def test_the_first_rule_in_the_profiles_order_gives_a_line_its_kind_and_track() -> None:
    """A line two line kinds match is of the kind listed first in the profile (the rule its
    `[[logs.events]]` order gives), with that rule's track; a line only the second matches is of
    the second; the order is the profile's, not the patterns' position in the line."""
    profile = load_profile("sglang")
    first = LogEvent(kind="first_kind", pattern="boom", track="track_one", text="", annotation=None)
    second = LogEvent(kind="second_kind", pattern="bo+m|kaboom", track="track_two", text="", annotation=None)
    rules = dataclasses.replace(profile.logs, events=(first, second, *profile.logs.events))
    ordered = dataclasses.replace(profile, logs=rules)
    lines = ["kaboom, then boom", "booom", "kaboom", "nothing here"]
    read_back = read_lines(pl.DataFrame({"message": lines}), ordered)
    assert read_back.get_column("event").to_list() == ["first_kind", "second_kind", "first_kind", None]
    assert read_back.get_column("track").to_list() == ["track_one", "track_two", "track_one", None]
