"""The alert that would have caught it: a rule on progress for the metric names the bundle has,
checked by `promtool check rules`, and shown firing on the incident's own samples by
`promtool test rules` — before the on-call engineer detected the wedge."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from forensics.render.sections import ReportSession
from tests.test_report import REFERENCE

DETECTED = datetime(2026, 6, 18, 21, 38, 30, tzinfo=UTC)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[ReportSession, Path]:
    out = tmp_path_factory.mktemp("alerts")
    session = ReportSession.open(REFERENCE, out)
    session.write_outputs()
    return session, out


def test_the_rule_passes_promtool_and_fires_before_the_detection(written: tuple[ReportSession, Path]) -> None:
    session, out = written
    check = subprocess.run(["promtool", "check", "rules", str(out / "alerts.yml")], capture_output=True, text=True)
    assert check.returncode == 0 and "SUCCESS: 2 rules found" in check.stdout  # the progress rule and its companion, check.stdout + check.stderr
    test = subprocess.run(["promtool", "test", "rules", "alerts.test.yml"], cwd=out, capture_output=True, text=True)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr
    alert = session.summary()["alert"]
    assert alert["instance"] == "gpu-node-00:30002"  # decode, the engine that froze first
    fires = datetime.fromisoformat(alert["fires_at"])
    assert fires < DETECTED and alert["earlier_than_detection_s"] == (DETECTED - fires).total_seconds()
    assert "sglang:generation_tokens_total" in alert["expr"] and "sglang:num_running_reqs" in alert["expr"]
    assert "would have paged at 21:36:40" in (out / "postmortem.md").read_text()


def test_the_test_file_fails_when_the_alert_is_said_to_fire_earlier(written: tuple[ReportSession, Path],
                                                                     tmp_path: Path) -> None:
    """The promtool test is a real check: moved one step earlier, it fails."""
    _, out = written
    text = (out / "alerts.test.yml").read_text()
    times = [line.split(": ")[1] for line in text.splitlines() if "eval_time:" in line]
    earlier = text.replace(f"eval_time: {times[1]}", f"eval_time: {times[0]}__").replace(
        f"eval_time: {times[0]}\n", f"eval_time: {int(times[0][:-1]) - 10}s\n").replace(
        f"eval_time: {times[0]}__", f"eval_time: {times[0]}")
    (tmp_path / "alerts.yml").write_text((out / "alerts.yml").read_text())
    (tmp_path / "alerts.test.yml").write_text(earlier)
    test = subprocess.run(["promtool", "test", "rules", "alerts.test.yml"], cwd=tmp_path, capture_output=True,
                          text=True)
    assert test.returncode != 0


def test_no_alert_without_a_hang(tmp_path: Path) -> None:
    bundle = tmp_path / "healthy"
    (bundle / "logs").mkdir(parents=True)
    (bundle / "logs" / "server.log").write_text(
        "[2025-08-08 03:35:18] Prefill batch. #new-seq: 1, #new-token: 7, #running-req: 1, #queue-req: 0,\n"
        "[2025-08-08 03:35:19] Decode batch. #running-req: 1, #token: 47, gen throughput (token/s): 2.18, "
        "#queue-req: 0,\n")
    session = ReportSession.open(bundle, tmp_path / "out")
    assert session.summary()["alert"] is None and "alerts.yml" not in session.write_outputs()


def test_summary_keeps_to_its_published_schema(written: tuple[ReportSession, Path]) -> None:
    import json

    from forensics.analyze import summary_problems

    _, out = written
    assert summary_problems(json.loads((out / "summary.json").read_text())) == []


def _variant(folder: Path, name: str, without_stacks: bool) -> Path:
    import shutil

    bundle = folder / name
    shutil.copytree(REFERENCE, bundle)
    if without_stacks:  # another problem's signature: frozen, but no stacks to say why
        shutil.rmtree(bundle / "stacks")
    return bundle


def test_a_batch_groups_incidents_by_signature_and_a_report_says_seen_before(tmp_path: Path) -> None:
    import json

    from forensics.cli import main

    incidents = tmp_path / "incidents"
    for n in range(2):  # each bundle is a whole papermill report: the fewest that show a group and a single
        _variant(incidents, f"desync-{n}", without_stacks=False)
    _variant(incidents, "no-stacks-0", without_stacks=True)
    out = tmp_path / "exports"
    assert main(["batch", str(incidents), "--out", str(out), "--workers", "2"]) == 0
    index = json.loads((out / "index.json").read_text())
    counts = sorted((g["count"], any("TP_DESYNC" in p for p in g["parts"])) for g in index["signatures"])
    assert counts == [(1, False), (2, True)]
    desync = next(g for g in index["signatures"] if g["count"] == 2)
    assert sorted(desync["reports"]) == [f"desync-{n}/report.html" for n in range(2)]
    assert sorted(r["seen_before"] for r in index["incidents"] if r["out"].startswith("desync")) == [0, 1]
    assert "Recurring problems" in (out / "index.html").read_text()
    # a later report of the same problem, with the batch's output as its library
    assert main(["report", str(incidents / "desync-0"), "--out", str(tmp_path / "again"), "--library", str(out)]) == 0
    summary = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert summary["seen_before"]["count"] == 2
    assert "Seen before: 2 times with the same signature" in (tmp_path / "again" / "report.html").read_text()


@pytest.mark.parametrize("scrape_s", [15, 30, 60])
def test_the_rule_fits_the_bundles_scrape_interval(tmp_path: Path, scrape_s: int) -> None:
    """The reference incident scraped every 15, 30 or 60 s: the window holds at least four scrapes
    (a 1m window could never see a 60 s scrape interval move), and promtool shows the rule silent
    before the stall, firing after it, and silent again once the restarted engines work."""
    import yaml

    from forensics.lab.reference import write_reference

    bundle = write_reference(tmp_path / "bundle", scrape_s=scrape_s)
    session = ReportSession.open(bundle, tmp_path / "out")
    session.write_outputs()
    rule = session.analysis.alert()
    assert rule.scrape_s == scrape_s and rule.window.total_seconds() == max(60, 4 * scrape_s)
    assert f"[{max(60, 4 * scrape_s) // 60}m]" in rule.expr
    test = yaml.safe_load((tmp_path / "out" / "alerts.test.yml").read_text())
    checks = test["tests"][0]["alert_rule_test"]
    assert [bool(c["exp_alerts"]) for c in checks] == [False, True, False]  # silent, fires, silent again
    # after decode's last batch line (21:34:47) and before the restart (21:40:45): with 60 s scrapes a
    # 4m window pages later than the on-call engineer noticed (21:38:30), and the report says so
    assert datetime(2026, 6, 18, 21, 34, 47, tzinfo=UTC) < rule.fires_at < datetime(2026, 6, 18, 21, 40, 45, tzinfo=UTC)
    done = subprocess.run(["promtool", "test", "rules", "alerts.test.yml"], cwd=tmp_path / "out", capture_output=True,
                          text=True)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    rules = yaml.safe_load((tmp_path / "out" / "alerts.yml").read_text())["groups"][0]["rules"]
    assert [r["alert"] for r in rules] == ["EngineStalledWithRequestsPending", "EngineMetricsDown"]
    assert all({"summary", "description", "runbook_url"} <= r["annotations"].keys() for r in rules)
    assert "== 0" in rules[1]["expr"] and "up{instance=~" in rules[1]["expr"]
