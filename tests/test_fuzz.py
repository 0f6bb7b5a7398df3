"""The C extensions fuzzed with atheris, built with AddressSanitizer (atheris's runtime, which
holds libFuzzer) and undefined-behaviour traps: coverage guides the Python side that drives them
(gcc has no libFuzzer counters for the C side), the sanitizers watch every C access. Seeded from the
tests' own inputs, run for a fixed number of inputs per extension (`RUNS`; `FORENSICS_FUZZ_RUNS`
sets another number, `FORENSICS_FUZZ_SECONDS` a time instead, for a longer campaign by hand), every
input that ever failed kept under `tests/fuzz/crashes/` and replayed first. A failure copies the new
crash input there, to be committed with its fix."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from forensics.profiles import load_profile
from tests.conftest import export_entry, to_journal

REPO = Path(__file__).resolve().parents[1]
CRASHES = REPO / "tests" / "fuzz" / "crashes"
# Inputs run per target: a budget of work, the same on any machine. A 40 s campaign with every
# imported module instrumented got through ~2,000 (export_scan) and ~7,000 (label_numbers, in the `lines` target now); with
# only forensics' own modules instrumented (`tests/fuzz/harness.py`) each input runs 2.5x and 20x
# faster, so these budgets try more inputs than that campaign did, in ~20 s and ~8 s.
RUNS = {"export_scan": 2_500, "lines": 20_000, "journal_file": 1_500}
SECONDS = int(os.environ.get("FORENSICS_FUZZ_SECONDS", "0"))  # > 0: run for this long instead
SOURCES = {"_export_scan": REPO / "forensics" / "sources" / "journal" / "_export_scan.c",
           "_journal_file": REPO / "forensics" / "sources" / "journal" / "_journal_file.c",
           "_lines": REPO / "forensics" / "timeline" / "_lines.c"}
# Built as setup.py builds them: the journal file reader with zstd where Debian's header is there.
WITH_ZSTD = Path("/usr/include/zstd.h").exists()
LINKED = {"_journal_file": (["-DWITH_ZSTD=1"], ["-lzstd"]) if WITH_ZSTD else ([], [])}


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The extensions built with -fsanitize=address,undefined (gcc, as the ordinary build)."""
    build = tmp_path_factory.mktemp("asan")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for name, source in SOURCES.items():
        # compiled with the sanitizers, linked without gcc's runtime: the __asan_* calls are bound
        # to the runtime atheris ships (two ASan runtimes in one process refuse to start)
        obj = build / f"{name}.o"
        defines, libraries = LINKED.get(name, ([], []))
        subprocess.run(["gcc", "-c", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
                        "-fsanitize-undefined-trap-on-error", f"-I{sysconfig.get_paths()['include']}", *defines,
                        str(source), "-o", str(obj)], check=True, capture_output=True)
        subprocess.run(["gcc", "-shared", str(obj), *libraries, "-o", str(build / f"{name}{suffix}")], check=True,
                       capture_output=True)
    return build


def _environment() -> dict[str, str]:
    import atheris

    # atheris's AddressSanitizer runtime with libFuzzer in it: coverage symbols from libFuzzer
    runtime = Path(atheris.path()) / "asan_with_fuzzer.so"
    return {**os.environ, "LD_PRELOAD": str(runtime), "PYTHONPATH": str(REPO),
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


def _seeds(target: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if target == "journal_file":  # small real journals: compact and regular, zstd-compressed fields and not
        made = folder.parent / "made"
        made.mkdir(exist_ok=True)
        samples = []
        export = b"".join(export_entry(("__REALTIME_TIMESTAMP", str(1781818560000000 + i)), ("MESSAGE", m),
                                       ("_PID", "7"), ("BIN", b"\x00\xff")) for i, m in enumerate(["a", "b" * 700, "\u0085"]))
        for n, (env, flags) in enumerate([({}, []), ({"SYSTEMD_JOURNAL_COMPACT": "0"}, ["--compress=no"])]):
            samples.append(to_journal(export, made, f"seed{n}", env=env, flags=flags).read_bytes())
    elif target == "export_scan":
        samples = [export_entry(("__REALTIME_TIMESTAMP", "1781818560000000"), ("MESSAGE", "hello"), ("_PID", "7")),
                   export_entry(("MESSAGE", b"bin\n\nary\xff"), ("A", "x")) + export_entry(("B", "y")),
                   b"__CURSOR=s=a;i=1\nMESSAGE\n" + struct.pack("<Q", 3) + b"abc\n\nLOWER=x\n=y\n1A=z\n",
                   b"A=1\n" * 1100 + b"\n", b"MESSAGE\n\x05\x00", b"X=caf\xe9\n\n"]
    else:
        profile = load_profile()
        samples = [s.line.encode() for s in profile.logs.samples]
        samples += [b"#running-req: 1.2.3, token usage: -0.5e3, x: 9" * 3, "x: ٣, x: ½".encode()]
    for n, sample in enumerate(samples):
        (folder / f"seed-{n}").write_bytes(sample)
    return folder


def _run(target: str, build: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.fuzz.harness", target, str(build), *args],
                          capture_output=True, text=True, env=_environment(), cwd=REPO, check=False,
                          timeout=SECONDS * 4 + 600)


@pytest.mark.parametrize("target", ["export_scan", "lines", "journal_file"])
def test_the_extension_survives_fuzzing_under_sanitizers(target: str, sanitized: Path, tmp_path: Path) -> None:
    kept = sorted(p for p in (CRASHES / target).iterdir() if p.name != ".gitkeep")
    if kept:  # every input that ever failed, first
        done = _run(target, sanitized, ["-runs=0", *map(str, kept)])
        assert done.returncode == 0, done.stderr[-4000:]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seeds = _seeds(target, tmp_path / "seeds")
    runs = int(os.environ.get("FORENSICS_FUZZ_RUNS", RUNS[target]))
    budget = f"-max_total_time={SECONDS}" if SECONDS > 0 else f"-runs={runs}"
    done = _run(target, sanitized, [budget, "-rss_limit_mb=4096", "-timeout=20",
                                    f"-artifact_prefix={tmp_path}/", "-print_final_stats=1", str(corpus), str(seeds)])
    found = sorted(tmp_path.glob("crash-*")) + sorted(tmp_path.glob("timeout-*")) + sorted(tmp_path.glob("oom-*"))
    for crash in found:
        shutil.copy(crash, CRASHES / target / crash.name)
    assert done.returncode == 0 and not found, (f"{len(found)} failing inputs kept in {CRASHES / target}\n"
                                                + done.stderr[-4000:])
    assert "stat::number_of_executed_units" in done.stderr  # it really ran
    if SECONDS <= 0:  # ... through its whole budget
        executed = int(done.stderr.split("stat::number_of_executed_units:")[1].split()[0])
        assert executed >= runs, f"{executed} of {runs} inputs run"
