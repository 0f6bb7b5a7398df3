"""Escaping: markup from logs is text in HTML and in plotly's pseudo-HTML."""

from forensics.render.redact import Redactor
from forensics.render.text import hover, safe

PAYLOAD = '<script>alert(1)</script><img src=x onerror="alert(2)"> <｜DSML｜invoke name="get_weather">'


def test_safe_escapes_every_tag_and_quote() -> None:
    out = safe(PAYLOAD)
    assert "<" not in out and ">" not in out and '"' not in out
    assert out.startswith("&lt;script&gt;alert(1)&lt;/script&gt;")
    assert "&lt;｜DSML｜invoke name=&quot;get_weather&quot;&gt;" in out


def test_hover_escapes_wraps_and_adds_only_br() -> None:
    out = hover(PAYLOAD + " " + "x" * 250, width=40)
    assert out.replace("<br>", "").count("<") == 0
    assert out.count("<br>") >= 6


def test_hover_cuts_long_text_and_says_so() -> None:
    out = hover("\n".join(f"line {n}" for n in range(30)), max_lines=5)
    assert out.count("<br>") == 4 and out.endswith("… (26 more lines)")


def test_redaction_happens_before_escaping() -> None:
    assert safe("<10.0.0.1>", Redactor()) == "&lt;ip-1&gt;"


def test_rank_lanes_sort_by_number_not_as_text() -> None:
    """Issue 53: TP10 was drawn before TP8."""
    from forensics.render.lanes import lane_order as _lane_order

    lanes = ["n1 · decode · TP10", "n1 · decode · TP8", "n1 · decode · TP9", "n10 · decode · TP0", "n2 · decode · TP0"]
    assert _lane_order(lanes, set()) == ["n1 · decode · TP8", "n1 · decode · TP9", "n1 · decode · TP10",
                                         "n2 · decode · TP0", "n10 · decode · TP0"]
    assert _lane_order(lanes, {"n10"})[0] == "n10 · decode · TP0"  # the host at fault first
