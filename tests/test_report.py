"""Reports end to end: papermill runs every notebook, `forensics report` and `forensics batch` write
their files, and headless Chromium (Debian's, network off) opens the HTML: charts drawn, no console
error, key times on the page, hostile log text shown as text and never run, secrets redacted."""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path
from typing import Any

import nbformat
import pytest

from forensics.analyze import summary_problems
from forensics.cli import main
from forensics.errors import ForensicsError
from forensics.render import screens
from forensics.report import DEEP_DIVES, MAIN_NOTEBOOK, execute, notebook_path
from tests.conftest import export_entry

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"
CHROMIUM = Path("/usr/bin/chromium")

# What a client or a model may put in a log line: none of it may run in a report.
SCRIPT = "<script>window.__pwned = 'script'</script>"
ONERROR = '<img src=x onerror="window.__pwned = \'onerror\'">'
DSML = '<｜DSML｜invoke name="get_weather">'
SECRETS = ["10.23.45.67", "sk-live-SEEDEDKEY0123456789abcd", "Bearer eyJseeded.tokenpart01.signature99",
           "oncall.person@example.com", "gpu-node-00", "alice"]


def _hostile_bundle(folder: Path) -> Path:
    """The reference incident plus a journal export whose router lines carry payloads and secrets."""
    bundle = folder / "hostile-incident"
    shutil.copytree(REFERENCE, bundle)
    entries = []
    lines = [f"client sent {SCRIPT} in a prompt", f"bad avatar {ONERROR}", f"model output leaked {DSML}",
             f"auth failed for {SECRETS[1]} from {SECRETS[0]}", f"upstream rejected Authorization: {SECRETS[2]}",
             f"notify {SECRETS[3]} about user={SECRETS[5]}"]
    for n, message in enumerate(lines):
        at_us = 1781818560_000000 + n * 1_000_000  # 2026-06-18 21:36:00 UTC onwards: new in the window
        entries.append(export_entry(
            ("__CURSOR", f"s=hostile;i={n}"), ("__REALTIME_TIMESTAMP", str(at_us)),
            ("__MONOTONIC_TIMESTAMP", str(9_000_000_000 + n)), ("_BOOT_ID", "0" * 32), ("_HOSTNAME", SECRETS[4]),
            ("_SYSTEMD_UNIT", "sglang-dsv4-router.service"), ("SYSLOG_IDENTIFIER", "sglang-router"),
            ("PRIORITY", "3"), ("_PID", "4242"), ("MESSAGE", message)))
    (bundle / "journal" / "hostile.export").write_bytes(b"".join(entries))
    return bundle


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`forensics report` of the hostile bundle, as a user runs it."""
    folder = tmp_path_factory.mktemp("report")
    bundle = _hostile_bundle(folder)
    out = folder / "out"
    assert main(["report", str(bundle), "--out", str(out), "--screens"]) == 0
    return out


def recorded_summary(notebook: Path) -> dict[str, Any]:
    """The summary a notebook recorded as application/json (values, not printed text)."""
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("metadata", {}).get("forensics") == "summary" or (
                    output.get("metadata", {}).get("application/json", {}).get("forensics") == "summary"):
                return output["data"]["application/json"]
    raise AssertionError(f"{notebook} recorded no summary")




def open_offline(browser: Any, page_path: Path) -> tuple[Any, list[str], list[str]]:
    """A page opened as `--screens` opens it (every non-file request refused); it, its console
    errors and the URLs it tried."""
    opened = screens.open_offline(browser, page_path)
    return opened.page, opened.errors, opened.refused


def drawn_charts(page: Any) -> tuple[int, int]:
    """(plotly containers, containers whose SVG has drawn traces)."""
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length > 0")
    return page.evaluate("""() => {
        const plots = [...document.querySelectorAll('.js-plotly-plot')];
        const drawn = plots.filter(p => p.querySelector('.main-svg') &&
            p.querySelectorAll('.trace, .scatterlayer path, .heatmaplayer image, .icicle, .barlayer path').length > 0);
        return [plots.length, drawn.length];
    }""")


# -- files and recorded values ------------------------------------------------------------------

def test_report_writes_every_output(rendered: Path) -> None:
    for name in (MAIN_NOTEBOOK, "report.html", "timeline.html", "postmortem.md", "summary.json"):
        assert (rendered / name).is_file(), name
    summary = json.loads((rendered / "summary.json").read_text())
    assert summary["key_times"]["started"] == "2026-06-18T21:34:47+00:00"
    assert summary["key_times"]["resolved"] == "2026-06-18T21:42:00+00:00"
    assert [v["verdict"] for v in summary["stack_verdicts"] if v["group"] == "decode"] == ["TP_DESYNC"]
    hostile = next(s for s in summary["sources"] if s["path"].endswith("hostile.export"))
    assert hostile["records"] == hostile["parsed"] == 6
    assert summary_problems(summary) == []
    broken = summary_problems({**summary, "incident_found": "yes", "key_times": {"started": None}})
    assert broken[0] == "incident_found: 'yes' is not of type 'boolean'"
    assert "key_times: 'resolved' is a required property" in broken and len(broken) == 9


def test_executed_notebook_records_the_key_times(rendered: Path) -> None:
    summary = recorded_summary(rendered / MAIN_NOTEBOOK)
    key = summary["key_times"]
    assert (key["ttd_s"], key["ttm_s"], key["ttr_s"]) == (223.0, 358.0, 433.0)
    assert summary["components"]["decode"]["last_progress"] == "2026-06-18T21:34:47+00:00"
    assert summary["components"]["prefill"]["last_progress"] == "2026-06-18T21:39:07+00:00"
    assert [t["name"] for t in summary["tracks"]][:2] == ["wedge", "tool-call markup leak"]


def test_postmortem_has_the_sre_headings_facts_and_placeholders(rendered: Path) -> None:
    text = (rendered / "postmortem.md").read_text()
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings == ["Summary", "Impact", "Root Causes", "Trigger", "Resolution", "Detection", "Action Items",
                        "Lessons Learned", "Timeline"]
    assert "decode froze at 21:34:47" in text and "TP_DESYNC" in text
    assert "| 2026-06-18 21:40:45 |" in text and "Resolved at 21:42:00" in text
    assert text.count("TODO (only people know)") >= 6
    assert "<script>" not in text and "&lt;script&gt;" in text


def test_notebooks_are_committed_clean_with_one_shared_parameters_cell() -> None:
    sources = set()
    for name in (MAIN_NOTEBOOK, *DEEP_DIVES):
        nb = nbformat.read(notebook_path(name), as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), f"{name} has outputs"
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, name
        sources.add(tagged[0].source)
        assert all("def " not in c.source for c in code), f"{name} defines a helper: it belongs in the package"
    assert len(sources) == 1, "every notebook shares the same parameters"


@pytest.mark.parametrize("name", DEEP_DIVES)
def test_deep_dive_notebooks_run_on_the_reference_incident(name: str, tmp_path: Path) -> None:
    out = execute(notebook_path(name), tmp_path / name,
                  {"bundle": str(REFERENCE), "out_dir": str(tmp_path / "out"), "display_tz": "Asia/Shanghai"},
                  progress=False)
    summary = recorded_summary(out)
    assert summary["display_time_zone"] == "Asia/Shanghai"
    assert summary["key_times"]["started"] == "2026-06-18T21:34:47+00:00"
    nb = nbformat.read(out, as_version=4)
    kinds = {k for c in nb.cells for o in c.get("outputs", []) for k in o.get("data", {})}
    assert "text/html" in kinds
    if name != "logs.ipynb":
        assert "application/vnd.plotly.v1+json" in kinds


def test_papermill_command_line_runs_the_report_notebook(tmp_path: Path) -> None:
    import subprocess
    import sys
    papermill = Path(sys.executable).parent / "papermill"
    done = subprocess.run([str(papermill), str(notebook_path()), str(tmp_path / "out.ipynb"), "-p", "bundle",
                           str(REFERENCE), "-p", "out_dir", str(tmp_path / "out"), "--no-progress-bar"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert recorded_summary(tmp_path / "out.ipynb")["key_times"]["mitigated"] == "2026-06-18T21:40:45+00:00"
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {"summary.json", "timeline.html", "postmortem.md"}


def test_a_bad_display_zone_fails_with_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(REFERENCE), "--out", str(tmp_path), "--display-tz", "Mars/Olympus"]) == 2
    assert "--display-tz 'Mars/Olympus': not a time zone" in capsys.readouterr().err  # before any work


# -- in a real browser ---------------------------------------------------------------------------

@pytest.mark.parametrize("page_name", ["report.html", "timeline.html"])
def test_pages_draw_offline_without_console_errors(rendered: Path, browser: Any, page_name: str) -> None:
    page, errors, refused = open_offline(browser, rendered / page_name)
    plots, drawn = drawn_charts(page)
    assert errors == [] and refused == []
    assert plots >= (5 if page_name == "report.html" else 1) and drawn == plots
    text = page.inner_text("body")
    for clock in ("21:34:47", "21:38:30", "21:40:45", "21:42:00"):
        assert clock in text
    assert "TTD 3m43s" in text and "TTR 7m13s" in text
    assert page.evaluate("window.__pwned") is None
    page.context.close()


def test_hostile_log_text_shows_as_text_and_never_runs(rendered: Path, browser: Any) -> None:
    page, errors, _ = open_offline(browser, rendered / "report.html")
    text = page.inner_text("body")
    # the findings quote the new templates (numbers and paths masked), as text
    assert "client sent <script>window.__pwned" in text and 'onerror="window.__pwned' in text and DSML in text
    assert "IPython.core.display" not in text
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("document.querySelectorAll('img[src=x]').length") == 0
    # the timeline's hover texts carry the same lines: drawn as text by plotly, never as elements
    timeline, _, _ = open_offline(browser, rendered / "timeline.html")
    data = timeline.evaluate("JSON.stringify(document.getElementById('timeline').data.map(t => t.text))")
    assert "&lt;script&gt;" in data and "onerror" in data
    assert timeline.evaluate("window.__pwned") is None and errors == []
    page.context.close()
    timeline.context.close()


def test_timeline_html_is_redacted_and_says_so(rendered: Path) -> None:
    raw = (rendered / "timeline.html").read_text()
    body = raw.split("<h1>", 1)[1]  # after plotly.js
    for secret in SECRETS:
        assert secret not in body, secret
        assert secret.replace("@", "\\u0040") not in body
    statement = re.search(r'<p class="note" id="redaction">(.*?)</p>', body).group(1)
    assert "host names" in statement and "IP addresses" in statement and "secrets (tokens, API keys" in statement
    assert "e-mail addresses" in statement and "user names" in statement
    # the report itself is not redacted by default, and says what timeline.html redacted
    report = (rendered / "report.html").read_text()
    assert SECRETS[0] in report and SECRETS[4] in report
    assert "<b>timeline.html</b>: Redacted (each replaced by a stable pseudonym" in report


def test_timeline_size_is_plotly_plus_a_little(rendered: Path) -> None:
    from plotly.offline import get_plotlyjs
    extra = (rendered / "timeline.html").stat().st_size - len(get_plotlyjs().encode())
    assert 0 < extra <= 3 * 1024 * 1024
    report = (rendered / "report.html").read_text()
    assert report.count("Plotly.newPlot") >= 5
    assert report.count(get_plotlyjs()[:200]) == 1, "plotly.js inlined exactly once"


# -- batch ----------------------------------------------------------------------------------------

def test_batch_goes_on_past_a_failing_bundle_and_indexes_both(tmp_path: Path, browser: Any) -> None:
    bundles = tmp_path / "incidents"
    good = bundles / "good-incident"
    shutil.copytree(REFERENCE, good)
    bad = bundles / "broken-incident"
    shutil.copytree(REFERENCE, bad)
    (bad / "incident.toml").write_text('title = "broken\nwindow = [\n')
    out = tmp_path / "exports"
    assert main(["batch", str(bundles), "--out", str(out), "--workers", "2"]) == 1
    rows = {Path(r["bundle"]).name: r for r in json.loads((out / "index.json").read_text())["incidents"]}
    assert set(rows) == {"good-incident", "broken-incident"}
    assert "incident.toml" in rows["broken-incident"]["error"]
    assert rows["good-incident"]["ttd"] == "3m43s" and "decode: TP_DESYNC" in rows["good-incident"]["verdicts"]
    # issue 53: the one-sentence answer, and times as people read them (no microseconds)
    assert rows["good-incident"]["what_happened"].startswith("decode froze at 21:34:47")
    assert "." not in rows["good-incident"]["window"].replace(" — ", "") and "UTC" in rows["good-incident"]["window"]
    assert (out / "good-incident" / "report.html").is_file()
    page, errors, refused = open_offline(browser, out / "index.html")
    assert errors == [] and refused == []
    table = page.inner_text("#incidents")
    assert "DeepSeek-V4-Flash PD wedge" in table and "3m43s" in table and "5m58s" in table
    assert "decode froze at 21:34:47" in table
    assert "failed" in table and "broken-incident" in table
    hrefs = page.evaluate("[...document.querySelectorAll('#incidents a')].map(a => a.getAttribute('href'))")
    assert "good-incident/timeline.html" in hrefs and all((out / h).exists() for h in hrefs)
    page.context.close()


def test_the_executed_notebook_draws_its_figures_in_jupyterlab(rendered: Path, browser: Any) -> None:
    """What an SRE opens to dig further: JupyterLab draws the figures from plotly's own mimetype
    (the plotly labextension ships in the plotly wheel), not from the HTML nbconvert uses."""
    import subprocess
    import sys
    import time
    import urllib.request

    from tests.conftest import free_port
    port = free_port()
    lab = subprocess.Popen([str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", f"--port={port}",
                            "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={rendered}",
                            "--allow-root", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
                            "jupyterlab.NeverCheckForUpdate"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=1)
                break
            except OSError:
                time.sleep(0.25)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.route("**/*", lambda r: r.continue_() if r.request.url.startswith(f"http://127.0.0.1:{port}/")
                      else r.abort())
        page = context.new_page()
        crashes: list[str] = []
        page.on("pageerror", lambda e: crashes.append(str(e)))
        page.goto(f"http://127.0.0.1:{port}/lab/tree/{MAIN_NOTEBOOK}")
        page.wait_for_selector(".jp-OutputArea .js-plotly-plot .main-svg", timeout=90_000)
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 5", timeout=30_000)
        assert crashes == []
        context.close()
    finally:
        lab.terminate()
        lab.wait(timeout=30)


# -- the first screen and the pictures ---------------------------------------------------------

TOP_OF = """(text) => { const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode())
        if (n.textContent.includes(text)) return n.parentElement.getBoundingClientRect().top;
    return null; }"""


def test_first_screen_is_the_answer(rendered: Path, browser: Any) -> None:
    page = screens.open_offline(browser, rendered / "report.html", (1280, 720)).page
    # what happened, when, and how long it took, before any scrolling
    for text in ("2026-06-18 (UTC)", "decode froze at 21:34:47; prefill froze at 21:39:07", "TP_DESYNC",
                 "TTD 3m43s · TTM 5m58s · TTR 7m13s"):
        top = page.evaluate(TOP_OF, text)
        assert top is not None and top < 720, (text, top)
    # and the picture: each component working, then frozen, whole on the first screen
    overview = page.evaluate("document.querySelector(\"div.js-plotly-plot[id$='overview']\").getBoundingClientRect()"
                             ".bottom")
    assert overview <= 720
    bars = page.evaluate("document.querySelector(\"div.js-plotly-plot[id$='overview']\").data"
                         ".map(t => [t.name, t.customdata])")
    assert ["frozen", ["decode frozen 21:34:47–21:42:00 (7m13s)", "prefill frozen 21:39:07–21:42:00 (2m53s)"]] in bars
    timeline = page.evaluate("document.querySelector(\"div.js-plotly-plot[id$='timeline']\").getBoundingClientRect().top")
    # sources and data quality further down; how to run the notebook is not in the report
    assert page.evaluate(TOP_OF, "records seen = parsed + quarantined") > timeline
    assert "papermill notebooks/incident_report.ipynb" not in page.inner_text("body")
    # findings heaviest first, each unfolding to its evidence rows
    first = page.locator("ul.findings > li").first
    assert "TP_DESYNC" in first.inner_text() and "stacks/round-2.txt" not in first.inner_text()
    first.locator("summary").click()
    assert "stacks/round-2.txt" in first.inner_text()
    folded = page.locator("li.folded summary", has_text=re.compile(r"^restart × 2 \(decode, prefill\)"))
    assert folded.count() == 1
    page.context.close()


def test_screens_are_pictures_of_the_first_screen_and_the_timeline(rendered: Path) -> None:
    sizes = {}
    for png in (rendered / "screens").iterdir():
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", png
        sizes[png.name] = struct.unpack(">II", data[16:24])
    assert sizes["first-screen-1280x720.png"] == (1280, 720)
    assert sizes["first-screen-1600x1000.png"] == (1600, 1000)
    # the timeline whole, all its swimlanes and panels, wider than tall only if it is short
    for name in ("timeline-1280x720.png", "timeline-1600x1000.png"):
        width, height = sizes[name]
        assert width > 1000 and height > 700, (name, width, height)
    assert len(sizes) == 4


def test_screens_without_chromium_say_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "report.html"
    page.write_text("<p>x</p>")
    monkeypatch.setenv("FORENSICS_CHROMIUM", str(tmp_path / "no-chromium"))
    with pytest.raises(ForensicsError, match=r"Chromium at .*no-chromium: sudo apt-get install chromium"):
        screens.take(page)
    assert not (tmp_path / "screens").exists() or not any((tmp_path / "screens").iterdir())
