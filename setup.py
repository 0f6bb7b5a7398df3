"""Build the C extensions (the journal export scanner's hot loop, the reader of journal files, the
reading of progress lines' numbers, and the guard of mapped inputs against SIGBUS); everything else
is in pyproject.toml.

gcc, python3-dev and libzstd-dev come from Debian (see ./run). Without zstd's header the journal
file reader is built without it, and journalctl reads the files journald compressed with zstd."""

from pathlib import Path

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]

WITH_ZSTD = Path("/usr/include/zstd.h").exists()

setup(ext_modules=[
    Extension("forensics.sources.journal._export_scan", sources=["forensics/sources/journal/_export_scan.c"], extra_compile_args=FLAGS),
    Extension("forensics.sources.journal._journal_file", sources=["forensics/sources/journal/_journal_file.c"],
              extra_compile_args=FLAGS, define_macros=[("WITH_ZSTD", "1")] if WITH_ZSTD else [],
              libraries=["zstd"] if WITH_ZSTD else []),
    Extension("forensics.timeline._lines", sources=["forensics/timeline/_lines.c"], extra_compile_args=FLAGS),
    Extension("forensics.sources.common._mapguard", sources=["forensics/sources/common/_mapguard.c"],
              extra_compile_args=FLAGS),
])
