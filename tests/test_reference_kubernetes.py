"""The reference incident told from its Kubernetes side (issue 52): the same engines' lines, as
`kubectl logs --timestamps --prefix` prints them from pods (the previous run's and the current
one's), the pods' events as `kubectl get events` prints them after a `date` line, beside the same
metrics and incident.toml (its components naming pods instead of units). `forensics analyze` must
find the reference's own key times (tests/test_analyze.py: started 21:34:47, detected 21:38:30,
mitigated 21:40:45, resolved 21:42:00), which come from the reference incident's write-up."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from forensics.analyze import Analysis, analyze
from forensics.sources.journal.journal_export import parse as parse_export
from tests.conftest import REPO

REFERENCE = REPO / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"
PODS = {"sglang-dsv4-prefill.service": ("sglang-dsv4-prefill-0", "prefill"),
        "sglang-dsv4-decode.service": ("sglang-dsv4-decode-0", "decode"),
        "sglang-dsv4-router.service": ("sglang-dsv4-router-0", "router")}
RESTART = datetime.fromisoformat("2026-06-18T21:40:45+00:00")  # the reference's restart (its README)
CAPTURED = datetime.fromisoformat("2026-06-18T21:45:00+00:00")  # the window's end: when the cluster was read


def t(hms: str) -> str:
    return f"2026-06-18T{hms}+00:00"


def _stamp(at: datetime) -> str:
    """kubectl's `--timestamps` form: RFC3339Nano in UTC (the kubelet's nanoseconds, here µs and zeros)."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def _pod_logs(bundle: Path) -> None:
    """The engines' own lines (the journal's records their processes wrote) as each pod's container logs:
    before the restart as `kubectl logs --previous`, after it as `kubectl logs`, both with
    `--timestamps --prefix` (kubectl's prefix first, the kubelet's stamp after it)."""
    (journal,) = (REFERENCE / "journal").iterdir()
    rows = (parse_export(journal).rows  # the engines' own lines: systemd's about their units are no container's
            .filter(pl.col("unit").cast(pl.String).is_in(list(PODS)) & (pl.col("identifier").cast(pl.String) != "systemd"))
            .select("ts", pl.col("unit").cast(pl.String), "message").sort("ts"))
    assert rows.height > 1000
    folder = bundle / "logs" / "gpu-node-00"
    folder.mkdir(parents=True)
    for name, part in (("pods-previous.log", rows.filter(pl.col("ts") < RESTART)),
                       ("pods.log", rows.filter(pl.col("ts") >= RESTART))):
        with open(folder / name, "w") as out:
            out.write(f"$ kubectl logs -n serving -l app=sglang-dsv4 --all-containers --timestamps --prefix"
                      f"{' --previous' if 'previous' in name else ''}\n")
            for at, unit, message in part.iter_rows():
                pod, _ = PODS[unit]
                for line in (message or "").split("\n"):
                    out.write(f"[pod/{pod}/sglang] {_stamp(at)} {line}\n")


def _pod_events(bundle: Path) -> None:
    """The pods' events a `date; kubectl get events -n serving` at 21:45:00 prints: the restart's
    Killing at 21:40:45 and the new containers' Pulled / Created / Started after it."""
    def age(at: str) -> str:
        seconds = int((CAPTURED - datetime.fromisoformat(t(at))).total_seconds())
        return f"{seconds // 60}m{seconds % 60}s" if seconds % 60 else f"{seconds // 60}m"

    rows = [("21:40:45", "Normal", "Killing", "Stopping container sglang"),
            ("21:40:47", "Normal", "Pulled", 'Container image "lmsysorg/sglang:latest" already present on machine'),
            ("21:40:47", "Normal", "Created", "Created container sglang"),
            ("21:40:48", "Normal", "Started", "Started container sglang")]
    lines = [f"{CAPTURED:%a %b %d %H:%M:%S} UTC {CAPTURED:%Y}",
             f"{'LAST SEEN':<12}{'TYPE':<10}{'REASON':<10}{'OBJECT':<34}MESSAGE"]
    for pod in ("sglang-dsv4-prefill-0", "sglang-dsv4-decode-0"):
        lines += [f"{age(at):<12}{kind:<10}{reason:<10}{'pod/' + pod:<34}{message}" for at, kind, reason, message in rows]
    (bundle / "kubernetes").mkdir()
    (bundle / "kubernetes" / "events.txt").write_text("\n".join(lines) + "\n")


def _incident(bundle: Path) -> None:
    """The reference's incident.toml, its components naming the pods instead of the units."""
    text = (REFERENCE / "incident.toml").read_text()
    for unit, (pod, _) in PODS.items():
        text = text.replace(f'units = ["{unit}"]', f'units = ["{pod}"]')
    assert text.count('units = ["sglang-dsv4-') == 3 and ".service" not in text.split("[[annotations]]")[0]
    (bundle / "incident.toml").write_text(text)


@pytest.fixture(scope="module")
def told_by_kubernetes(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    bundle = tmp_path_factory.mktemp("k8s") / "bundle"
    bundle.mkdir()
    shutil.copytree(REFERENCE / "metrics", bundle / "metrics")
    _pod_logs(bundle)
    _pod_events(bundle)
    _incident(bundle)
    return analyze(bundle, bundle.parent / "case")


def test_the_pods_logs_are_read_as_kubectl_logs_with_pod_container_and_kubectls_times(
        told_by_kubernetes: Analysis) -> None:
    inputs = {Path(i["path"]).name: i for i in told_by_kubernetes.timeline.manifest["inputs"]}
    assert inputs["pods.log"]["format"] == inputs["pods-previous.log"]["format"] == "kubectl_logs"
    assert inputs["events.txt"]["format"] == "kubectl"
    for entry in inputs.values():
        assert entry["records"] == entry["parsed"] + entry["quarantined"]
    events = told_by_kubernetes.timeline.events
    decode = events.filter(pl.col("unit").cast(pl.String) == "sglang-dsv4-decode-0")
    assert set(decode.get_column("component").drop_nulls()) == {"decode"}
    assert set(decode.get_column("K8S_CONTAINER")) == {"sglang"}


def test_the_same_key_times_as_the_reference(told_by_kubernetes: Analysis) -> None:
    times = told_by_kubernetes.summary()["key_times"]
    assert (times["started"], times["detected"], times["mitigated"]) == (t("21:34:47"), t("21:38:30"), t("21:40:45"))
    components = told_by_kubernetes.summary()["components"]
    assert components["decode"]["last_progress"] == t("21:34:47")
    assert components["prefill"]["last_progress"] == t("21:39:07")


def test_resolved_from_the_pods_restart_and_health_answers(told_by_kubernetes: Analysis) -> None:
    times = told_by_kubernetes.summary()["key_times"]
    assert times["resolved"] == t("21:42:00") and times["ttr_s"] == 433.0


def test_the_pod_events_have_times_from_the_captures_date_line(told_by_kubernetes: Analysis) -> None:
    events = told_by_kubernetes.timeline.events
    killing = events.filter(pl.col("K8S_REASON") == "Killing")
    assert killing.height == 2
    assert set(killing.get_column("ts")) == {RESTART}
    assert set(killing.get_column("K8S_LAST_AT")) == {RESTART.isoformat()}
    assert (CAPTURED - timedelta(minutes=4, seconds=15)) == RESTART
