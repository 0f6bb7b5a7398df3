"""The package's layout shows its data flow: one folder per stage, imports only pointing down the
stages, and no import cycle (docs/layout.md). Every import counts — at module level, inside a
function, under TYPE_CHECKING — since each is a dependency a reader has to follow."""

from __future__ import annotations

import ast
import sys
import warnings
from pathlib import Path

import pytest

import forensics

PACKAGE = Path(forensics.__file__).resolve().parent
ROOT = PACKAGE.parent

# Stages from the bottom up: a module may import its own stage and those below, never above.
# Capture comes first in the data flow but judges what it took with the readers and detectors, so
# in the import graph it sits beside the entry points.
STAGES = [
    ("errors", "profiles"),
    ("sources",),
    ("case",),
    ("timeline",),
    ("detect",),
    ("analyze",),
    ("render",),
    ("report", "capture"),
    ("cli", "lab"),
]
RANK = {name: n for n, names in enumerate(STAGES) for name in names}
ENTRY_POINTS = {"cli.py", "analyze.py", "report.py", "errors.py"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    where = ROOT.joinpath(*name.split("."))
    return (where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()
            or where.with_suffix(".c").is_file())


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("forensics")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("forensics"):
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if _is_module(child) else node.module)
    return found - {"forensics"}


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py") if p.parent.name != "__pycache__"}


def _stage(module: str) -> int | None:
    parts = module.split(".")
    return RANK.get(parts[1]) if len(parts) > 1 else None


def test_no_import_points_up_the_stages() -> None:
    upward = sorted(f"{module} imports {dep}" for module, deps in _graph().items() for dep in deps
                    if _stage(module) is not None and _stage(dep) is not None and _stage(dep) > _stage(module))
    assert upward == []


def test_no_import_cycle() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in graph.get(node, ()):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                cycles.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert cycles == []


def test_every_module_belongs_to_a_stage_and_the_root_keeps_only_the_entry_points() -> None:
    unplaced = sorted(m for m in _graph() if m != "forensics" and _stage(m) is None)
    assert unplaced == []
    root_modules = {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert root_modules == ENTRY_POINTS and len(root_modules) <= 6
    assert set(RANK) - {"analyze", "report", "cli", "errors"} <= {p.name for p in PACKAGE.iterdir() if p.is_dir()}


#: Names of modules that moved to their stage's folder in 0.1; the shim that kept them importing is
#: gone (0.1.0 has no users to keep), and nothing may import them again.
OLD_NAMES = ("collect", "watch", "pull", "store", "places", "cluster", "bundle", "incident", "schema", "align",
             "logs", "metrics")


def test_no_module_imports_an_old_name_of_a_moved_module() -> None:
    old = {f"forensics.{name}" for name in OLD_NAMES}
    used = sorted(f"{module} imports {dep}" for module, deps in _graph().items() for dep in deps if dep in old)
    assert used == []
    assert not hasattr(forensics, "MOVED")
    for name in OLD_NAMES:
        with pytest.raises(ModuleNotFoundError):
            __import__(f"forensics.{name}")


def test_the_layout_page_and_the_readme_name_every_folder_of_the_package() -> None:
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__"))
    layout = (ROOT / "docs" / "layout.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for name in folders:
        assert f"{name}/" in layout, name
        assert f"{name}/" in readme, name
    for name in ENTRY_POINTS:
        assert name in layout


def test_the_public_face_is_unchanged() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        from forensics.case import Case, ingest, load_case  # noqa: F401 - the names people import

        assert forensics.load_case is load_case and forensics.Case is Case


def test_every_detector_is_registered_through_the_one_interface_and_analyze_runs_them_in_one_loop() -> None:
    from forensics.detect.registry import DETECTORS, REGISTRY, registered

    names = [name for name, _ in registered()]
    assert names == [name for name, _ in DETECTORS] and set(REGISTRY) == set(names)
    assert len(set(names)) == len(names)
    for name, function in REGISTRY.items():  # where a detector is registered is where the registry says it lives
        assert function.__module__ == dict(DETECTORS)[name], name
    # a module of forensics/detect/ with a `detect` or `findings` function is a detector, so registered
    folder = PACKAGE / "detect"
    modules_with_detectors = {f"forensics.detect.{p.stem}" for p in folder.glob("*.py")
                              if any(isinstance(n, ast.FunctionDef) and n.name in ("detect", "findings")
                                     for n in ast.parse(p.read_text()).body)}
    assert modules_with_detectors <= {module for _, module in DETECTORS}
    calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
             for n in ast.walk(ast.parse((PACKAGE / "analyze.py").read_text())) if isinstance(n, ast.Call)}
    assert not calls & {"detect", "findings", "key_times", "consequences_of_stop"}


MAX_MODULE_LINES = 600  # a module longer than this mixes concerns (the house's rule, docs/layout.md)
MAX_FUNCTION_LINES = 80  # a function longer than this does more than one thing


def test_no_module_is_over_600_lines_and_no_function_over_80() -> None:
    long_modules, long_functions = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "__pycache__":
            continue
        text = path.read_text()
        where = path.relative_to(ROOT)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{where}:{node.lineno} {node.name}: {length} lines")
    assert long_modules == [] and long_functions == []
