"""Build the C extensions (the journal export scanner's hot loop, and the reading of progress lines'
numbers); everything else is in pyproject.toml.

gcc and python3-dev come from Debian (see ./run)."""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(ext_modules=[
    Extension("forensics.sources.journal._export_scan", sources=["forensics/sources/journal/_export_scan.c"], extra_compile_args=FLAGS),
    Extension("forensics.timeline._lines", sources=["forensics/timeline/_lines.c"], extra_compile_args=FLAGS),
])
