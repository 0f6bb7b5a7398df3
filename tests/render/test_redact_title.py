"""Redaction leaves the user's own words alone (issue 53: "prefill-0" became "host-2" in the title
the user wrote in incident.toml), while the same host name elsewhere in the evidence is replaced."""

from __future__ import annotations

from forensics.render.redact import Redactor

TITLE = "prefill-0 wedge after KV-transfer aborts"


def test_the_kept_title_stays_and_the_host_elsewhere_is_redacted() -> None:
    redact = Redactor(hosts=["prefill-0"], keep=[TITLE])
    assert redact(TITLE) == TITLE
    line = f"{TITLE}: prefill-0 logged Decode batch at 21:34:47 from 10.0.0.5"
    assert redact(line) == f"{TITLE}: host-1 logged Decode batch at 21:34:47 from ip-1"
    assert redact.counts() == {"host": 1, "ip": 1}


def test_without_keep_the_title_is_evidence_like_any_text() -> None:
    assert Redactor(hosts=["prefill-0"])(TITLE) == "host-1 wedge after KV-transfer aborts"


def test_a_structure_keeps_the_title_wherever_it_is() -> None:
    redact = Redactor(hosts=["prefill-0"], keep=[TITLE])
    summary = {"incident": TITLE, "findings": [{"text": "prefill-0 froze"}]}
    assert redact.structure(summary) == {"incident": TITLE, "findings": [{"text": "host-1 froze"}]}
