"""The package's layout shows its data flow: one folder per stage, imports only pointing down the
stages, and no import cycle (docs/layout.md). Every import counts — at module level, inside a
function, under TYPE_CHECKING — since each is a dependency a reader has to follow."""

from __future__ import annotations

import ast
import subprocess
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
    ("formats",),
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


@pytest.mark.parametrize(("old", "new"), sorted(forensics.MOVED.items()))
def test_a_moved_module_still_imports_with_a_warning_naming_its_new_place(old: str, new: str) -> None:
    code = (f"import warnings, importlib\nwarnings.simplefilter('always')\n"
            f"with warnings.catch_warnings(record=True) as seen:\n    old = importlib.import_module({old!r})\n"
            f"assert old is importlib.import_module({new!r})\n"
            f"assert [str(w.message) for w in seen if w.category is DeprecationWarning] == "
            f"[{old!r} + ' moved to ' + {new!r} + '; the old name goes in the next release']\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


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
