"""Build the one C extension (the journal export scanner's hot loop); everything else is in pyproject.toml.

gcc and python3-dev come from Debian (see ./run)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "forensics.sources._export_scan",
    sources=["forensics/sources/_export_scan.c"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
)])
