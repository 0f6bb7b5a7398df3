"""Benchmarks: ratios against the tools a user would otherwise use, measured in one run."""
