"""Evidence at a scale no real incident reaches still gives findings of a bounded size that say
what it holds: thousands of GPUs, a million ranks."""

from __future__ import annotations

from pathlib import Path


def test_xid_lines_on_thousands_of_gpus_name_the_gpus_not_one_address(tmp_path: Path) -> None:
    from forensics.analyze import analyze
    from tests.detect.test_failures import _journal

    lines = [(n // 100, "kernel", "4", f"NVRM: Xid (PCI:{n // 256:04x}:{n % 256:02x}:00): 79, pid=2155, name=python3, "
              "GPU has fallen off the bus.") for n in range(3000)]
    bundle = tmp_path / "bundle" / "journal"
    bundle.mkdir(parents=True)
    (bundle / "host.export").write_bytes(_journal(*lines))
    (xid,) = [f for f in analyze(tmp_path / "bundle", tmp_path / "case").findings if f.kind == "gpu_xid_error"]
    assert "Xid 79 × 3000 (on 3,000 GPUs: PCI:0000:00:00, PCI:0000:01:00," in xid.text
    assert "and 2,992 more)" in xid.text


def test_a_million_rank_torchfrtrace_text_and_a_watchdog_line_per_rank_give_findings_of_bounded_size(
        tmp_path: Path) -> None:
    from forensics.analyze import analyze

    logs = tmp_path / "bundle" / "logs"
    logs.mkdir(parents=True)
    missing = ", ".join(str(r) for r in range(1, 1_000_000))
    (logs / "fr.txt").write_text(f"Not all ranks joining collective 5 at entry 4\ngroup info: 0:default_pg\n"
                                 f"collective: nccl:all_reduce\nmissing ranks: {{{missing}}}\nexpected ranks: 1000000\n"
                                 "collective state: scheduled\n")
    (logs / "nccl.log").write_text("".join(
        f"[rank{r}]:[E810 03:04:10.852000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=78, OpType=BROADCAST, NumelIn=80, NumelOut=80, Timeout(ms)=600000) ran "
        "for 600087 milliseconds before timing out.\n" for r in range(50_000)))
    findings = {f.kind: f for f in analyze(tmp_path / "bundle", tmp_path / "case").findings}
    assert max(len(f.text) for f in findings.values()) < 2000  # 12.9 MB for one finding before
    assert "ranks 0–49999 in BROADCAST seq 78, ran 600 s of its 600 s timeout" in findings["collective_timeout"].text
    assert "Ranks 1–999999 of the group's 1000000 ranks never joined collective 5" in findings["collective_verdict"].text
