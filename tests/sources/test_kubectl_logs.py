"""Container logs as `kubectl logs` (`--timestamps`, `--prefix`, `--previous`) and stern print them
(`forensics.sources.kubernetes.kubectl_logs`), read from the real public samples of
`tests/data/kubernetes/` (each cited with its ground truth in SOURCES.md): every line lands with
its pod, container and own time, the rest read as a server log line."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.sources import detect
from forensics.sources.kubernetes.kubectl_logs import parse
from tests.sources.test_kubectl import SAMPLES, _ground_truth



def _placed(tmp_path: Path, name: str, folder: str = "logs", text: str | None = None) -> Path:
    path = tmp_path / "bundle" / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        shutil.copy(SAMPLES / name, path)
    else:
        path.write_text(text)
    return path


def test_stern_lines_keep_their_pod_container_and_the_engines_own_stamp(tmp_path: Path) -> None:
    name = "stern_llmd-decode-vllm-shutdown-proxy-waiting_pod-container-prefix.txt"
    _ground_truth(name, "ms-pd-llm-d-modelservice-decode-6c8f9c4df6-vh88z", "routing-proxy E1027 22:25:32.43–.58",
                  "container vllm")
    path = _placed(tmp_path, name)
    assert detect(path).name == "kubectl_logs"
    result = parse(path)
    rows = result.rows
    assert result.records == rows.height + result.quarantine.height == 7
    assert set(rows.get_column("K8S_NAME")) == {"ms-pd-llm-d-modelservice-decode-6c8f9c4df6-vh88z"}
    proxy = rows.filter(pl.col("K8S_CONTAINER") == "routing-proxy")
    # glog's E1027 22:25:32.427556 …: an error, at the time the line wrote (no year: the notes say which)
    assert proxy.height == 4 and set(proxy.get_column("priority")) == {3}
    assert [t.strftime("%m-%d %H:%M:%S.%f") for t in proxy.get_column("ts")] == [
        "10-27 22:25:32.427556", "10-27 22:25:32.477379", "10-27 22:25:32.528248", "10-27 22:25:32.577502"]
    assert proxy.get_column("message").str.starts_with("E1027 22:25:32.").all()
    vllm = rows.filter(pl.col("K8S_CONTAINER") == "vllm")
    assert vllm.get_column("message").to_list()[-1] == "INFO:     Finished server process [1]"
    assert set(vllm.get_column("LOG_PROCESS")) == {"APIServer pid=1"} and set(vllm.get_column("pid")) == {1}
    assert any("without a year" in note for note in result.notes)


def test_sterns_added_container_lines_are_passed_over_and_its_command_quarantined(tmp_path: Path) -> None:
    name = "stern_kserve-activator-probe-503_command-and-output.txt"
    _ground_truth(name, "activator-5965bb7b89-dmjkj/activator", "the two `+` container-added lines")
    result = parse(_placed(tmp_path, name))
    (row,) = result.rows.to_dicts()
    assert (row["K8S_NAME"], row["K8S_CONTAINER"], row["unit"], row["identifier"]) == (
        "activator-5965bb7b89-dmjkj", "activator", "activator-5965bb7b89-dmjkj", "activator")
    assert row["message"].startswith('{"severity":"ERROR"') and row["priority"] == 3
    (bad,) = result.quarantine.to_dicts()
    assert bad["line"] == 1 and bad["excerpt"].startswith("$ stern -n knative-serving")
    assert any("2 lines of stern's saying a container was added or removed" in note for note in result.notes)


def test_kubectl_prefix_names_each_lines_pod_and_container(tmp_path: Path) -> None:
    name = "logs-prefix_multi-pod-access-log_prefix-true.txt"
    _ground_truth(name, "[pod/echo-req-7cfd7bf68f-nk5kr/hello]", "[pod/echo-req-7cfd7bf68f-dhrwd/hello]")
    path = _placed(tmp_path, name)
    assert detect(path).name == "kubectl_logs"
    result = parse(path)
    assert result.rows.select("K8S_NAME", "K8S_CONTAINER").rows() == [
        ("echo-req-7cfd7bf68f-nk5kr", "hello"), ("echo-req-7cfd7bf68f-dhrwd", "hello")]
    assert result.rows.get_column("message").str.starts_with("172.17.0.1 - - [22/Nov/2020:").all()
    # an access log's time is inside the line, not at its start: read at no time, and said so
    assert result.rows.get_column("ts").null_count() == 2
    assert any("2 records with no time" in note for note in result.notes)
    assert result.quarantine.get_column("excerpt").to_list() == ["ex: kubectl logs -l app=echo-req --prefix=true"]


def test_kubectl_timestamps_are_the_lines_time_in_utc(tmp_path: Path) -> None:
    name = "logs-timestamps_eksa-packages-controller-info_with-and-without-flag.txt"
    _ground_truth(name, "2022-08-18T19:01:50.930723793Z and 19:02:33.100605706Z")
    path = _placed(tmp_path, name)
    assert detect(path).name == "kubectl_logs"  # the paste's own `k logs --timestamps=true` says kubectl
    result = parse(path)
    assert result.rows.get_column("ts").to_list() == [datetime(2022, 8, 18, 19, 1, 50, 930723, tzinfo=UTC),
                                                       datetime(2022, 8, 18, 19, 2, 33, 100605, tzinfo=UTC)]
    assert set(result.rows.get_column("data_type")) == {"kubectl:log"}
    assert set(result.rows.get_column("LOG_TIME_SOURCE")) == {"kubectl --timestamps"}
    assert set(result.rows.get_column("priority")) == {6}  # the app's own tab-separated INFO
    # the two commands and the two lines of the run without --timestamps: quarantined, each with its line
    assert result.quarantine.get_column("line").to_list() == [1, 2, 3, 4]
    assert result.records == 6


def test_kubectls_stamp_wins_over_the_apps_own(tmp_path: Path) -> None:
    name = "logs-timestamps_kubernetes-vault-logrus-debug_double-stamp.txt"
    _ground_truth(name, "kubectl's stamp 2017-05-18T18:16:07.094861927Z")
    result = parse(_placed(tmp_path, name, folder="kubernetes"))
    (row,) = result.rows.to_dicts()
    assert row["ts"] == datetime(2017, 5, 18, 18, 16, 7, 94861, tzinfo=UTC)
    assert row["message"].startswith('time="2017-05-18T18:16:07Z" level=debug msg="Attempting to push')
    assert result.quarantine.get_column("excerpt").to_list() == ["Kubernetes-Vault logs"]


def test_the_same_stamps_without_a_sign_of_kubectl_stay_with_the_server_log_reader(tmp_path: Path) -> None:
    """`docker logs -t` writes the same RFC3339Nano stamps: without a kubectl command, a capture
    header naming a pod or a `kubernetes/` folder, the file is the server log reader's as before."""
    name = "logs-timestamps_static-site-generator-nanoseconds_plain.txt"
    _ground_truth(name, "2023-08-17T07:52:26.131134150Z, .144996867Z, .146209081Z")
    assert detect(_placed(tmp_path, name, folder="logs")).name == "server_log"
    path = _placed(tmp_path, name, folder="kubernetes")
    assert detect(path).name == "kubectl_logs"
    assert [t.strftime("%H:%M:%S.%f") for t in parse(path).rows.get_column("ts")] == [
        "07:52:26.131134", "07:52:26.144996", "07:52:26.146209"]


def test_prefix_then_stamp_and_a_capture_header_for_previous_logs(tmp_path: Path) -> None:
    """`--prefix --timestamps` together: kubectl writes its prefix before the kubelet's stamp (the
    order guidebooks/store's `kubectl logs --prefix --timestamps | awk` reads, cited in SOURCES.md);
    the real lines of the eksa sample, so prefixed, keep pod, container and time. A capture header
    as `collect` writes it names the pod of lines without a prefix and says `--previous`."""
    stamped = [line for line in (SAMPLES / "logs-timestamps_eksa-packages-controller-info_with-and-without-flag.txt")
               .read_text().splitlines() if line.startswith("2022-")]
    pod = "eks-anywhere-packages-5b47488b49-k5d9z"
    prefixed = _placed(tmp_path, "prefixed.txt", text="".join(f"[pod/{pod}/manager] {line}\n" for line in stamped))
    rows = parse(prefixed).rows
    assert rows.select("K8S_NAME", "K8S_CONTAINER").unique().rows() == [(pod, "manager")]
    assert rows.get_column("ts").dt.strftime("%H:%M:%S%.6f").to_list() == ["19:01:50.930723", "19:02:33.100605"]
    header = f"# capture ts=2022-08-18T19:30:00Z namespace=eksa-packages pod={pod} container=manager previous=true\n"
    previous = _placed(tmp_path, "previous.txt", folder="kubernetes/eksa-packages",
                       text=header + "".join(f"{line}\n" for line in stamped))
    assert detect(previous).name == "kubectl_logs"
    result = parse(previous)
    assert result.rows.select("K8S_NAMESPACE", "K8S_NAME", "K8S_CONTAINER", "K8S_STATE").unique().rows() == [
        ("eksa-packages", pod, "manager", "previous run")]
    assert result.quarantine.height == 0 and any("previous run" in note for note in result.notes)


def test_sterns_colours_are_taken_off_the_names(tmp_path: Path) -> None:
    """stern colours the pod and the container (its default template, `{{color .PodColor .PodName}}
    {{color .ContainerColor .ContainerName}} {{.Message}}`): the sample's lines so coloured read the same."""
    name = "stern_llmd-decode-vllm-shutdown-proxy-waiting_pod-container-prefix.txt"
    plain = parse(_placed(tmp_path, name)).rows
    coloured = "".join(f"\x1b[32m{pod}\x1b[0m \x1b[33m{container}\x1b[0m {rest}\n" for pod, container, rest in
                       (line.split(" ", 2) for line in (SAMPLES / name).read_text().splitlines()))
    path = _placed(tmp_path, "coloured.txt", text=coloured)
    assert detect(path).name == "kubectl_logs"
    rows = parse(path).rows
    assert rows.select("K8S_NAME", "K8S_CONTAINER", "ts", "message").equals(
        plain.select("K8S_NAME", "K8S_CONTAINER", "ts", "message"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(
    st.sampled_from([line for p in sorted(SAMPLES.glob("*.txt")) if p.name.startswith(("logs", "stern"))
                     for line in p.read_text().splitlines()]),
    st.sampled_from(["[pod/a-0/c] ", "[pod/a-0/c] 2026-06-18T21:34:47.1Z", "2026-06-18T21:34:47Z   File \"x\"",
                     "+ a-12345 › c", "a-12345 c \x1b[31m", "# capture ts=nope pod=x"]),
    st.text(max_size=120)), max_size=30))
def test_any_mix_of_real_and_hostile_lines_is_read_or_quarantined(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "kubernetes" / "mixed.log"
    path.parent.mkdir(exist_ok=True)
    path.write_text("[pod/x-0/c] 2026-06-18T21:34:47.000000001Z start\n" + "\n".join(lines), errors="surrogatepass")
    result = parse(path)
    assert result.records == result.rows.height + result.quarantine.height
    assert result.rows.height >= 1
