"""The package's shape: layers import only layers below them, no module imports itself back
through others (imports inside functions count), modules stay readable in one sitting, and
nothing patches the interpreter's code objects."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "graphfuse"

# Each part of graphfuse and its layer: a module may import its own layer and those below.
LAYERS = {
    "graphfuse.dsl": 0,
    "graphfuse.errors": 0,
    "graphfuse.fxnodes": 0,
    "graphfuse.ops": 0,
    "graphfuse.triton": 1,
    "graphfuse.rules": 1,
    "graphfuse.io": 1,
    "graphfuse.match": 2,
    "graphfuse.rewrite": 3,
    "graphfuse.run": 4,
    "graphfuse.api": 5,
    "graphfuse.compile": 5,
    "graphfuse.testing": 6,
    "graphfuse.demo": 6,
    "graphfuse.tp_demo": 6,
    "graphfuse.cli": 7,
    "graphfuse.__main__": 8,
    "graphfuse": 8,
}
MAX_LINES = 500
MAX_FLAT_MODULES = 12


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The graphfuse modules ``name`` imports anywhere in its source (functions too)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in known else module)
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _layer(module: str) -> tuple[str, int]:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key in LAYERS:
            return key, LAYERS[key]
    raise AssertionError(f"{module} belongs to no layer of LAYERS: add it there")


def test_no_import_cycles() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycle = path[path.index(dep) :] + [dep] if dep in path else [name, dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, path + [dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_layers_import_only_layers_below() -> None:
    bad = []
    for name, deps in _graph().items():
        part, level = _layer(name)
        for dep in deps:
            dep_part, dep_level = _layer(dep)
            if dep_part != part and dep_level >= level:
                bad.append(f"{name} (layer {level}) imports {dep} (layer {dep_level})")
    assert not bad, "\n".join(sorted(bad))


def test_modules_stay_small() -> None:
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines())
        for folder in (PACKAGE, ROOT / "patterns")
        for p in folder.rglob("*.py")
    }
    big = {p: n for p, n in sizes.items() if n > MAX_LINES}
    assert not big, f"files over {MAX_LINES} lines: {big}"


def test_few_flat_modules() -> None:
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= MAX_FLAT_MODULES, flat


def test_no_code_object_patching() -> None:
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for trick in ("__code__", "co_varnames", "co_nlocals"):
            assert trick not in text, f"{path.relative_to(ROOT)} uses {trick}"
