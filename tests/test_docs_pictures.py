"""The docs' pictures are of today's report: `docs/pictures.json` holds the digest of what
`scripts/docs_pictures.py` made them from, and any change to those files without making the
pictures again fails here."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "docs_pictures.py"


def _script():  # noqa: ANN202 - a module loaded from its path
    spec = importlib.util.spec_from_file_location("docs_pictures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def test_pictures_are_made_from_the_files_as_they_are_now() -> None:
    script = _script()
    recorded = json.loads(script.DIGESTS.read_text())
    assert recorded["inputs"] == list(script.INPUTS)
    assert recorded["sha256"] == script.inputs_digest(), (
        "the report's code, notebook or reference bundle changed since docs/timeline.png and docs/notebook.png "
        "were made: run `.venv/bin/python scripts/docs_pictures.py` and commit the pictures")
    assert _png_size(script.NOTEBOOK) == script.NOTEBOOK_SIZE
    assert _png_size(script.THIN) == (1280, 720) or _png_size(script.THIN)[0] > 1000
    width, height = _png_size(script.TIMELINE)
    assert width > 1000 and height > 600
    assert "docs/timeline.png" in (REPO / "README.md").read_text()


def test_the_digest_sees_a_change_in_any_input(tmp_path: Path) -> None:
    """A one-byte change in a render module, the notebook or the bundle changes the digest."""
    import shutil

    script = _script()
    for name in script.INPUTS:
        source = REPO / name
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, target)
    before = script.inputs_digest(tmp_path)
    assert before == script.inputs_digest(REPO)
    for name in ("forensics/render/html.py", "notebooks/incident_report.ipynb",
                 "data/incidents/dsv4-pd-wedge-2026-06-18/incident.toml"):
        path = tmp_path / name
        original = path.read_bytes()
        path.write_bytes(original + b" ")
        assert script.inputs_digest(tmp_path) != before, name
        path.write_bytes(original)


def test_pictures_of_unchanged_inputs_are_not_made_again(tmp_path: Path) -> None:
    """The script makes nothing when the recorded digest is the inputs' own and the pictures are
    there (screenshots differ by a few pixels from run to run: re-made, they are noise in git)."""
    script = _script()
    assert script.up_to_date()
    recorded = json.loads(script.DIGESTS.read_text())
    stale = tmp_path / "pictures.json"
    stale.write_text(json.dumps({**recorded, "sha256": "0" * 64}))
    script.DIGESTS = stale
    assert not script.up_to_date()
    script.DIGESTS = tmp_path / "missing.json"
    assert not script.up_to_date()
