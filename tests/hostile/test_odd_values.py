"""Values no real tool writes but a damaged or forged file holds, each of which once ended the whole
ingest in a traceback (found by a probe of every reader, 2026-12-07): a zone offset of a day, a time
in year 1 east of UTC or 9999 west of it, a lone surrogate escaped in JSON, a pid or line past its
integer, an age of 3,000 years or of 5,000 digits. Each is now read as what it is — no time, no pid,
a quarantined record — and the input's other records are kept. A reader that still fails on
something unforeseen fails alone: its input says so, the other inputs are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.case.build import read_bundle

PYSPY_HEAD = (b"# capture ts=2026-06-18T21:40:10.000Z host=gpu-node-00 pid=29878 group=prefill "
              b"title=sglang::scheduler_TP0\n")
JSON_LINE = b'{"MESSAGE":"%s","__REALTIME_TIMESTAMP":"175000000000000%d","_HOSTNAME":"h"}\n'
EVENTS_HEAD = (b"Sat Feb 21 21:00:31 UTC 2026\n$ kubectl get event -A\n"
               b"NAMESPACE     LAST SEEN   TYPE      REASON             OBJECT                         MESSAGE\n")
STATUS = (b"\xe2\x97\x8f sglang.service - SGLang\n     Loaded: loaded (/etc/systemd/system/sglang.service; enabled)\n"
          b"     Active: active (running) since %s; 1h ago\n   Main PID: %s (python)\n\n%s host python[123]: hello\n")
PROMETHEUS = b"# TYPE m gauge\nm 3\n"

# name: (folder in the bundle, file name, bytes, a reason a quarantine row must give, or None)
ODD = {
    "capture header with an offset of 24 h": (
        "metrics/node_30000", "a.prom", b"# capture ts=2026-06-18T21:40:10+24:00 host=h port=30000\n" + PROMETHEUS, None),
    "capture header in year 1 east of UTC": (
        "metrics/node_30000", "a.prom", b"# capture ts=0001-01-01T00:00:00+01:00 host=h port=30000\n" + PROMETHEUS, None),
    "capture header in year 9999 west of UTC": (
        "metrics/node_30000", "a.prom", b"# capture ts=9999-12-31T23:59:59-01:00 host=h port=30000\n" + PROMETHEUS, None),
    "file name with an offset of 25 h": ("metrics/node_30000", "2026-06-18T21-40-10+2500.prom", PROMETHEUS, None),
    "file name in year 1 east of UTC": ("metrics/node_30000", "0001-01-01T00-00-00+0100.prom", PROMETHEUS, None),
    "JSON key a lone surrogate": (
        "journal", "a.json", JSON_LINE % (b"one", 0) + b'{"\\ud800":"x","MESSAGE":"hi","__REALTIME_TIMESTAMP":"1"}\n'
        + JSON_LINE % (b"two", 2), "invalid field name"),
    "JSON value a lone surrogate, beside a null": (
        "journal", "a.json", b'{"MESSAGE":"\\udc00","_X":null,"__REALTIME_TIMESTAMP":"1750000000000000"}\n'
        + JSON_LINE % (b"two", 2), "field MESSAGE holds a lone surrogate ('\\udc00')"),
    "JSON value a lone surrogate, read fast": (
        "journal", "a.json", JSON_LINE % (b"\\udc00", 0) + JSON_LINE % (b"two", 2),
        "field MESSAGE holds a lone surrogate ('\\udc00')"),
    "JSON pretty-printed, a lone surrogate": (
        "journal", "a.json", b'{\n"MESSAGE":"\\ud800", "__REALTIME_TIMESTAMP":"1750000000000000"}\n',
        "field MESSAGE holds a lone surrogate ('\\ud800')"),
    "py-spy process pid of 2**63": (
        "stacks", "round-1.txt", PYSPY_HEAD + b"Process 9223372036854775808: sglang::scheduler_TP0\n"
        b"Python v3.11.7 (/usr/bin/python3.11)\n\nThread 29878 (idle): \"MainThread\"\n    on_idle (a.py:80)\n", None),
    "py-spy JSON frame line of 3e9": (
        "stacks", "round-1.json", PYSPY_HEAD + b'[{"pid":29878,"thread_id":1,"os_thread_id":29878,"active":false,'
        b'"owns_gil":false,"frames":[{"name":"f","filename":"a.py","short_filename":"a.py","line":3000000000,'
        b'"locals":null,"is_entry":false}]}]\n', None),
    "kubectl age of 3,000 years": (
        "kubernetes", "events.txt", EVENTS_HEAD + b"kube-system   3000y   Warning   FailedScheduling   pod/c-1   no nodes\n",
        None),
    "kubectl age of 10**14 years": (
        "kubernetes", "events.txt",
        EVENTS_HEAD + b"kube-system   99999999999999y   Warning   FailedScheduling   pod/c-1   no nodes\n", None),
    "kubectl age of 5,000 digits": (
        "kubernetes", "events.txt",
        EVENTS_HEAD + b"kube-system   " + b"9" * 5000 + b"s   Warning   FailedScheduling   pod/c-1   no nodes\n", None),
    "kubectl capture date in year 1": (
        "kubernetes", "events.txt", EVENTS_HEAD.replace(b"Sat Feb 21 21:00:31 UTC 2026", b"Mon Jan  1 00:00:01 UTC 0001")
        + b"kube-system   5m   Warning   FailedScheduling   pod/c-1   no nodes\n", None),
    "kubernetes event first seen in year 1 east of UTC, last in 9999 west of it (a YAML time)": (
        "kubernetes", "event.yaml", b'apiVersion: v1\nkind: Event\nmetadata:\n  name: e\n  namespace: default\n'
        b'firstTimestamp: "0001-01-01T00:00:00+01:00"\nlastTimestamp: 9999-12-31T23:59:59-01:00\nreason: BackOff\n'
        b'message: restarting failed container\ninvolvedObject:\n  kind: Pod\n  name: p\n  namespace: default\n'
        b'type: Warning\n', None),
    "systemctl status active since year 1 east of UTC": (
        "logs", "status.txt", STATUS % (b"Mon 0001-01-01 00:00:00 +0100", b"123", b"Jan 01 00:00:02"), None),
    "systemctl status main pid of 23 digits": (
        "logs", "status.txt", STATUS % (b"Mon 2026-06-18 21:00:00 UTC", b"9" * 23, b"Jun 18 21:00:02"), None),
}


@pytest.mark.parametrize("name", ODD)
def test_an_odd_value_is_read_as_what_it_is_and_ends_nothing(name: str, tmp_path: Path) -> None:
    folder, file_name, data, reason = ODD[name]
    (tmp_path / "bundle" / folder).mkdir(parents=True)
    (tmp_path / "bundle" / folder / file_name).write_bytes(data)
    frames, manifest = read_bundle(tmp_path / "bundle")
    (entry,) = manifest["inputs"]
    assert "reader failed" not in (entry.get("error") or ""), entry["error"]
    assert entry["records"] == entry["parsed"] + entry["quarantined"] and entry["parsed"] >= 1 - (reason is not None)
    reasons = frames["quarantine"].get_column("reason").to_list()
    if reason is not None:
        assert any(reason in r for r in reasons), reasons
        if b"two" in data:  # the record beside the odd one is read
            assert "two" in frames["events"].get_column("message").to_list()


def test_a_reader_failing_on_something_unforeseen_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault in one reader (here made to happen: a real one is a bug not yet met) is that input's
    error, named with its type; the bundle's other inputs are read and the run goes on."""
    from forensics.sources.pyspy import pyspy_text

    def broken(*args: object, **kwargs: object) -> None:
        raise OverflowError("date value out of range")

    monkeypatch.setattr(pyspy_text, "parse_text", broken, raising=False)
    monkeypatch.setattr(pyspy_text, "read_dumps", broken)  # what the reader's stream calls
    monkeypatch.setattr(pyspy_text, "parse", broken)
    (tmp_path / "bundle" / "stacks").mkdir(parents=True)
    (tmp_path / "bundle" / "stacks" / "round-1.txt").write_bytes(
        PYSPY_HEAD + b"Process 29878: sglang::scheduler_TP0\nPython v3.11.7 (/usr/bin/python3.11)\n\n"
        b"Thread 29878 (idle): \"MainThread\"\n    on_idle (a.py:80)\n")
    (tmp_path / "bundle" / "journal").mkdir()
    (tmp_path / "bundle" / "journal" / "a.json").write_bytes(JSON_LINE % (b"kept", 1))
    frames, manifest = read_bundle(tmp_path / "bundle")
    by_path = {e["path"]: e for e in manifest["inputs"]}
    failed = by_path["stacks/round-1.txt"]
    assert failed["error"].startswith("the pyspy_text reader failed on this input (OverflowError: date value out of "
                                      "range); none of its records are in the case")
    assert (failed["records"], failed["parsed"]) == (0, 0)
    assert frames["events"].get_column("message").to_list() == ["kept"]
