"""Bundles as people pack them: `tar czf b.tgz NAME/` (a top-level folder), a zip, a folder copied
inside another. Each finds its incident.toml, so the title, the annotations and the key times
they give do not depend on how someone packed the files (the reference incident: detected 21:38:30,
TTD 3m43s, from its annotation)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from forensics.analyze import analyze
from forensics.case.bundle import open_bundle
from tests.test_report import REFERENCE

TITLE = "DeepSeek-V4-Flash PD wedge: decode TP ranks desynced while health stayed green"


def _packed(tmp_path: Path, how: str) -> Path:
    shutil.copytree(REFERENCE, tmp_path / "src" / REFERENCE.name)
    if how == "nested folder":
        return tmp_path / "src"
    packed = tmp_path / ("b.zip" if how == "zip" else f"b.{how}")
    command = {"tgz": ["tar", "czf", str(packed), REFERENCE.name], "tar.zst": ["tar", "--zstd", "-cf", str(packed),
                                                                               REFERENCE.name],
               "zip": ["zip", "-qr", str(packed), REFERENCE.name]}[how]
    if shutil.which(command[0]) is None or (how == "tar.zst" and shutil.which("zstd") is None):
        pytest.skip(f"{command[0]} not installed")
    subprocess.run(command, cwd=tmp_path / "src", check=True)
    return packed


@pytest.mark.parametrize("how", ["tgz", "tar.zst", "zip", "nested folder"])
def test_a_packed_bundle_keeps_its_incident_toml(tmp_path: Path, how: str) -> None:
    with open_bundle(_packed(tmp_path, how)) as folder:
        analysis = analyze(folder, tmp_path / "case")
    assert analysis.timeline.incident.title == TITLE
    times = analysis.key_times
    assert times.detected.strftime("%H:%M:%S") == "21:38:30" and times.seconds("detected") == 223
    assert any(f"{REFERENCE.name}/incident.toml used as the bundle's incident.toml" in n
               for n in analysis.timeline.incident.notes)


def test_of_two_incident_tomls_the_shallowest_wins_and_the_note_names_both(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    for where in ("a", "b/c"):
        (bundle / where).mkdir(parents=True)
        (bundle / where / "incident.toml").write_text(f'title = "from {where}"\n')
    (bundle / "a" / "x.log").write_text("[2026-06-18 21:00:00] hello\n")
    analysis = analyze(bundle, tmp_path / "case")
    assert analysis.timeline.incident.title == "from a"
    assert "a/incident.toml used as the bundle's incident.toml (also found, not used: b/c/incident.toml)" in \
        analysis.timeline.incident.notes
