"""Evidence that carries markup never runs and never loads anything: a payload set is put in every
place evidence reaches (messages, units, hosts, identifiers, capture-header groups, titles and
hosts, thread names, metric label values, the incident's title and annotations, file names), the
report is rendered as a user renders it, and the outputs are opened in headless Chromium with the
network refused; postmortem.md is rendered as Markdown and checked for live links, images and HTML."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any

import mistune
import pytest

from forensics.cli import main
from tests.conftest import export_entry
from tests.test_report import REFERENCE, open_offline

# Header values hold no spaces (the capture header splits on them): the payloads do without.
PAYLOADS = {
    "script": "<script>window.__pwned='script'</script>",
    "div": "x\"></div><script>window.__pwned='div'</script>",
    "img": "<img/src=x/onerror=window.__pwned='img'>",
    "svg": "<svg/onload=window.__pwned='svg'>",
    "attr": "'\"/onmouseover=window.__pwned='attr'/x='",
    "js": "javascript:window.__pwned='js'//",
    "md": "![pixel](http://tracker.invalid/p.png)",
    "mdlink": "[click](javascript:window.__pwned='md')",
}
EVERYTHING = " ".join(PAYLOADS.values())


def _journal(payload_names: list[str]) -> bytes:
    out = []
    for n, (name, payload) in enumerate(PAYLOADS.items()):
        at_us = 1781818560_000000 + n * 1_000_000
        out.append(export_entry(
            ("__CURSOR", f"s=payload;i={n}"), ("__REALTIME_TIMESTAMP", str(at_us)),
            ("__MONOTONIC_TIMESTAMP", str(9_000_000_000 + n)), ("_BOOT_ID", "1" * 32),
            ("_HOSTNAME", payload_names[n % len(payload_names)]), ("_SYSTEMD_UNIT", f"{payload}.service"),
            ("SYSLOG_IDENTIFIER", payload), ("PRIORITY", "3"), ("_PID", "777"),
            ("MESSAGE", f"Traceback error {payload} {EVERYTHING}")))
    # sudo's audit line: the post-mortem quotes the command
    out.append(export_entry(
        ("__CURSOR", "s=payload;i=sudo"), ("__REALTIME_TIMESTAMP", "1781819000000000"),
        ("__MONOTONIC_TIMESTAMP", "9000000100"), ("_BOOT_ID", "1" * 32), ("_HOSTNAME", "gpu-node-00"),
        ("SYSLOG_IDENTIFIER", "sudo"), ("PRIORITY", "5"), ("_PID", "778"),
        ("MESSAGE", f"     sre : TTY=pts/0 ; PWD=/root ; USER=root ; COMMAND=/usr/bin/systemctl restart "
                    f"{PAYLOADS['md']}")))
    return b"".join(out)


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _bundle(folder: Path) -> Path:
    bundle = folder / "payload-incident"
    shutil.copytree(REFERENCE, bundle)
    lines = (bundle / "incident.toml").read_text().splitlines()
    lines[0] = f"title = {_toml_string(EVERYTHING)}"
    lines += [f'[[annotations]]\nat = "2026-06-18T21:36:30Z"\ntext = {_toml_string("note " + payload)}'
              for payload in PAYLOADS.values()]
    (bundle / "incident.toml").write_text("\n".join(lines) + "\n")
    (bundle / "journal" / "payloads.export").write_bytes(_journal(list(PAYLOADS.values())))
    dump = "".join(  # two ranks per payload group, so that each group gets a verdict and its figures
        f"# capture ts=2026-06-18T21:40:1{n}Z host={payload} pid={900 + 2 * n + tp} group={payload} "
        f"title=sglang::scheduler_TP{tp}\nProcess {900 + 2 * n + tp}: sglang::scheduler_TP{tp}\n"
        f"Python v3.11.7 (/usr/bin/python3)\n\n"
        f'Thread {900 + 2 * n + tp} (idle): "{payload} thread"\n    {payload} ({payload}.py:1)\n    main (x.py:2)\n\n'
        for n, payload in enumerate(PAYLOADS.values()) for tp in (0, 1))
    (bundle / "stacks" / "payloads.txt").write_text(dump)
    (bundle / "stacks" / "titles.txt").write_text("".join(  # and the payload as a process title
        f"# capture ts=2026-06-18T21:40:2{n}Z pid={950 + n} title={payload}\nProcess {950 + n}: {payload}\n"
        f"Python v3.11.7 (/usr/bin/python3)\n\nThread {950 + n} (idle): \"MainThread\"\n    f (x.py:1)\n\n"
        for n, payload in enumerate(PAYLOADS.values())))
    scrape = "".join(f'# capture ts=2026-06-18T21:3{n}:00Z port=30002\n# TYPE sglang:num_running_reqs gauge\n'
                     f'sglang:num_running_reqs{{engine="{p.replace(chr(92), "").replace(chr(34), "")}"}} {n}\n'
                     for n, p in enumerate(PAYLOADS.values()))
    (bundle / "metrics" / "gpu-node-00_30002" / "payloads.prom.gz").write_bytes(gzip.compress(scrape.encode()))
    (bundle / "<img src=x onerror=window.__pwned='file'>.bin").write_bytes(b"\x00\x01 not evidence")  # its name reaches the page
    return bundle


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("payloads")
    bundle = _bundle(folder)
    rendered = {}
    for mode, flags in (("default", []), ("redacted", ["--redact"])):
        out = folder / mode
        assert main(["report", str(bundle), "--out", str(out), *flags]) == 0
        rendered[mode] = out
    return rendered




@pytest.mark.parametrize("mode", ["default", "redacted"])
@pytest.mark.parametrize("page_name", ["report.html", "timeline.html"])
def test_no_payload_runs_or_loads_anything(outputs: dict[str, Path], browser: Any, mode: str,
                                           page_name: str) -> None:
    page, errors, refused = open_offline(browser, outputs[mode] / page_name)
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length > 0")
    # hovering every point would be slow; plotly draws hover text as SVG text, so force one redraw
    page.mouse.move(700, 500)
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("document.querySelectorAll('img[src=x], svg[onload], [onmouseover], [onerror]').length") == 0
    assert refused == [] and errors == []
    # no payload became a script element of its own (plotly's figure data holds them as escaped strings)
    assert page.evaluate("[...document.scripts].filter(s => s.textContent.trim().startsWith('window.__pwned'))"
                         ".length") == 0
    if page_name == "report.html" and mode == "default":
        text = page.inner_text("body")
        assert PAYLOADS["script"] in text  # shown, as text
    page.context.close()


@pytest.mark.parametrize("mode", ["default", "redacted"])
def test_postmortem_markdown_quotes_evidence_inertly(outputs: dict[str, Path], mode: str) -> None:
    markdown = (outputs[mode] / "postmortem.md").read_text()
    assert "tracker.invalid" in markdown or mode == "redacted"
    rendered = str(mistune.html(markdown))
    assert "<img" not in rendered and "<script" not in rendered and "<svg" not in rendered
    assert 'href="javascript:' not in rendered and 'href="http://tracker' not in rendered
