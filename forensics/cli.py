"""The `forensics` command: `ingest` a bundle into a case, `summary` of a case, `synth` test data."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import polars as pl
from tqdm import tqdm

from forensics.case import host_unit_summary, ingest, load_case
from forensics.errors import ForensicsError


def _default_case(bundle: Path) -> Path:
    return Path("exports") / bundle.resolve().name / "case"


def print_summary(case_dir: Path, out=sys.stdout) -> None:  # noqa: ANN001 - a text stream
    """Print what a case holds: inputs, records seen = parsed + quarantined, hosts and units."""
    case = load_case(case_dir)
    m = case.manifest
    t = m["totals"]
    print(f"case {case_dir}  (bundle {m['bundle']})", file=out)
    print(f"window {m['first_ts']} .. {m['last_ts']}", file=out)
    print(f"records seen {t['records']:,} = parsed {t['parsed']:,} + quarantined {t['quarantined']:,}"
          f"; {t['duplicates']:,} duplicates of records already read; {t['events']:,} events", file=out)
    print("\ninputs:", file=out)
    for e in m["inputs"]:
        line = (f"  {e['path']:<44} {e['format']:<15} records {e['records']:>9,}  parsed {e['parsed']:>9,}  "
                f"quarantined {e['quarantined']:>6,}  duplicates {e['duplicates']:>6,}")
        print(line + (f"  ERROR {e['error']}" if e.get("error") else ""), file=out)
    for s in m["skipped"]:
        print(f"  skipped {s['path']}: {s['reason']}", file=out)
    print("\nper host and unit:", file=out)
    with pl.Config(tbl_rows=100, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   fmt_str_lengths=60, tbl_width_chars=160):
        print(host_unit_summary(case), file=out)
        reasons = (case.quarantine.group_by("reason").len().sort("len", descending=True).head(10).collect())
        if reasons.height:
            print("\nquarantine (top reasons):", file=out)
            print(reasons, file=out)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `forensics` console script."""
    parser = argparse.ArgumentParser(prog="forensics", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_ingest = sub.add_parser("ingest", help="read a bundle's inputs into a case (Parquet) and print its summary")
    p_ingest.add_argument("bundle", type=Path)
    p_ingest.add_argument("--case", type=Path, help="case folder (default: exports/<bundle name>/case)")
    p_summary = sub.add_parser("summary", help="print what a case holds")
    p_summary.add_argument("case", type=Path)
    p_synth = sub.add_parser("synth", help="write a generated SGLang-shaped journal export")
    p_synth.add_argument("out", type=Path)
    p_synth.add_argument("--entries", type=int, default=10_000)
    p_synth.add_argument("--hosts", type=int, default=1)
    p_synth.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.command == "ingest":
            case_dir = args.case or _default_case(args.bundle)
            ingest(args.bundle, case_dir,
                   progress=lambda items: tqdm(items, desc="ingest", unit="input", file=sys.stderr))
            sys.stderr.flush()
            print_summary(case_dir)
        elif args.command == "summary":
            print_summary(args.case)
        elif args.command == "synth":
            from forensics.synth import write_export
            write_export(args.out, args.entries, hosts=args.hosts, seed=args.seed)
            print(f"wrote {args.entries:,} entries to {args.out}")
    except ForensicsError as error:
        print(f"forensics: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
