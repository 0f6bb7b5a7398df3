"""kubectl's objects (`kubectl get … -o json|yaml`) as SREs paste them (`tests/data/kubernetes/`,
each sample cited with its ground truth in SOURCES.md): events, pods and nodes read into the rows and
`K8S_*` columns the table reader writes for the same facts, with their own full times; the same
failure named from an object as from its table twin; hostile YAML (an alias bomb, a document too
large) refused with a quarantined record. Each expected value is first found in the sample's own
SOURCES.md row (`_ground_truth`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analyze import Analysis, analyze, is_anomaly, summary_problems
from forensics.sources import detect
from forensics.sources.kubernetes import kubectl_objects
from forensics.sources.kubernetes.kubectl import K8S_COLUMNS
from forensics.sources.kubernetes.kubectl_objects import parse, sniff

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "kubernetes"
OBJECTS = ["get-events_pvc-unbound-failedscheduling_o-json-truncated.txt",
           "get-events_image-pull-failed-tag-not-found_o-yaml-item.txt",
           "get-event_pulled-normal-single_o-json.txt",
           "get-pod_crashloop-error-exit255-restarts7_o-yaml.txt",
           "get-pod_nginx-healthy-running_o-yaml.txt",
           "get-node_gpu-allocatable-1_o-yaml-prompt-excerpt.txt"]


def _ground_truth(name: str, *facts: str) -> None:
    rows = [line for line in (SAMPLES / "SOURCES.md").read_text().splitlines() if line.startswith(f"| {name} |")]
    assert rows, f"{name}: no row in SOURCES.md"
    for fact in facts:
        assert fact in rows[0], f"{name}: its ground truth does not say {fact!r}"


def _analyze(tmp_path: Path, name: str, folder: str = "logs") -> Analysis:
    where = tmp_path / "bundle" / folder
    where.mkdir(parents=True)
    shutil.copy(SAMPLES / name, where / name)
    return analyze(tmp_path / "bundle", tmp_path / "case")


def _faults(analysis: Analysis) -> dict[str, Any]:
    return {f.kind: f for f in analysis.reported() if is_anomaly(f) and f.kind.startswith("k8s_")}


@pytest.mark.parametrize("name", OBJECTS)
def test_each_object_sample_is_read_by_this_reader_and_every_record_is_counted(name: str) -> None:
    assert detect(SAMPLES / name).name == "kubectl_objects"
    result = parse(SAMPLES / name)
    assert result.records == result.parsed + result.quarantine.height and result.parsed >= 1
    assert set(K8S_COLUMNS) <= set(result.rows.columns)


def test_an_event_list_cut_short_is_read_up_to_the_cut() -> None:
    name = "get-events_pvc-unbound-failedscheduling_o-json-truncated.txt"
    _ground_truth(name, "Pod k8sdeploy-test-pvc-no-pv-f0090cb6f9122249/pvc", "count 25", "first 2020-01-17T04:56:28Z",
                  "last 04:56:55Z", "reason FailedScheduling", "JSON cut after `\"reason\"`", "command line kept")
    result = parse(SAMPLES / name)
    (row,) = result.rows.to_dicts()
    assert (row["K8S_KIND"], row["K8S_NAMESPACE"], row["K8S_NAME"]) == \
        ("Pod", "k8sdeploy-test-pvc-no-pv-f0090cb6f9122249", "pvc")
    assert (row["K8S_REASON"], row["K8S_COUNT"]) == ("FailedScheduling", "25")
    assert row["K8S_TYPE"] is None  # `type` sorts after `reason`: the cut took it
    assert row["ts"].isoformat() == "2020-01-17T04:56:55+00:00"  # the last sighting, a time, not an age
    assert row["message"].startswith("FailedScheduling pod/k8sdeploy-test-pvc-no-pv-f0090cb6f9122249/pvc "
                                     "(x25 since 2020-01-17T04:56:28Z): 0/1 nodes are available: ")
    assert result.damage is not None and "cut short" in result.damage
    assert any("cut" in note for note in result.notes)
    (command,) = result.quarantine.to_dicts()  # the command line before the output
    assert command["line"] == 1 and command["excerpt"].startswith("kubectl_1.16.2 get events -o=json")


def test_an_event_item_pasted_alone_as_yaml() -> None:
    name = "get-events_image-pull-failed-tag-not-found_o-yaml-item.txt"
    _ground_truth(name, "srrs-ci/registry-v1-j6noi", "reason Failed", "count 61", "firstTimestamp 2016-01-29T11:44:55Z",
                  "lastTimestamp 11:54:45Z", "source kubelet ip-10-50-1-50.eu-west-1.compute.internal",
                  "fieldPath spec.containers{registry}", "Tag v2.0.0-bob not found")
    (row,) = parse(SAMPLES / name).rows.to_dicts()
    assert (row["K8S_NAMESPACE"], row["K8S_NAME"], row["K8S_REASON"], row["K8S_COUNT"]) == \
        ("srrs-ci", "registry-v1-j6noi", "Failed", "61")
    assert row["K8S_SOURCE"] == "kubelet, ip-10-50-1-50.eu-west-1.compute.internal"
    assert row["K8S_CONTAINER"] == "registry"
    assert row["ts"].isoformat() == "2016-01-29T11:54:45+00:00"
    assert "(x61 since 2016-01-29T11:44:55Z)" in row["message"] and "Tag v2.0.0-bob not found" in row["message"]


def test_one_event_object_not_in_a_list() -> None:
    name = "get-event_pulled-normal-single_o-json.txt"
    _ground_truth(name, "Pod default/hello-1567197780-mn4mv", "`spec.containers{c1}`", "type Normal", "reason Pulled",
                  "count 1", "lastTimestamp 2019-08-30T20:43:05Z", "kubelet on gke-k9s-default-pool-0fa2fb89-qnkc")
    (row,) = parse(SAMPLES / name).rows.to_dicts()
    assert row["message"] == 'Normal Pulled pod/default/hello-1567197780-mn4mv: Successfully pulled image "blang/busybox-bash"'
    assert (row["K8S_COUNT"], row["K8S_CONTAINER"], row["priority"]) == ("1", "c1", 6)
    assert row["K8S_SOURCE"] == "kubelet, gke-k9s-default-pool-0fa2fb89-qnkc"
    assert row["ts"].isoformat() == "2019-08-30T20:43:05+00:00"


def test_a_pod_in_crash_loop_gives_its_containers_state_last_state_and_limits() -> None:
    name = "get-pod_crashloop-error-exit255-restarts7_o-yaml.txt"
    _ground_truth(name, "Pod default/frontend-service", "container stress", "memory 64Mi", "reason CrashLoopBackOff",
                  "reason Error, exitCode 255", "restartCount 7", "ready false", "`2025-08-2312:13:39Z`")
    result = parse(SAMPLES / name)
    (row,) = result.rows.to_dicts()
    assert (row["K8S_NAMESPACE"], row["K8S_NAME"], row["K8S_CONTAINER"]) == ("default", "frontend-service", "stress")
    assert (row["K8S_TYPE"], row["K8S_REASON"], row["K8S_STATE"], row["K8S_EXIT_CODE"]) == ("Warning", "Error", "Waiting", "255")
    assert (row["K8S_RESTARTS"], row["K8S_READY"], row["K8S_MEMORY_LIMIT"]) == ("7", "False", "64Mi")
    assert row["message"].startswith("Warning Error pod/default/frontend-service container stress: "
                                     "State Waiting (CrashLoopBackOff); Last State Terminated (Error, exit code 255, ")
    # its times lack the `T`: kept as written, the row has no time and the notes say why
    assert row["ts"] is None and "2025-08-2312:13:39Z" in row["message"]
    assert any("RFC 3339" in note and "2025-08-2312:13:39Z" in note for note in result.notes)


def test_a_healthy_pod_object_is_one_normal_row_per_container(tmp_path: Path) -> None:
    name = "get-pod_nginx-healthy-running_o-yaml.txt"
    _ground_truth(name, "container nginx: state running, startedAt 2022-02-17T21:51:05Z", "restartCount 0",
                  "memory 128Mi", "**healthy**")
    (row,) = parse(SAMPLES / name).rows.to_dicts()
    assert (row["K8S_TYPE"], row["K8S_STATE"], row["K8S_READY"], row["K8S_RESTARTS"]) == ("Normal", "Running", "True", "0")
    assert row["ts"].isoformat() == "2022-02-17T21:51:05+00:00"
    assert not _analyze(tmp_path, name).incident_found


def test_a_gpu_node_object_gives_its_gpus_and_says_its_conditions_were_not_pasted() -> None:
    name = "get-node_gpu-allocatable-1_o-yaml-prompt-excerpt.txt"
    _ground_truth(name, "Node 192.168.13.64", "`spec: {}` (no taints", "allocatable cpu 8, memory 49192996Ki, "
                  "nvidia.com/gpu \"1\"", "capacity nvidia.com/gpu \"1\"", "conditions and everything after are not in")
    result = parse(SAMPLES / name)
    (row,) = result.rows.to_dicts()
    assert row["message"] == ("Normal Described node/192.168.13.64: nvidia.com/gpu allocatable 1; "
                              "nvidia.com/gpu capacity 1; its conditions are not in the object")
    (prompt,) = result.quarantine.to_dicts()
    assert prompt["line"] == 1 and prompt["excerpt"].startswith("[root@edl dyc]# kubectl get node")


@pytest.mark.parametrize(("objects", "table", "kind"), [
    # the same kind of event, as `get events -o json` and as `get events -A`
    ("get-events_pvc-unbound-failedscheduling_o-json-truncated.txt",
     "get-events-A_coredns-failedscheduling-no-nodes_all-namespaces.txt", "k8s_failed_scheduling"),
    # the same pod, as `get pod -o yaml` and as `kubectl events --for pod/frontend-service`
    ("get-pod_crashloop-error-exit255-restarts7_o-yaml.txt", "kubectl-events_crashloop-backoff-x280_for-pod-table.txt",
     "k8s_crash_loop"),
    # a container in crash loop after an error exit, as `get pod -o yaml` and as `describe pod`
    ("get-pod_crashloop-error-exit255-restarts7_o-yaml.txt", "describe-pod_crashloop-error-exit1_full.txt",
     "k8s_crash_loop"),
    # an image not pulled, as a `get events -o yaml` item and as `get pods` + `describe pod`
    ("get-events_image-pull-failed-tag-not-found_o-yaml-item.txt",
     "get-pods-A-and-describe_imagepullbackoff-fluentd_legacy-excerpt.txt", "k8s_image_pull"),
])
def test_an_object_and_its_table_twin_name_the_same_failure(tmp_path: Path, objects: str, table: str, kind: str) -> None:
    from_objects = _faults(_analyze(tmp_path / "objects", objects, "k8s"))
    from_table = _faults(_analyze(tmp_path / "table", table))
    assert kind in from_objects and kind in from_table, (sorted(from_objects), sorted(from_table))
    # when seen: objects give times, tables ages (times only against a capture time these pastes lack)
    seen = {"first_seen_ago", "last_seen_ago", "first_seen", "last_seen", "seen_times"}
    assert set(from_objects[kind].facts) - seen <= \
        set(from_table[kind].facts) | {"containers", "exit_codes", "memory_limits", "restarts"}


def test_the_crash_loop_object_gives_the_facts_its_ground_truth_states(tmp_path: Path) -> None:
    name = "get-pod_crashloop-error-exit255-restarts7_o-yaml.txt"
    _ground_truth(name, "exitCode 255", "restartCount 7", "memory 64Mi", "container stress")
    facts = _faults(_analyze(tmp_path, name))["k8s_crash_loop"].facts
    assert (facts["exit_codes"], facts["restarts"], facts["memory_limits"], facts["containers"]) == \
        (["255"], 7, ["64Mi"], ["stress"])
    assert facts["objects"] == ["pod/default/frontend-service"]


@pytest.mark.parametrize("name", OBJECTS)
def test_every_object_sample_analyzes_cleanly(tmp_path: Path, name: str) -> None:
    analysis = _analyze(tmp_path, name, "k8s")
    (entry,) = analysis.timeline.manifest["inputs"]
    assert entry["records"] == entry["parsed"] + entry["quarantined"] and entry["parsed"] > 0
    assert summary_problems(analysis.summary()) == []


def test_events_k8s_io_v1_shape_is_read_like_core_v1(tmp_path: Path) -> None:
    """No whole events.k8s.io/v1 paste was found to cite (SOURCES.md): this object is built from the
    API's field names (regarding, note, series, reportingController, deprecated…), with the core/v1
    values of the cited sample get-events_image-pull-failed-tag-not-found_o-yaml-item.txt."""
    event = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "eventTime": None,
             "metadata": {"name": "registry-v1-j6noi.142de30bef3dc23b", "namespace": "srrs-ci"},
             "regarding": {"kind": "Pod", "namespace": "srrs-ci", "name": "registry-v1-j6noi",
                           "fieldPath": "spec.containers{registry}"},
             "reason": "Failed", "type": "Warning", "reportingController": "kubelet",
             "note": 'Failed to pull image "quay.io/ukhomeofficedigital/s3registry:v2.0.0-bob"',
             "deprecatedCount": 61, "deprecatedFirstTimestamp": "2016-01-29T11:44:55Z",
             "deprecatedLastTimestamp": "2016-01-29T11:54:45Z"}
    path = tmp_path / "events.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [event]}, indent=4))
    (row,) = parse(path).rows.to_dicts()
    assert (row["K8S_REASON"], row["K8S_COUNT"], row["K8S_SOURCE"], row["K8S_CONTAINER"]) == \
        ("Failed", "61", "kubelet", "registry")
    assert row["ts"].isoformat() == "2016-01-29T11:54:45+00:00" and row["source_line"] == 5
    assert row["message"].startswith('Warning Failed pod/srrs-ci/registry-v1-j6noi (x61 since 2016-01-29T11:44:55Z): '
                                     'Failed to pull image "quay.io')
    series = dict(event, series={"count": 7, "lastObservedTime": "2016-01-29T12:00:00.123456Z"})
    path.write_text(json.dumps(series))
    (row,) = parse(path).rows.to_dicts()
    # as kubectl describe does: a series' count and last sighting before the deprecated ones
    assert row["K8S_COUNT"] == "7" and row["ts"].isoformat() == "2016-01-29T12:00:00.123456+00:00"


# No whole pod or node object in these states was found to cite (SOURCES.md): each object below is
# built, in the API's field names, from the facts of a cited table or describe sample, and must name
# the failure that sample names, with the same facts.
_BUILT = {
    "describe-pod_failedscheduling-insufficient-nvidia-gpu_full.txt": {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "user-profile-resources-659d4dd659-cq4kq", "namespace": "default"},
        "spec": {"containers": [{"name": "profile-getter", "resources": {"limits": {"nvidia.com/gpu": "5"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                   "reason": "Unschedulable", "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
                   "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."}]}},
    "get-events_evicted-memory-pressure_headerless-redacted.txt": {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "egg-<id here>"},
        "status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory. "
                   "Container egg was using 5053216Ki, which exceeds its request of 0."}},
    "describe-node_notready-kubelet-stopped-posting_full.txt": {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "kube-worker-1"},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                   "message": "Kubelet stopped posting node status.",
                                   "lastHeartbeatTime": "2022-02-17T22:12:40Z",
                                   "lastTransitionTime": "2022-02-17T22:13:52Z"}]}},
}


@pytest.mark.parametrize(("table", "kind", "truth", "facts"), [
    ("describe-pod_failedscheduling-insufficient-nvidia-gpu_full.txt", "k8s_failed_scheduling",
     ("FailedScheduling — Insufficient nvidia.com/gpu (capacity)",),
     {"insufficient": ["nvidia.com/gpu"], "objects": ["pod/default/user-profile-resources-659d4dd659-cq4kq"]}),
    # (its headerless rows are read as log lines there, with no K8S_* facts; the object has them)
    ("get-events_evicted-memory-pressure_headerless-redacted.txt", "k8s_evicted", ("**Evicted — node memory pressure",),
     {}),
    ("describe-node_notready-kubelet-stopped-posting_full.txt", "k8s_node_not_ready",
     ("**NodeNotReady — kubelet unreachable, node down**", "transition 17:13:52"), {"objects": ["node/kube-worker-1"]}),
])
def test_objects_built_from_a_samples_facts_name_its_failure(tmp_path: Path, table: str, kind: str,
                                                            truth: tuple[str, ...], facts: dict[str, Any]) -> None:
    _ground_truth(table, *truth)
    logs = tmp_path / "bundle" / "k8s"
    logs.mkdir(parents=True)
    (logs / "objects.json").write_text(json.dumps(_BUILT[table], indent=4))
    from_objects = _faults(analyze(tmp_path / "bundle", tmp_path / "case"))
    from_table = _faults(_analyze(tmp_path / "table", table))
    assert kind in from_objects and kind in from_table, (sorted(from_objects), sorted(from_table))
    for key, value in facts.items():
        assert from_objects[kind].facts.get(key) == from_table[kind].facts.get(key) == value, key
    if kind == "k8s_node_not_ready":  # the transition is a time of its own: Thu, 17 Feb 2022 17:13:52 -0500
        assert from_objects[kind].at.isoformat() == "2022-02-17T22:13:52+00:00"


def test_documents_separated_by_dashes_and_prompts_are_each_read(tmp_path: Path) -> None:
    pod = (SAMPLES / "get-pod_nginx-healthy-running_o-yaml.txt").read_text()
    item = (SAMPLES / "get-events_image-pull-failed-tag-not-found_o-yaml-item.txt").read_text()
    event = (SAMPLES / "get-event_pulled-normal-single_o-json.txt").read_text()
    path = tmp_path / "pasted.txt"
    path.write_text(f"$ kubectl get pod x -o yaml\n{pod}---\n{item}\n$ kubectl get event y -o json\n{event}")
    result = parse(path)
    assert sorted(result.rows.get_column("K8S_REASON").drop_nulls().to_list()) == ["Failed", "Pulled"]
    assert result.rows.height == 3 and result.quarantine.get_column("line").to_list() == \
        [1, 2 + len(pod.splitlines()) + 1 + len(item.splitlines()) + 1]
    assert result.records == result.parsed + result.quarantine.height


def test_an_alias_bomb_is_refused_with_a_quarantined_record(tmp_path: Path) -> None:
    levels = [f'l{n}: &l{n} [{", ".join([f"*l{n - 1}"] * 9)}]' for n in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: lol\nl0: &l0 [lol]\n" + "\n".join(levels) + "\n")
    assert sniff(path.read_bytes()[:4096], path)
    result = parse(path)
    (refused,) = result.quarantine.to_dicts()
    assert "alias" in refused["reason"] and refused["line"] == 5  # `l0: &l0 [lol]`: the node every alias comes to
    assert result.rows.height == 0 and result.records == 1


def test_a_yaml_document_over_the_bound_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubectl_objects, "MAX_YAML_BYTES", 1000)
    path = tmp_path / "big.yaml"
    shutil.copy(SAMPLES / "get-pod_nginx-healthy-running_o-yaml.txt", path)
    result = parse(path)
    (refused,) = result.quarantine.to_dicts()
    assert "not read" in refused["reason"] and refused["line"] == 1 and result.records == 1


def test_objects_of_other_kinds_and_broken_yaml_are_quarantined_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text("apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata:\n    name: web\n"
                    "- apiVersion: v1\n  kind: Event\n  reason: BackOff\n  involvedObject:\n    kind: Pod\n"
                    "    name: a\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: [unclosed\nkind: List\n")
    result = parse(path)
    assert result.rows.get_column("K8S_REASON").to_list() == ["BackOff"]
    assert [(q["line"], q["reason"].split(" (")[0]) for q in result.quarantine.to_dicts()] == \
        [(3, "a Kubernetes Service: not read"), (13, "YAML not readable from here")]
    assert result.damage is not None and result.records == 3


@pytest.mark.parametrize(("name", "head"), [
    ("journal.json", b'{"__CURSOR":"s=1","__REALTIME_TIMESTAMP":"1","MESSAGE":"apiVersion: v1 kind: Pod"}\n'),
    ("dump.json", b'[{"pid": 12, "thread_id": 1, "frames": []}]'),
    ("answer.json", b'{"status":"success","data":{"resultType":"matrix","result":[]}}'),
    ("fr.json", b'{"entries": [], "pg_config": {}, "pg_status": {}}'),
    ("notes.txt", b"we ran kubectl get pods -o yaml; it said apiVersion: v1 and kind: Pod\n" * 20),
])
def test_the_sniffer_leaves_other_json_and_prose_to_their_readers(tmp_path: Path, name: str, head: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(head)
    assert not sniff(head, path)


def test_kubectl_tables_and_logs_stay_with_their_readers(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for path in sorted(SAMPLES.glob("*.txt")):
        if path.name not in OBJECTS:
            shutil.copy(path, logs / path.name)
            assert detect(logs / path.name).name != "kubectl_objects", path.name


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(
    st.sampled_from([line for name in OBJECTS for line in (SAMPLES / name).read_text().splitlines()]),
    st.sampled_from(["---", "...", "{", "}", "[", "]", "- apiVersion: v1", "  kind: Event", "items:", "a: &x [1]",
                     "b: *x", '{"kind": "Pod", "status": {"containerStatuses": [{"state": {"waiting": {}}}]}}']),
    st.text(max_size=200)), max_size=60))
def test_any_mix_of_real_and_hostile_lines_is_read_or_quarantined(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "mixed.txt"
    path.write_text("\n".join(lines), errors="surrogatepass")
    result = parse(path)
    assert result.records == result.rows.height + result.quarantine.height


def test_an_events_own_first_and_last_times_are_the_findings_first_and_last_seen(tmp_path: Path) -> None:
    """Issue 52: an Event object's firstTimestamp / lastTimestamp are real times, said to be the events' own."""
    name = "get-events_pvc-unbound-failedscheduling_o-json-truncated.txt"
    _ground_truth(name, "first 2020-01-17T04:56:28Z, last 04:56:55Z")
    facts = _faults(_analyze(tmp_path, name))["k8s_failed_scheduling"].facts
    assert (facts["first_seen"], facts["last_seen"]) == ("2020-01-17T04:56:28+00:00", "2020-01-17T04:56:55+00:00")
    assert facts["seen_times"] == "the events' own times (kubectl -o json / -o yaml)"
