"""A bundle file whose name is not UTF-8 (bytes a hostile or broken copy left) is skipped with its
reason and its name's bytes escaped; it never crashes the ingest, and the other files are read."""

from __future__ import annotations

import json
import os
from pathlib import Path

from forensics.analyze import analyze


def test_a_name_that_is_not_utf8_is_skipped_and_said(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "logs").mkdir(parents=True)
    line = "[2026-06-18 21:34:47 TP0] Decode batch. #running-req: 3, #queue-req: 0, \n"
    (bundle / "logs" / "decode.log").write_text(line)
    with open(os.path.join(os.fsencode(bundle / "logs"), b"bad\xff name.log"), "w") as handle:
        handle.write(line)
    analysis = analyze(bundle, tmp_path / "case")
    skipped = analysis.timeline.manifest["skipped"]
    (bad,) = [s for s in skipped if "not UTF-8" in s["reason"]]
    assert bad["path"] == "logs/bad\\xff name.log"
    json.dumps(analysis.summary(), allow_nan=False)  # the summary stays valid JSON
    assert [i["path"] for i in analysis.timeline.manifest["inputs"]] == ["logs/decode.log"]
