"""Every import inside the package points down, and no module reaches itself through imports.

The layers, bottom to top, are those of the module map (see docs/architecture.md). A room is a
folder of the package, or a module file beside `__init__.py` (named by its stem); a room imports
only the rooms below it, and rooms of one layer do not import each other. The package root
(`__init__.py`, the public API) is a layer of its own: only the rooms above it (the Flight SQL
endpoint, the command line, the test utilities) may import it. Every import counts, wherever it is written: at the top of a
module, inside a function, or under `TYPE_CHECKING`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import datafusion_distributed

PACKAGE = "datafusion_distributed"
PACKAGE_DIR = Path(datafusion_distributed.__file__).parent
ROOT = "<root>"  # the package's __init__.py: the public API

LAYERS: list[set[str]] = [
    {"_native"},  # the compiled data plane (native/), which imports nothing of the package
    {"common"},
    {"errors"},
    {"codec"},
    {"execution_plans"},
    {"runtime"},
    {"events"},
    {"distributed_planner"},
    {"metrics"},
    {"protocol", "work_unit_feed"},
    {"worker", "coordinator"},
    {"clusters", "dashboard"},
    {"api"},
    {ROOT},
    {"flight_sql"},
    {"cli"},
    {"test_utils"},
]
LEVEL = {room: i for i, layer in enumerate(LAYERS) for room in layer}

MODULES = sorted(PACKAGE_DIR.rglob("*.py"))


def _name(module: Path) -> tuple[str, ...]:
    """The dotted name of `module` inside the package, as parts (() for the package root)."""
    parts = module.relative_to(PACKAGE_DIR).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def _room(name: tuple[str, ...]) -> str:
    if not name:
        return ROOT
    if name == ("__main__",):  # `python -m datafusion_distributed` only runs the command line
        return "cli"
    return name[0]


def _module_file(name: tuple[str, ...]) -> Path | None:
    """The file of the package module `name`, if there is one."""
    path = PACKAGE_DIR.joinpath(*name)
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(module: Path) -> list[tuple[int, tuple[str, ...]]]:
    """(line, module name) of every package module `module` imports, wherever the import is."""
    own = _name(module)
    package = own if module.name == "__init__.py" else own[:-1]
    found = []
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            bases = [tuple(a.name.split(".")) for a in node.names]
            targets = [b[1:] for b in bases if b[0] == PACKAGE]
            found += [(node.lineno, t) for t in targets]
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 0:
            parts = tuple((node.module or "").split("."))
            if parts[0] != PACKAGE:
                continue
            base = parts[1:]
        else:
            base = package[: len(package) - (node.level - 1)] + (
                tuple(node.module.split(".")) if node.module else ()
            )
        for alias in node.names:  # `from . import fields` imports the module fields
            sub = (*base, alias.name)
            found.append((node.lineno, sub if _module_file(sub) else base))
    return found


GRAPH = {_name(m): {name for _, name in _imports(m) if _module_file(name)} for m in MODULES}


def _cycles(graph: dict[tuple[str, ...], set[tuple[str, ...]]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), by name."""
    index: dict[tuple[str, ...], int] = {}
    low: dict[tuple[str, ...], int] = {}
    stack: list[tuple[str, ...]] = []
    on_stack: set[tuple[str, ...]] = set()
    groups = []

    def visit(node: tuple[str, ...]) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(".".join(member) or ROOT)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_every_room_has_a_layer() -> None:
    rooms = {_room(_name(m)) for m in MODULES}
    assert rooms - set(LEVEL) == set()


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_imports_point_down(module: Path) -> None:
    own = _room(_name(module))
    upward = [
        f"line {line}: {own} imports {'.'.join(name) or ROOT}"
        for line, name in _imports(module)
        if _room(name) != own and LEVEL[_room(name)] >= LEVEL[own]
    ]
    assert not upward, "; ".join(upward)


def test_no_module_reaches_itself_through_imports() -> None:
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle_inside_a_folder() -> None:
    """The check above can fail: a circle of three modules of one folder is found."""
    a, b, c, d = ("f", "a"), ("f", "b"), ("f", "c"), ("g",)
    assert _cycles({a: {b}, b: {c}, c: {a, d}, d: set()}) == [["f.a", "f.b", "f.c"]]
    assert _cycles({a: {b}, b: set()}) == []
