"""Device errors the verdict must not make more of than they are (issue 51): a bundle holding only
non-fatal device errors lists them and says no incident was found; an NVSwitch's SXid lines are
not vLLM's CUDA errors.

Every line is copied whole from the public source named beside it; what a test expects is what
NVIDIA's catalogue and the kernel say of those lines (IGNORE, Nonfatal, Corrected), never what the
suite printed."""

from __future__ import annotations

from pathlib import Path

from forensics.analyze import Analysis, analyze, is_anomaly
from forensics.render.text_report import report_text
from forensics.profiles import load_profile

NONFATAL_TRACK = "non-fatal device errors"

# Only device errors the device went on from, each non-fatal by its source's own word:
NONFATAL_ONLY = "\n".join([
    # stas00/ml-engineering@7bc7c305:compute/accelerator/nvidia/debug.md — Xid 63, NVIDIA's action IGNORE
    "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
    # https://github.com/leptonai/gpud/pull/1160 — an NVLink5 Xid whose line says Nonfatal
    ("NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000 0x00000000 "
     "0x00000000 0x00000000)"),
    # https://github.com/NVIDIA/nvtrust/issues/124 — a non-fatal SXid with its data and severity lines
    ("[   38.175561] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002b, 0x0000002b, 0x00000000, "
     "0x0000002b, 0x80005302, 0x00000000, 0x00000000, 0x00000000, 0x00000000}"),
    "[   38.178720] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt",
    ("[   38.180708] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 Sub-engine "
     "instance 00"),
    # https://github.com/wilicc/gpu-burn/issues/1 — a corrected PCIe error
    ("[74785.660380] pcieport 0000:00:02.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, "
     "id=0010(Transmitter ID)"),
]) + "\n"

# https://github.com/NVIDIA/nvtrust/issues/124 — the same SXid's three lines (data, class, severity)
SXID = "\n".join(NONFATAL_ONLY.splitlines()[2:5]) + "\n"


def _analysis(tmp_path: Path, files: dict[str, str], profile: str | None = None) -> Analysis:
    for name, text in files.items():
        path = tmp_path / "bundle" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return analyze(tmp_path / "bundle", tmp_path / "case", load_profile(profile) if profile else None)


def test_a_bundle_of_only_non_fatal_device_errors_lists_them_and_finds_no_incident(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/kmsg.log": NONFATAL_ONLY})
    kinds = {f.kind for f in analysis.findings}
    assert {"gpu_xid_nonfatal", "nvswitch_nonfatal_error", "pcie_nonfatal_error"} <= kinds
    for finding in analysis.findings:
        if finding.kind in ("gpu_xid_nonfatal", "nvswitch_nonfatal_error", "pcie_nonfatal_error"):
            assert finding.track == NONFATAL_TRACK and not is_anomaly(finding), finding.text
    assert not analysis.incident_found, [f.text for f in analysis.findings if is_anomaly(f)]
    assert analysis.signature() is None
    text = report_text(analysis)
    assert f"## track: {NONFATAL_TRACK}" in text and "[gpu_xid_nonfatal]" in text
    assert "[nvswitch_nonfatal_error]" in text and "[pcie_nonfatal_error]" in text
    assert "no incident found" in text
    assert analysis.summary()["incident_found"] is False


def test_nvswitch_sxid_lines_are_no_cuda_error_under_vllm(tmp_path: Path) -> None:
    """vLLM's `cuda_error` once matched a bare "Xid": the SXid's data and severity lines (which the
    fabric layer gives no kind) became CUDA / NCCL errors of the engine."""
    analysis = _analysis(tmp_path, {"logs/hgx-00/dmesg.log": SXID}, "vllm")
    assert analysis.timeline.profile.name == "vllm"
    assert [f.kind for f in analysis.findings if f.kind == "cuda_error"] == []
    (nonfatal,) = [f for f in analysis.findings if f.kind == "nvswitch_nonfatal_error"]
    assert [(s["code"], s["links"]) for s in nonfatal.facts["sxids"]] == [(22013, ["44"])]


def test_a_real_xid_line_is_still_read_under_vllm(tmp_path: Path) -> None:
    """The word "Xid" of the driver's own line still reads (here as the kernel layer's kind, which
    comes first): the narrower pattern lost no Xid."""
    # NVIDIA's Xid catalogue page, "Step 1: Determine Xid Code"
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/kmsg.log": "[...] NVRM: Xid (PCI:0000:5a:00): 79, GPU has "
                                                                   "fallen off the bus.\n"}, "vllm")
    assert {f.kind for f in analysis.findings} & {"gpu_xid_error", "gpu_fallen_off_bus"}
    assert analysis.incident_found
