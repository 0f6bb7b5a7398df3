"""kubectl's output as SREs paste it (`tests/data/kubernetes/`: real public samples, each cited with
its ground truth in that folder's SOURCES.md): every file is read or quarantined line by line, the
failure the platform reports is named with its facts, healthy ones are no incident. Each expected
value is first found in the sample's own SOURCES.md row (`_ground_truth`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analyze import Analysis, analyze, is_anomaly, summary_problems
from tests.conftest import sample_says
from forensics.sources import detect
from forensics.sources.kubernetes.kubectl import age_seconds, parse

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "kubernetes"


def _ground_truth(name: str, *facts: str) -> None:
    sample_says(SAMPLES, name, *facts)


def _analyze(tmp_path: Path, name: str, before: str = "") -> Analysis:
    logs = tmp_path / "bundle" / "logs"
    logs.mkdir(parents=True)
    if before:
        (logs / name).write_text(before + (SAMPLES / name).read_text())
    else:
        shutil.copy(SAMPLES / name, logs / name)
    return analyze(tmp_path / "bundle", tmp_path / "case")


def _faults(analysis: Analysis) -> dict[str, Any]:
    return {f.kind: f for f in analysis.reported() if is_anomaly(f) and f.kind.startswith(("k8s_", "gpu_device"))}


def test_every_sample_is_cited_and_every_cited_sample_is_here() -> None:
    rows = [line.split("|")[1].strip() for line in (SAMPLES / "SOURCES.md").read_text().splitlines()
            if line.startswith("| ") and ".txt |" in line]
    assert sorted(rows) == sorted(p.name for p in SAMPLES.glob("*.txt")) and len(rows) >= 20


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.txt")))
def test_every_sample_is_read_or_quarantined_with_a_reason(tmp_path: Path, name: str) -> None:
    analysis = _analyze(tmp_path, name)
    (entry,) = analysis.timeline.manifest["inputs"]
    assert entry["records"] == entry["parsed"] + entry["quarantined"] and entry["parsed"] > 0
    assert summary_problems(analysis.summary()) == []


@pytest.mark.parametrize(("name", "kind", "truth", "facts"), [
    ("describe-pod_failedscheduling-insufficient-nvidia-gpu_full.txt", "k8s_failed_scheduling",
     ("FailedScheduling — Insufficient nvidia.com/gpu (capacity)", "x70 over 5h43m"),
     {"insufficient": ["nvidia.com/gpu"], "count": 70,
      "objects": ["pod/default/user-profile-resources-659d4dd659-cq4kq"]}),
    ("get-pods-plus-events_tfserving-gpu-pending-x57_unfenced-comment.txt", "k8s_failed_scheduling",
     ("6 Insufficient nvidia.com/gpu", "x57 over 15m"), {"insufficient": ["nvidia.com/gpu"], "count": 57}),
    ("get-events-A_coredns-failedscheduling-no-nodes_all-namespaces.txt", "k8s_failed_scheduling",
     ("**FailedScheduling — no (ready) worker nodes**",),
     {"objects": ["pod/kube-system/coredns-659f9d44fd-gnk2v", "pod/kube-system/coredns-659f9d44fd-lsjhs"]}),
    ("describe-pod_failedscheduling-cpu_legacy-tabbed.txt", "k8s_failed_scheduling", (), {"count": 7}),
    ("describe-pod_oomkilled-crashloop-backoff_full.txt", "k8s_oom_killed",
     ("**OOMKilled — exceeds 100Mi memory limit (capacity/limit)**", "Restart Count 6"),
     {"exit_codes": ["137"], "restarts": 6, "memory_limits": ["100Mi"], "containers": ["memory-eater"]}),
    ("get-pods_oomkilled-restarts-ago_table.txt", "k8s_oom_killed", ("RESTARTS 4 (57s ago)",), {"restarts": 4}),
    ("describe-pod_crashloop-error-exit1_full.txt", "k8s_crash_loop", ("**CrashLoopBackOff — app exit 1**",
                                                                       "x896 over 4h2m"), {"count": 896}),
    ("kubectl-events_crashloop-backoff-x280_for-pod-table.txt", "k8s_crash_loop", ("x280 over 60m",),
     {"count": 280, "objects": ["pod/frontend-service"]}),
    ("describe-job_backofflimitexceeded-exit1_full.txt", "k8s_error_exit", ("BackoffLimitExceeded**",),
     {"reasons": ["BackoffLimitExceeded"]}),
    ("get-pods-A-and-describe_imagepullbackoff-fluentd_legacy-excerpt.txt", "k8s_image_pull",
     ("**ImagePullBackOff — image not pullable**",), {}),
    ("describe-pvc_provisioningfailed-storageclass-notfound_full.txt", "k8s_volume",
     ("**ProvisioningFailed — missing StorageClass (config)**", "x42 over 12m"), {"count": 42}),
    ("describe-pod-events_failedmount-failedattachvolume-timeout_events-section.txt", "k8s_volume",
     ("**FailedMount/FailedAttachVolume", "x28 over 38h"), {"reasons": ["FailedMount", "FailedAttachVolume"]}),
    ("describe-pod-events_failedcreatepodsandbox-no-nvidia-runtime_events-section.txt", "k8s_sandbox_failed",
     ("**FailedCreatePodSandBox", "x93 over 24m"), {"count": 94}),
    ("describe-pod-events_liveness-unhealthy-killing_events-section.txt", "k8s_probe_failed",
     ("**liveness probe failed → container restarted**",), {"reasons": ["Unhealthy", "Killing"]}),
    ("describe-pod-events_vllm-startup-probe-unhealthy_events-section.txt", "k8s_probe_failed",
     ("Startup probe failed",), {"count": 3}),
    ("describe-node_notready-kubelet-stopped-posting_full.txt", "k8s_node_not_ready",
     ("**NodeNotReady — kubelet unreachable, node down**",), {"objects": ["node/kube-worker-1"]}),
    ("get-events_mpijob-gpu-worker-preempted_field-selector-table.txt", "k8s_preempted",
     ("**Preempted — by a higher-priority GPU MPIJob",), {"objects": ["pod/medium-worker-0"]}),
    ("get-events_evicted-memory-pressure_headerless-redacted.txt", "k8s_evicted", ("**Evicted — node memory pressure",),
     {}),
    ("get-pods_unexpectedadmissionerror-gpu-lost_table.txt", "k8s_device_admission",
     ("**UnexpectedAdmissionError — GPU lost",), {"objects": ["pod/rojin-2q6ld"]}),
    ("logs_nvidia-device-plugin-nvml-init-failed_plain.txt", "gpu_device_plugin_failed",
     ("Failed to initialize NVML: could not load NVML library",), {}),
    # pasted as people paste them: rows grep took the header from, a row wrapped before its message,
    # a container's state without its pod, a node's tail without its name
    ("get-pods-grep_prometheus-evicted-x9_headerless-prompt.txt", "k8s_evicted", ("9 pods Evicted",), {"count": 9}),
    ("get-events_readiness-unhealthy_wrapped-headerless.txt", "k8s_probe_failed",
     ("pod/frontend-557f465b6f-xqz9q Warning Unhealthy", "Readiness probe failed"),
     {"objects": ["pod/frontend-557f465b6f-xqz9q"], "reasons": ["Unhealthy"]}),
    ("describe-pod-state_oomkilled-exit0_unindented-excerpt.txt", "k8s_oom_killed", ("Reason OOMKilled, Exit Code 0",),
     {"exit_codes": ["0"]}),
    ("describe-pod-state_error-exit137-not-oom_single-space-excerpt.txt", "k8s_error_exit",
     ("Reason Error (not OOMKilled), Exit Code 137", "Restart Count 1"), {"exit_codes": ["137"], "restarts": 1}),
    ("describe-pod_oomkilled-operator-lastterminated_excerpt.txt", "k8s_oom_killed",
     ("memcached-operator-system/memcached-operator-controller-manager-6d57f5fd7-gfnxw: Last State OOMKilled",),
     {"objects": ["pod/memcached-operator-system/memcached-operator-controller-manager-6d57f5fd7-gfnxw"],
      "exit_codes": ["137"], "restarts": 1, "memory_limits": ["90Mi"]}),
    ("get-pods_gpu-operator-init-error-init-restarts_oc-prompt.txt", "k8s_crash_loop",
     ("nvidia-operator-validator-99l6b 0/1 Init:2/4, 41 restarts",),
     {"objects": ["pod/nvidia-operator-validator-99l6b"], "restarts": 41}),
    ("get-pods_gpu-operator-init-error-init-restarts_oc-prompt.txt", "k8s_error_exit",
     ("nvidia-cuda-validator-wgs28 0/1 Init:Error, 3 restarts",),
     {"objects": ["pod/nvidia-cuda-validator-wgs28"], "restarts": 3}),
    ("describe-node-tail_memory-pressure-eviction-threshold_allocated-and-events.txt", "k8s_node_pressure",
     ("Node 192.168.144.102", "(x4 over 2d5h)", "(x38 over 2d5h)"),
     {"objects": ["node/192.168.144.102"], "reasons": ["NodeHasInsufficientMemory", "EvictionThresholdMet"],
      "count": 4 + 38}),
])
def test_the_platforms_failure_is_named_with_its_facts(tmp_path: Path, name: str, kind: str, truth: tuple[str, ...],
                                                      facts: dict[str, Any]) -> None:
    _ground_truth(name, *truth)
    found = _faults(_analyze(tmp_path, name))
    assert kind in found, sorted(found)
    for key, value in facts.items():
        assert found[kind].facts.get(key) == value, (key, found[kind].facts)


@pytest.mark.parametrize("name", [
    "describe-pod_healthy-running_full.txt", "describe-job_completed-succeeded-healthy_full.txt",
    "describe-deployment_rollout-rollback-scalingreplicaset-healthy_list-indented.txt",
    "get-events_rollout-healthy_legacy-default-firstseen-count-source.txt",
    "get-pods-A_vllm-production-stack-healthy_all-namespaces.txt",
    "kubectl-events_kserve-isvc-rollout-normal_table-excerpt.txt",
])
def test_healthy_output_is_no_incident(tmp_path: Path, name: str) -> None:
    _ground_truth(name, "**healthy")
    analysis = _analyze(tmp_path, name)
    assert not analysis.incident_found, [f.text for f in analysis.findings if is_anomaly(f)]


def test_a_node_describe_gives_its_gpus_and_taints(tmp_path: Path) -> None:
    name = "describe-node_gpu-l40s-taint-allocated-2of4_full.txt"
    _ground_truth(name, "Taints nvidia.com/gpu=true:NoSchedule", "Allocatable nvidia.com/gpu 4", "Allocated: nvidia.com/gpu 2/2")
    (row,) = parse(SAMPLES / name).rows.to_dicts()
    assert row["message"] == ("Normal Described node/ip-10-10-3-26.ec2.internal: taints nvidia.com/gpu=true:NoSchedule; "
                              "nvidia.com/gpu allocatable 4; nvidia.com/gpu allocated resources 2")


def test_a_kill_by_signal_is_not_called_out_of_memory(tmp_path: Path) -> None:
    name = "describe-pod-state_error-exit137-not-oom_single-space-excerpt.txt"
    _ground_truth(name, "Reason Error (not OOMKilled), Exit Code 137", "not OOM")
    assert "k8s_oom_killed" not in _faults(_analyze(tmp_path, name))


def test_a_nodes_tail_without_its_name_still_gives_its_gpus() -> None:
    name = "describe-node-allocated_amd-gpu-1of1_indented-tail.txt"
    _ground_truth(name, "amd.com/gpu 1 requested / 1 limit", "name not in the paste")
    (row,) = parse(SAMPLES / name).rows.to_dicts()
    assert (row["K8S_KIND"], row["K8S_NAME"]) == ("Node", None)
    assert row["message"] == ("Normal Described the node described (its name is not in the paste): "
                              "amd.com/gpu allocated resources 1")


def test_ages_become_times_only_against_the_captures_own_date_line(tmp_path: Path) -> None:
    name = "kubectl-events_crashloop-backoff-x280_for-pod-table.txt"
    without = parse(SAMPLES / name)
    assert without.rows.get_column("ts").null_count() == without.rows.height
    assert "the capture gives no time of its own" in without.notes[0]
    dated = tmp_path / name
    dated.write_text("Fri Jun 19 10:00:00 UTC 2026\n" + (SAMPLES / name).read_text())  # as `date; kubectl …` prints
    rows = parse(dated).rows
    back_off = rows.filter(rows.get_column("K8S_REASON") == "BackOff").to_dicts()[0]
    assert back_off["ts"].isoformat() == "2026-06-19T09:59:43+00:00"  # "17s (x280 over 60m)" before 10:00:00
    assert back_off["K8S_FIRST_SEEN"] == "60m" and back_off["K8S_COUNT"] == "280"


def test_a_describes_finished_time_is_used_as_written() -> None:
    rows = parse(SAMPLES / "describe-pod_oomkilled-crashloop-backoff_full.txt").rows
    oom = rows.filter(rows.get_column("K8S_REASON") == "OOMKilled").to_dicts()[0]
    assert oom["ts"].isoformat() == "2025-02-27T06:36:22+00:00"  # Finished: Thu, 27 Feb 2025 07:36:22 +0100


def test_ages_are_read_as_kubectl_writes_them() -> None:
    assert [age_seconds(a) for a in ("17s", "3m41s", "5h43m", "2d", "<unknown>", "<invalid>")] == \
        [17, 221, 20580, 172800, None, None]


def test_sniffing_prefers_kubectl_over_the_catch_all_log_reader(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(SAMPLES / "get-events-A_coredns-failedscheduling-no-nodes_all-namespaces.txt", logs / "events.txt")
    assert detect(logs / "events.txt").name == "kubectl"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(
    st.sampled_from([line for p in sorted(SAMPLES.glob("*.txt"))[:12] for line in p.read_text().splitlines()]),
    st.text(max_size=200)), max_size=40))
def test_any_mix_of_real_and_hostile_lines_is_read_or_quarantined(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "mixed.txt"
    path.write_text("Events:\n" + "\n".join(lines), errors="surrogatepass")
    result = parse(path)
    assert result.records == result.rows.height + result.quarantine.height


def test_a_bundle_no_serving_profile_matches_says_so_and_names_the_layers_read(tmp_path: Path) -> None:
    """Issue 53: "profile sglang" was shown for jobs that are not SGLang."""
    from forensics.analyze import profile_said

    analysis = _analyze(tmp_path, "describe-pod_failedscheduling-insufficient-nvidia-gpu_full.txt")
    assert not analysis.profile_matched
    said = profile_said(analysis)
    assert said.startswith("no serving profile matched; read with the layers ") and "kubernetes" in said
    assert "sglang" not in said


@pytest.mark.parametrize("capture", ["date", "header", "manifest"])
def test_first_and_last_seen_become_times_only_against_the_captures_own_now(tmp_path: Path, capture: str) -> None:
    """Issue 52: "17s (x280 over 60m)" is 09:59:43 and 09:00:00 when the capture says it was read at
    10:00:00 — by its `date` line, its capture header or the bundle's collect manifest — and the
    facts say which."""
    name = "kubectl-events_crashloop-backoff-x280_for-pod-table.txt"
    _ground_truth(name, "Warning BackOff 17s (x280 over 60m)")
    before = {"date": "Fri Jun 19 10:00:00 UTC 2026\n", "header": "# capture ts=2026-06-19T10:00:00Z\n",
              "manifest": ""}[capture]
    if capture == "manifest":
        (tmp_path / "bundle").mkdir()
        (tmp_path / "bundle" / "collect.json").write_text('{"kubernetes": {"captured": "2026-06-19T10:00:00Z"}}\n')
    facts = _faults(_analyze(tmp_path, name, before))["k8s_crash_loop"].facts
    assert (facts["first_seen"], facts["last_seen"]) == ("2026-06-19T09:00:00+00:00", "2026-06-19T09:59:43+00:00")
    assert facts["seen_times"].startswith("kubectl's ages counted back from the " + {
        "date": "capture's own `date` line", "header": "file's capture header", "manifest": "collect manifest"}[capture])


def test_without_a_capture_time_ages_stay_relative_and_are_said_to_be(tmp_path: Path) -> None:
    """Never the file's modification time: a file touched to a known time still gives no times."""
    import os

    name = "kubectl-events_crashloop-backoff-x280_for-pod-table.txt"
    logs = tmp_path / "bundle" / "logs"
    logs.mkdir(parents=True)
    shutil.copy(SAMPLES / name, logs / name)
    os.utime(logs / name, (1_781_863_200, 1_781_863_200))  # 2026-06-19 10:00:00 UTC: not a capture time
    facts = _faults(analyze(tmp_path / "bundle", tmp_path / "case"))["k8s_crash_loop"].facts
    assert "first_seen" not in facts and "last_seen" not in facts
    assert facts["seen_times"] == "relative: kubectl's ages, and the capture gives no time to count them back from"
    assert facts["first_seen_ago"] == ["60m"] and facts["last_seen_ago"] == ["17s"]


def test_header_less_event_rows_are_read_as_events_by_their_shape(tmp_path: Path) -> None:
    """Issue 52: `kubectl get events | grep …` rows (the header line gone) are kubectl's, not a log's."""
    for name, reasons in (("get-events_evicted-memory-pressure_headerless-redacted.txt",
                           ["Evicted", "Killing", "ExceededGracePeriod", "Scheduled", "Evicted"]),
                          ("get-events_readiness-probe-refused_wide-headerless-excerpt.txt",
                           ["Pulled", "Unhealthy", "Scheduled"])):
        _ground_truth(name, "headerless")
        logs = tmp_path / name / "logs"
        logs.mkdir(parents=True)
        shutil.copy(SAMPLES / name, logs / name)
        assert detect(logs / name).name == "kubectl"
        rows = parse(logs / name).rows
        assert rows.get_column("K8S_REASON").to_list() == reasons
    # -o wide: SOURCE before the message, FIRST SEEN and COUNT after it, taken out of the message
    unhealthy = rows.filter(rows.get_column("K8S_REASON") == "Unhealthy").to_dicts()[0]
    assert unhealthy["K8S_SOURCE"] == "kubelet, chart-testing-control-plane" and unhealthy["K8S_COUNT"] == "1"
    assert unhealthy["message"].endswith('Readiness probe failed: Get "http://10.244.0.5:3001/": dial tcp '
                                         "10.244.0.5:3001: connect: connection refused")


# Pastes put together as a review found them to break the reader (kubectl's own shapes, joined as a
# terminal session joins them): what each row is follows from kubectl's output, not from the suite.
_POD_DESCRIBE = """$ kubectl describe pod -n ml router-0
Name:             router-0
Namespace:        ml
Status:           Running
Containers:
  router:
    State:          Running
      Started:      Mon, 01 Jan 2024 10:00:00 +0000
    Ready:          True
    Restart Count:  0
Events:           <none>

"""
_LAST_STATE = """    Last State:     Terminated
      Reason:       OOMKilled
      Exit Code:    137
      Finished:     Mon, 01 Jan 2024 10:05:00 +0000
    Restart Count:  4
"""


@pytest.mark.parametrize(("text", "rows"), [
    # a command line ends the describe above it and names the object of the excerpt after it
    (_POD_DESCRIBE + "$ kubectl describe pod -n ml trainer-0 | grep -A6 'Last State'\n" + _LAST_STATE,
     [("Pod", "ml", "router-0", "Running"), ("Pod", "ml", "trainer-0", "OOMKilled")]),
    # a label selector names no one pod
    ("$ kubectl describe pods -l app=trainer -n ml | grep -A4 'Last State'\n" + _LAST_STATE,
     [("Pod", None, None, "OOMKilled")]),
    # a node's tail after a pod's describe is the node's, named by its command
    (_POD_DESCRIBE + "$ kubectl describe node gpu-node-7 | tail -6\nAllocated resources:\n  Resource  Requests  Limits\n"
     "Events:\n  Type     Reason                Age                From     Message\n"
     "  Warning  EvictionThresholdMet  7m (x38 over 2d)   kubelet  Attempting to reclaim memory\n",
     [("Pod", "ml", "router-0", "Running"), ("Node", None, "gpu-node-7", "EvictionThresholdMet")]),
    # a deployment's row has READY n/m too, but its status column is a number: no pod
    ("$ kubectl get deploy\nNAME   READY   UP-TO-DATE   AVAILABLE   AGE\nvllm   1/1     1            1           5d\n", []),
    # a row cut before its message takes the very next line only, never one after a blank line
    ("default   5m   Warning   BackOff   pod/trainer-0\n\n" + _POD_DESCRIBE.split("\n", 1)[1],
     [("Pod", "default", "trainer-0", "BackOff"), ("Pod", "ml", "router-0", "Running")]),
])
def test_pastes_joined_as_a_terminal_session_joins_them(tmp_path: Path, text: str, rows: list[tuple]) -> None:
    path = tmp_path / "paste.txt"
    path.write_text(text)
    read = parse(path)
    got = [(r["K8S_KIND"], r["K8S_NAMESPACE"], r["K8S_NAME"], r["K8S_REASON"] or r["K8S_STATE"])
           for r in read.rows.to_dicts()] if read.rows.height else []
    assert got == rows
    assert read.records == read.rows.height + read.quarantine.height
    assert all(not (m or "").endswith("Name:             router-0") for m in read.rows.get_column("message").to_list()) \
        if read.rows.height else True
