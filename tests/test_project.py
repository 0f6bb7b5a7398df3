"""The project's own files agree with each other: dependencies, notebooks, set-up."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO


def _names(requirements: list[str]) -> dict[str, str]:
    out = {}
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(.*)", requirement)
        assert match, requirement
        out[match.group(1).lower().replace("_", "-")] = match.group(2).replace(" ", "")
    return out


def _all_requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]


def test_environment_yml_lists_the_same_dependencies_as_pyproject() -> None:
    wanted = _names(_all_requirements())
    lines = (REPO / "environment.yml").read_text().splitlines()
    start = lines.index("dependencies:") + 1
    conda = [line.strip()[2:] for line in lines[start:] if re.match(r"^ +- [A-Za-z]", line)]
    listed = {k: v for k, v in _names(conda).items() if k not in {"python", "pip", "c-compiler"}}
    assert listed == wanted


def test_constraints_pin_every_dependency() -> None:
    wanted = set(_names(_all_requirements()))
    pinned = {line.split("==")[0].lower().replace("_", "-") for line in (REPO / "constraints.txt").read_text().split()}
    assert wanted <= pinned, wanted - pinned


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    assert "./run test" in readme and "./run demo" in readme
    assert "./run test" in (REPO / ".ci" / "run").read_text()
