"""Shared fixtures: real journals written by systemd's own tools, real Prometheus servers."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")
REPO = Path(__file__).resolve().parent.parent


def export_entry(*fields: tuple[str, bytes | str]) -> bytes:
    """One entry in Journal Export Format; bytes values that need it are written in binary form."""
    out = []
    for name, value in fields:
        raw = value.encode() if isinstance(value, str) else value
        if isinstance(value, bytes):
            out.append(name.encode() + b"\n" + struct.pack("<Q", len(raw)) + raw + b"\n")
        else:
            out.append(f"{name}=".encode() + raw + b"\n")
    return b"".join(out) + b"\n"


def to_journal(export: bytes, folder: Path, name: str = "test", env: dict[str, str] | None = None,
               flags: list[str] | None = None) -> Path:
    """A real .journal file made from `export` by systemd-journal-remote (`flags` on its command
    line, `env` in its environment, e.g. SYSTEMD_JOURNAL_COMPACT=0)."""
    source = folder / f"{name}.export"
    source.write_bytes(export)
    journal = folder / f"{name}.journal"
    journal.unlink(missing_ok=True)
    subprocess.run([str(JOURNAL_REMOTE), f"--output={journal}", *(flags or []), str(source)], check=True,
                   capture_output=True, env={**os.environ, **(env or {})})
    return journal


def journalctl(journal: Path, output: str) -> bytes:
    """`journalctl --file JOURNAL -o OUTPUT` as bytes."""
    return subprocess.run(["journalctl", "--file", str(journal), "-o", output], check=True,
                          capture_output=True).stdout


@pytest.fixture(scope="session", autouse=True)
def _systemd_tools() -> None:
    missing = [str(t) for t in (JOURNAL_REMOTE,) if not t.exists()]
    missing += [t for t in ("journalctl", "prometheus", "promtool") if shutil.which(t) is None]
    if missing:
        pytest.exit(f"missing system tools {missing}: run the tests through ./run test, which installs them", 2)


def sample_says(samples: Path, name: str, *facts: str) -> None:
    """The ground truth a folder of real samples writes for `name` (its SOURCES.md row) says each of
    `facts`: a test's expected values come from there, never from the suite's own output."""
    rows = [line for line in (samples / "SOURCES.md").read_text().splitlines() if line.startswith(f"| {name} |")]
    assert rows, f"{name}: no row in SOURCES.md"
    for fact in facts:
        assert fact in rows[0], f"{name}: its ground truth does not say {fact!r}"


def write_file(folder: Path, name: str, text: str) -> Path:
    """Write `text` to `folder/name` and return the path."""
    path = folder / name
    path.write_text(text)
    return path


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    """A real `prometheus` (Debian's package) on loopback, scraping the given targets every second."""

    def __init__(self, folder: Path, targets: dict[str, list[str]], *, web_config: str | None = None,
                 metrics_paths: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                  "scrape_configs": [{"job_name": job, "static_configs": [{"targets": hosts}],
                                      "metrics_path": (metrics_paths or {}).get(job, "/metrics")}
                                     for job, hosts in targets.items()]}
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        argv = ["prometheus", f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"]
        if web_config:
            (folder / "web.yml").write_text(web_config)
            argv.append(f"--web.config.file={folder / 'web.yml'}")
        self.log = open(folder / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2):
                    break
            except urllib.error.HTTPError as error:
                if error.code == 401:  # answering, behind basic auth
                    break
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus did not start: {(folder / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)

        if not web_config:
            self._wait_for_first_scrapes(len([t for hosts in targets.values() for t in hosts]))

    def _wait_for_first_scrapes(self, count: int) -> None:
        """Prometheus applies discovered targets every 5 s: wait until each has been scraped once."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=5) as answer:
                active = json.loads(answer.read())["data"]["activeTargets"]
            if len(active) == count and all(t["health"] != "unknown" for t in active):
                return
            time.sleep(0.2)
        raise RuntimeError(f"prometheus at {self.url} did not scrape its targets within 60 s")

    def query(self, promql: str) -> list[dict]:
        """An instant query's result (no auth)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.loads(answer.read())["data"]["result"]

    def stop(self) -> None:
        """Stop the server and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[type[PrometheusServer]]:
    """Start real Prometheus servers: `prometheus_server(targets={...})`; all stopped after the test."""
    started: list[PrometheusServer] = []

    def start(targets: dict[str, list[str]], **kwargs: object) -> PrometheusServer:
        server = PrometheusServer(tmp_path / f"prometheus-{len(started)}", targets, **kwargs)  # type: ignore[arg-type]
        started.append(server)
        return server

    yield start  # type: ignore[misc]
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium driven by Playwright, as `forensics report --screens` drives it
    (no browser download); pages are opened with the network refused (`screens.open_offline`)."""
    from forensics.render import screens

    assert screens.CHROMIUM.exists(), "Debian's chromium package is missing (./run test installs it)"
    with screens.chromium() as instance:
        yield instance


@pytest.fixture(scope="session")
def reference_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference incident's report with the default choices, rendered once for the session as
    `forensics report` renders it: read it, or copy it (`copy_report`) before changing anything."""
    from forensics.report import render

    bundle = REPO / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"
    return render(bundle, tmp_path_factory.mktemp("reference-report") / "out", progress=False).out


def copy_report(report: Path, out: Path) -> Path:
    """A rendered report's folder copied to `out` (which must not exist yet), as a report run there
    would have left it: the previous outputs for a test of what the next run does to them."""
    shutil.copytree(report, out, symlinks=True)
    return out


def assert_every_input_accounted(analysis: Any, name: str) -> None:
    """A corpus file went through ingest and analyze with no traceback: every input it gave is
    records seen = parsed + quarantined, something was read or quarantined or a reason given for
    skipping it, and summary.json follows its schema."""
    from forensics.analyze import summary_problems

    manifest = analysis.timeline.manifest
    for entry in manifest["inputs"]:
        assert entry["records"] == entry["parsed"] + entry["quarantined"]
    said = [e for e in manifest["inputs"] if e["parsed"] or e["quarantined"]]
    refused = [s for s in manifest["skipped"] if s["reason"]]
    assert said or refused, f"{name}: nothing read, nothing quarantined, no reason given"
    assert summary_problems(analysis.summary()) == []
