"""`docker compose logs` output: each line behind the container's name and "| ". Lines quoted from a
public report (intel/llm-scaler#154: a vLLM worker that died under compose) and a log whose lines
start with their level and "| " (loguru's `{level} | {message}`), which is no container's name."""

from __future__ import annotations

from pathlib import Path

from forensics.analyze import analyze
from forensics.sources.logs import server_log

COMPOSE = """\
eap-llm-server-on-arc  | INFO:     127.0.0.1:48802 - "GET /health HTTP/1.1" 200 OK
eap-llm-server-on-arc  | ERROR 11-08 11:01:29 [multiproc_executor.py:135] Worker proc VllmWorker-3 died unexpectedly, shutting down executor.
eap-llm-server-on-arc  | ERROR 11-08 11:01:30 [core.py:502] EngineCore encountered a fatal error.
"""


def test_compose_prefixes_are_taken_off_and_the_container_kept(tmp_path: Path) -> None:
    log = tmp_path / "bundle" / "logs" / "gpu-node-00" / "vllm.log"
    log.parent.mkdir(parents=True)
    log.write_text(COMPOSE)
    rows = server_log.parse(log).rows
    stamped = rows.filter(rows["message"].str.starts_with("ERROR 11-08"))
    assert stamped.height == 2 and stamped["ts"].dt.strftime("%m-%d %H:%M:%S").to_list() == ["11-08 11:01:29",
                                                                                            "11-08 11:01:30"]
    assert set(rows["LOG_PROCESS"].to_list()) == {"eap-llm-server-on-arc"}
    analysis = analyze(tmp_path / "bundle", tmp_path / "case")
    (died,) = [f for f in analysis.findings if f.kind == "worker_died"]
    assert died.at is not None and died.at.strftime("%H:%M:%S") == "11:01:29"


def test_a_level_before_a_bar_is_no_container(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("INFO | model loaded\nWARNING | KV cache 95% full\nERROR | request 7 failed\n")
    rows = server_log.parse(log).rows
    assert rows["message"].to_list() == ["INFO | model loaded", "WARNING | KV cache 95% full", "ERROR | request 7 failed"]
