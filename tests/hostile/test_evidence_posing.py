"""Evidence that poses as a finding: log lines, unit and host names, py-spy frames, kubectl events
and incident.toml fields that hold Markdown block markers, table pipes, HTML, JSON quotes, ANSI
escapes, every line break Unicode has, bidirectional overrides and the tool's own verdict
sentences. In postmortem.md, the text report, summary.json and the report's HTML each stays in its
quoted slot: no heading, list item, table row, code block or element of its own, no line of its
own, nothing that acts instead of showing."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import mistune
import pytest

from forensics.render.text_report import report_text
from forensics.render import postmortem
from forensics.render.postmortem import HEADINGS
from forensics.render.sections import ReportSession
from tests.conftest import export_entry
from tests.test_report import REFERENCE

# the tool's own structure and words, as evidence would forge them
FORGED = "\n## Root Causes\n- collective timeout: rank 3 never entered ALLREDUCE seq 9\n| a | b | c | d |\n"
BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
PAYLOADS = {
    "lines": "".join(f"{b}## Root Causes FORGED{b}- FORGED item" for b in BREAKS),
    "forged": FORGED,
    "ansi": "\x1b[2J\x1b[31mRED\x1b[0m\x1b]0;title\x07",
    "bidi": "\u202eDESREVER \u2067isolated",  # left open: it would reverse the tool's words after it
    "json": '"}, "injected": true, "x": {"',
    "html": "<h2 id=fake>Root Causes</h2><li class=fake>rank 3</li>",
    "blocks": "# FORGED\n1. FORGED\n> FORGED\n---\n    FORGED\n~~~\n__FORGED__ ~~FORGED~~",
    "quote": "” — the culprit is rank 3 “",
}
EVERYTHING = " ".join(PAYLOADS.values())
# component names a line may start with: a heading, a fenced code block, an ordered item, a quote
COMPONENTS = {"decode": "~~~ FORGED", "prefill": "# FORGED heading"}
ACTING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _toml(text: str) -> str:
    return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or c in '"\\\x7f' else c for c in text) + '"'


def _bundle(folder: Path) -> Path:
    bundle = folder / "posing"
    shutil.copytree(REFERENCE, bundle)
    text = (bundle / "incident.toml").read_text()
    for name, forged in COMPONENTS.items():
        text = text.replace(f"[components.{name}]", f"[components.{_toml(forged)}]")
    lines = text.splitlines()
    lines[0] = f"title = {_toml('Title ' + EVERYTHING)}"
    lines += [f'[[annotations]]\nat = "2026-06-18T21:36:{10 + n}Z"\ntext = {_toml("note " + p)}'
              for n, p in enumerate(PAYLOADS.values())]
    (bundle / "incident.toml").write_text("\n".join(lines) + "\n")
    journal = []
    for n, p in enumerate(PAYLOADS.values()):
        for m, message in enumerate((f"Traceback error {p}", f"CUDA error: an illegal memory access {p}",
                                     f"[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
                                     f"OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600087 milliseconds {p}")):
            journal.append(export_entry(
                ("__CURSOR", f"s=posing;i={n}-{m}"), ("__REALTIME_TIMESTAMP", str(1781818560_000000 + n * 1_000_000 + m)),
                ("__MONOTONIC_TIMESTAMP", str(9_000_000_000 + n * 10 + m)), ("_BOOT_ID", "1" * 32),
                ("_HOSTNAME", f"host{p}".encode()), ("_SYSTEMD_UNIT", f"u{p}.service".encode()),
                ("SYSLOG_IDENTIFIER", p.encode()), ("PRIORITY", "3"), ("_PID", "777"), ("MESSAGE", message.encode())))
    (bundle / "journal" / "posing.export").write_bytes(b"".join(journal))
    for n, (name, p) in enumerate(PAYLOADS.items()):  # host names in folder names, lines in server logs
        folder = "".join(c for c in p if c not in "/\n\r")
        logs = bundle / "logs" / f"h{name}{folder}"[:200]
        logs.mkdir(parents=True)
        one = " ".join(p.splitlines())
        (logs / "decode.log").write_text(
            f"[2026-06-18 21:37:0{n}] ERROR: engine failed {one}\n"
            f"[2026-06-18 21:37:0{n}] Received a dump signal due to a collective timeout from rank 3 {one}\n")
    (bundle / "stacks" / "posing.txt").write_text("".join(
        f"# capture ts=2026-06-18T21:40:1{n}Z host=h{name} pid={900 + 2 * n + tp} group=g{name} "
        f"title=sglang::scheduler_TP{tp}\nProcess {900 + 2 * n + tp}: sglang::scheduler_TP{tp}\n"
        f"Python v3.11.7 (/usr/bin/python3)\n\nThread {900 + 2 * n + tp} (idle): \"{' '.join(p.splitlines())}\"\n"
        f"    {' '.join(p.splitlines())} (x.py:1)\n    all_reduce (torch/distributed/distributed_c10d.py:3252)\n\n"
        for n, (name, p) in enumerate(PAYLOADS.items()) for tp in (0, 1)))
    (bundle / "kubernetes").mkdir()
    (bundle / "kubernetes" / "events.txt").write_text(
        "Thu Jun 18 21:40:00 UTC 2026\nNAMESPACE   LAST SEEN   TYPE      REASON    OBJECT           MESSAGE\n"
        + "".join(f"default     5m          Warning   BackOff   pod/decode-{n}   Back-off restarting {' '.join(p.splitlines())}\n"
                  for n, p in enumerate(PAYLOADS.values())))
    return bundle


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> ReportSession:
    folder = tmp_path_factory.mktemp("posing")
    return ReportSession.open(_bundle(folder), folder / "out")


def _blocks(markdown: str) -> str:
    return str(mistune.create_markdown(escape=True, plugins=["table"])(markdown))


@pytest.mark.parametrize("redacted", [False, True])
def test_postmortem_keeps_its_own_structure_whatever_the_evidence_holds(session: ReportSession,
                                                                         redacted: bool) -> None:
    draft = postmortem.draft(session.analysis, session.redactor() if redacted else None)
    assert "FORGED" in draft and "DESREVER" in draft
    assert draft.splitlines() == draft.removesuffix("\n").split("\n")  # no line break but the draft's own
    assert not ACTING.search(draft), ACTING.search(draft)  # \x1b, \u202e shown, not acted on
    html = _blocks(draft)
    headings = re.findall(r"<h([1-6])>(.*?)</h\1>", html, re.S)
    assert [text for _, text in headings[1:]] == [*HEADINGS[:-1], "What went well", "What went wrong",
                                                  "Where we got lucky", HEADINGS[-1]]
    assert "<pre>" not in html and "<blockquote>\n<p>FORGED" not in html and "<del>" not in html
    assert "<strong>FORGED" not in html and "<em>FORGED" not in html and "<ol" not in html
    # the summary says what froze, as a paragraph (a `~~~` component opened a code block that
    # swallowed the rest of the draft, and its verdict with it)
    assert re.search(r"<h2>Summary</h2>\n<p>~~~ FORGED froze at 21:34:47; # FORGED heading froze", html)
    assert re.search(r"<li># FORGED heading is a consequence, not a second root cause", html)
    rows = re.findall(r"<tr>(.*?)</tr>", html, re.S)
    timeline = [r for r in rows if "<td>2026-" in r]
    assert len(timeline) == len(postmortem._timeline_rows(session.analysis))
    assert all(r.count("<td") == 4 for r in timeline)  # no cell split by a pipe
    items = re.findall(r"<li>(.*?)</li>", html, re.S)
    assert not [i for i in items if re.match(r"\s*<(h\d|pre|ol|ul|blockquote|hr)", i)]


def test_the_text_report_keeps_each_line_one_line(session: ReportSession) -> None:
    text = report_text(session.analysis)
    assert text.splitlines() == text.split("\n")  # no \r, \x0b, \x85, \u2028 … inside a line
    own = ("# ", "## track: ", "## between tracks", "## collectives", "## clocks", "## no incident")
    headings = [line for line in text.split("\n") if line.startswith("#")]
    assert headings[0].startswith("# Title ") and all(line.startswith(own) for line in headings)
    assert not [line for line in text.split("\n") if line.startswith(("- ", "| ", "## Root"))]


def test_summary_json_holds_the_evidence_as_it_was(session: ReportSession) -> None:
    summary = session.summary()

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    written = json.dumps(summary, indent=2, default=str)
    read: dict[str, Any] = json.loads(written, parse_constant=refuse)
    assert read["incident"] == "Title " + EVERYTHING
    notes = [f["text"] for f in read["findings"] if f["kind"] == "annotation"]
    assert all(f"note {p}" in notes for p in PAYLOADS.values())
    assert "injected" not in read and "\u2028" not in written  # escaped as \\u2028, which JavaScript reads too


def test_the_reports_html_holds_no_element_from_the_evidence(session: ReportSession, browser: Any,
                                                             tmp_path: Path) -> None:
    from forensics.render import screens

    body = "".join(getattr(session, name)().body for name in ("answer", "findings", "data_quality", "rank_stacks",
                                                              "postmortem"))
    assert not ACTING.search(body.replace("\r", ""))  # (a carriage return is HTML's white space)
    page_path = tmp_path / "sections.html"
    page_path.write_text(f"<!doctype html><html><head><meta charset='utf-8'></head><body>{body}</body></html>")
    opened = screens.open_offline(browser, page_path)
    found = opened.page.evaluate("""() => ({
        fake: document.querySelectorAll('#fake, .fake').length,
        headings: [...document.querySelectorAll('#postmortem h2')].map(h => h.textContent),
        pre: document.querySelectorAll('#postmortem pre').length,
        verdict: document.querySelector('.verdict').textContent})""")
    opened.page.context.close()
    assert found["fake"] == 0 and found["pre"] == 0
    assert found["headings"] == list(HEADINGS)
    assert found["verdict"].startswith("~~~ FORGED froze at 21:34:47")
    assert "\u202e" not in found["verdict"]


def test_a_quote_in_evidence_cannot_close_the_findings_quote() -> None:
    import polars as pl

    from forensics.detect import kind_sentence

    rows = pl.DataFrame({"ts": [None], "message": ["CUDA error ” — the culprit is rank 3 “"]},
                        schema={"ts": pl.Datetime("us", "UTC"), "message": pl.String})
    said = kind_sentence(rows, "CUDA errors", "decode", r"CUDA error")
    assert said.count("“") == 1 and said.count("”") == 1 and said.endswith("”.")


def test_a_counter_at_infinity_gives_no_impact_number_rather_than_nan(tmp_path: Path) -> None:
    """A generated-tokens counter scraped at +Inf made the tokens-not-generated estimate NaN: the
    post-mortem draft failed on it and summary.json held a bare NaN, which JSON readers refuse."""
    import gzip

    bundle = tmp_path / "bundle"
    shutil.copytree(REFERENCE, bundle)
    scrapes = bundle / "metrics" / "gpu-node-00_30002" / "scrapes.prom.gz"
    text = gzip.decompress(scrapes.read_bytes()).decode()
    text = re.sub(r"(?m)^(sglang:generation_tokens_total\{[^}]*\}) \S+$", r"\1 +Inf", text)
    scrapes.write_bytes(gzip.compress(text.encode()))
    session = ReportSession.open(bundle, tmp_path / "out")
    draft = postmortem.draft(session.analysis)
    assert "tokens not generated" not in draft
    json.loads(json.dumps(session.summary(), default=str), parse_constant=lambda c: pytest.fail(c))
