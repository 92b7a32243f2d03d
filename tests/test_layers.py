"""The package floors hold: core < sandbox < rewards < envs < agents < training.

Every ``import prm_gym.<pkg>`` in the source (module level or inside a function) goes to the
same floor or one below; modules import each other without a cycle, lazy imports included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ["core", "sandbox", "rewards", "envs", "agents", "training"]
DIRS = {p: ROOT / "prm_gym" / p for p in FLOORS}


def module_name(floor: str, path: Path) -> str:
    rel = path.relative_to(DIRS[floor]).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["prm_gym", floor, *parts])


def imports_of(path: Path) -> list[tuple[str, bool]]:
    """``(imported prm_gym module, at module level)`` for every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            if n.startswith("prm_gym."):
                out.append((n, id(node) in top))
    return out


def all_modules() -> dict[str, tuple[str, Path]]:
    mods = {}
    for floor, folder in DIRS.items():
        for path in folder.rglob("*.py"):
            mods[module_name(floor, path)] = (floor, path)
    return mods


def floor_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FLOORS else None


def test_no_import_goes_up_a_floor() -> None:
    upward = []
    for name, (floor, path) in all_modules().items():
        for target, _ in imports_of(path):
            dest = floor_of(target)
            if dest is not None and FLOORS.index(dest) > FLOORS.index(floor):
                upward.append(f"{name} -> {target}")
    assert not upward, "imports that go up a floor:\n" + "\n".join(sorted(upward))


def test_no_import_cycle() -> None:
    mods = all_modules()
    graph = {name: {t for t, _ in imports_of(path) if t in mods and t != name} for name, (_, path) in mods.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from prm_gym.training.trainer import train\n")
    assert imports_of(bad) == [("prm_gym.training.trainer", False), ("prm_gym.training.trainer.train", False)]
