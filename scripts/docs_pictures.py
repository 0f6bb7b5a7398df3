"""Make the docs' pictures of the reference incident, and record what they were made from.

- `docs/timeline.png`: the shared timeline (`timeline.html`'s figure at 1600×1000), the README's picture;
- `docs/notebook.png`: the report notebook's first screen in JupyterLab after Run All (1400×900);
- `docs/thin-timeline.png`: the timeline of a bundle holding one real `/metrics` paste (the
  corpus' SGLang docs scrape, `FORENSICS_CORPUS` or `../shared/corpus`), how thin data is drawn.

`docs/pictures.json` keeps a digest of the files the pictures depend on (the reference bundle, the
render stage, the analysis' sentences, the profile, the report notebook); `tests/test_docs_pictures.py`
fails when they changed and the pictures were not made again. Needs Chromium and the test extra
(playwright, jupyterlab): run from the repository root, `.venv/bin/python scripts/docs_pictures.py`.
When the digest recorded is the inputs' own and every picture is there, nothing is made again
(screenshots of the same page differ by a few pixels from run to run: pictures re-made for nothing
are noise in git); `--force` makes them anyway.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
REFERENCE = "data/incidents/dsv4-pd-wedge-2026-06-18"
INPUTS = (REFERENCE, "forensics/render", "forensics/analyze.py", "forensics/profiles/sglang.toml",
          "notebooks/incident_report.ipynb")
DIGESTS = REPOSITORY / "docs" / "pictures.json"
TIMELINE = REPOSITORY / "docs" / "timeline.png"
NOTEBOOK = REPOSITORY / "docs" / "notebook.png"
NOTEBOOK_SIZE = (1400, 900)
THIN = REPOSITORY / "docs" / "thin-timeline.png"
CORPUS = Path(os.environ.get("FORENSICS_CORPUS", REPOSITORY.parent / "shared" / "corpus"))
ONE_SCRAPE = CORPUS / "prometheus" / "metrics_sglang_production_metrics_doc_llama3.1-8b.prom"


def inputs_digest(root: Path = REPOSITORY) -> str:
    """sha256 over every file of INPUTS (name and content, in name order), caches left out."""
    digest = hashlib.sha256()
    for name in INPUTS:
        top = root / name
        files = sorted(p for p in (top.rglob("*") if top.is_dir() else [top])
                       if p.is_file() and "__pycache__" not in p.parts)
        for path in files:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def timeline_picture(work: Path) -> None:
    from forensics.render import screens
    from forensics.render.sections import ReportSession

    session = ReportSession.open(REPOSITORY / REFERENCE, work / "out")
    page = Path(session.write_outputs()["timeline.html"])
    shots = screens.take(page, work / "screens")
    (wide,) = [p for p in shots if p.name == "timeline-1600x1000.png"]
    shutil.copyfile(wide, TIMELINE)


def thin_picture(work: Path) -> None:
    from forensics.render import screens
    from forensics.render.sections import ReportSession

    bundle = work / "one-scrape"
    (bundle / "metrics").mkdir(parents=True)
    shutil.copy(ONE_SCRAPE, bundle / "metrics")
    page = Path(ReportSession.open(bundle, work / "thin-out").write_outputs()["timeline.html"])
    (laptop,) = [p for p in screens.take(page, work / "thin-screens") if p.name == "timeline-1280x720.png"]
    shutil.copyfile(laptop, THIN)


def notebook_picture(work: Path) -> None:
    from forensics.lab.jupyterlab import run_all, serve
    from forensics.render.screens import chromium

    with chromium() as browser, serve(work / "repo") as url:
        page = run_all(browser, url, "incident_report.ipynb", NOTEBOOK_SIZE)
        page.keyboard.press("Escape")  # command mode: the keys below act on the notebook, not a cell
        page.keyboard.press("Control+b")  # the file browser folded away: the notebook gets the width
        page.keyboard.press("Control+Home")  # back to the top: Run All left the view at the last cell
        page.wait_for_timeout(1500)  # plotly redraws at the new width
        page.screenshot(path=str(NOTEBOOK))
        page.context.close()


def up_to_date() -> bool:
    """The pictures are there and were made from the inputs as they are."""
    try:
        recorded = json.loads(DIGESTS.read_text())["sha256"]
    except (OSError, ValueError, KeyError):
        return False
    return recorded == inputs_digest() and all(p.is_file() for p in (TIMELINE, NOTEBOOK))


def main() -> None:
    if "--force" not in sys.argv[1:] and up_to_date():
        print(f"the pictures were made from the inputs as they are ({DIGESTS}): none made again "
              "(--force makes them anyway)", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory(prefix="docs-pictures-") as folder:
        work = Path(folder)
        timeline_picture(work)
        notebook_picture(work)
        if ONE_SCRAPE.is_file():
            thin_picture(work)
        else:
            print(f"{THIN} not made: no corpus at {CORPUS}", file=sys.stderr)
    DIGESTS.write_text(json.dumps({"inputs": list(INPUTS), "sha256": inputs_digest(),
                                   "pictures": [p.relative_to(REPOSITORY).as_posix() for p in (TIMELINE, NOTEBOOK, THIN)]},
                                  indent=2) + "\n")
    print(f"wrote {TIMELINE}, {NOTEBOOK}, {THIN} and {DIGESTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
