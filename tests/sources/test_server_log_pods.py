"""A server log whose lines carry `kubectl logs --prefix`'s `[pod/NAME/CONTAINER] ` but no other sign
of kubectl (so the server log reader reads it) keeps each record's pod and container as the `K8S_*`
columns kubectl's readers give: the prefix is taken off the message, never the facts it held. The
sample is the real paste of tests/data/kubernetes/logs-prefix_multi-pod-access-log_prefix-true.txt
(its source and ground truth in that folder's SOURCES.md), without its `ex: kubectl …` line."""

from __future__ import annotations

from pathlib import Path

from forensics.sources.logs import server_log

SAMPLE = Path(__file__).parents[1] / "data" / "kubernetes" / "logs-prefix_multi-pod-access-log_prefix-true.txt"


def test_the_prefixs_pod_and_container_are_kept_as_columns(tmp_path: Path) -> None:
    lines = [line for line in SAMPLE.read_text().splitlines() if line.startswith("[pod/")]
    log = tmp_path / "logs" / "node-0" / "echo.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(lines) + "\n")
    rows = server_log.parse(log).rows
    assert rows.select("K8S_KIND", "K8S_NAME", "K8S_CONTAINER").rows() == [
        ("Pod", "echo-req-7cfd7bf68f-nk5kr", "hello"), ("Pod", "echo-req-7cfd7bf68f-dhrwd", "hello")]
    assert all(m.startswith("172.17.0.1 - - [22/Nov/2020:") for m in rows.get_column("message"))


def test_a_log_without_the_prefix_has_no_pod_columns(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "node-0" / "plain.log"
    log.parent.mkdir(parents=True)
    log.write_text("[2025-03-03 17:53:04] Receive: obj=GenerateReqInput(text=None)\n")
    assert "K8S_NAME" not in server_log.parse(log).rows.columns
