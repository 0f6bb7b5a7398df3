"""The secrets known by their shape (profiles/redact/secrets.toml): each entry's published example
(its `sample`, cited in `origin`) is matched whole by its own pattern and leaves a log line only as a
pseudonym, whatever precedes or follows it; a pattern that does not compile is refused by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forensics.errors import ForensicsError
from forensics.render.redact import Redactor, secret_shapes

SHAPES = secret_shapes()


def test_every_shape_cites_where_its_sample_comes_from() -> None:
    assert len({s["name"] for s in SHAPES}) == len(SHAPES)
    for shape in SHAPES:
        assert shape["sample"].strip() and shape["origin"].strip(), shape["name"]


@pytest.mark.parametrize("shape", SHAPES, ids=[s["name"] for s in SHAPES])
def test_a_sample_is_its_own_patterns_whole_match(shape: dict[str, str]) -> None:
    found = re.compile(shape["pattern"], re.S).search(shape["sample"])
    assert found and found.group(0).strip() == shape["sample"].strip()


@pytest.mark.parametrize("shape", SHAPES, ids=[s["name"] for s in SHAPES])
def test_a_sample_in_a_log_line_leaves_only_a_pseudonym(shape: dict[str, str]) -> None:
    line = f"2026-06-18 21:34:47 worker: loaded credentials\n{shape['sample']}\nthen served"
    redacted = Redactor()(line) or ""
    assert "secret-1" in redacted
    for part in shape["sample"].split():
        assert len(part) < 8 or part not in redacted, (shape["name"], part)


def test_a_pattern_that_does_not_compile_is_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "secrets.toml"
    bad.write_text("[[secret]]\nname = 'broken'\npattern = '(unclosed'\nsample = 'x'\norigin = 'here'\n")
    with pytest.raises(ForensicsError, match="secret 'broken'"):
        secret_shapes(bad)
