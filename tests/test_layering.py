"""Every import inside the package points down: a folder imports only the folders below it.

The layers, bottom to top, are those of the module map (see docs/architecture.md). Folders in
one layer do not import each other. Importing a public name from the package root
(`from .. import X`) is allowed anywhere, since it is the public API, not a room.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import datafusion_distributed

PACKAGE_DIR = Path(datafusion_distributed.__file__).parent
ROOT = "<root>"  # modules directly in the package: clusters, the public API

LAYERS: list[set[str]] = [
    {"common"},
    {"codec"},
    {"execution_plans"},
    {"runtime"},
    {"events"},
    {"distributed_planner"},
    {"metrics"},
    {"protocol", "work_unit_feed"},
    {"worker", "coordinator"},
    {ROOT},
    {"cli"},
    {"test_utils"},
]
LEVEL = {room: i for i, layer in enumerate(LAYERS) for room in layer}


def _room(module: Path) -> str:
    parts = module.relative_to(PACKAGE_DIR).parts
    if parts == ("__main__.py",):  # `python -m datafusion_distributed` only runs the command line
        return "cli"
    return parts[0] if len(parts) > 1 else ROOT


def _imported_rooms(module: Path) -> list[tuple[int, str]]:
    """(line, room) of every package module `module` imports by a relative import."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    depth = len(module.relative_to(PACKAGE_DIR).parts) - 1  # folders between the package and it
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        up = node.level - 1  # how many folders above the module's own
        if up > depth:
            continue
        base = list(module.relative_to(PACKAGE_DIR).parts[: depth - up])
        target = base + (node.module.split(".") if node.module else [])
        if not target:  # `from .. import X`: the public API
            continue
        room = target[0] if (PACKAGE_DIR / target[0]).is_dir() else ROOT
        found.append((node.lineno, room))
    return found


MODULES = sorted(PACKAGE_DIR.rglob("*.py"))


def test_every_room_has_a_layer() -> None:
    rooms = {p.name for p in PACKAGE_DIR.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms - set(LEVEL) == set()


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_imports_point_down(module: Path) -> None:
    own = _room(module)
    upward = [
        f"line {line}: {own} imports {room}"
        for line, room in _imported_rooms(module)
        if room != own and LEVEL[room] >= LEVEL[own]
    ]
    assert not upward, "; ".join(upward)
