"""Imports run one way: every module sits in a layer of accelopt_mcp.LAYERS and imports only its
own package and lower layers, and the module graph has no cycles. Imports inside functions and
under TYPE_CHECKING count: they are dependencies all the same."""

from __future__ import annotations

import ast
from pathlib import Path

import accelopt_mcp

PACKAGE_ROOT = Path(accelopt_mcp.__file__).resolve().parent
ROOT = "accelopt_mcp"


def module_names(root: Path = PACKAGE_ROOT) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([ROOT, *parts])] = path
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (`from pkg import submodule` names the
    submodule; `from pkg import name` names pkg)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.split(".")[0] == ROOT)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                if base.split(".")[0] != ROOT:
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    deps.add(sub if sub in modules else base)
        deps.discard(name)
        graph[name] = deps
    return graph


def unit_of(module: str) -> str:
    """The top-level module or package a module belongs to ('' for the package root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    rank = {unit: index for index, units in enumerate(layers) for unit in units}
    rank[""] = -1  # the package root (its __version__) may be imported from anywhere
    problems = []
    for module in sorted(graph):
        unit = unit_of(module)
        if unit not in rank:
            problems.append(f"{module}: {unit!r} has no place in accelopt_mcp.LAYERS")
            continue
        for dep in sorted(graph[module]):
            dep_unit = unit_of(dep)
            if dep_unit == unit or dep_unit not in rank:
                continue  # its own package; an unplaced unit is reported on its own modules
            if rank[dep_unit] >= rank[unit]:
                kind = "a peer" if rank[dep_unit] == rank[unit] else "a higher layer"
                problems.append(f"{module} imports {dep} ({kind})")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph.get(node, ()):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_import_goes_down_the_layers() -> None:
    problems = layer_violations(import_graph(module_names()), accelopt_mcp.LAYERS)
    assert problems == [], "\n".join(problems)


def test_no_import_cycles() -> None:
    found = cycles(import_graph(module_names()))
    assert found == [], "\n".join(" <-> ".join(c) for c in found)


def test_the_checks_catch_an_upward_import_a_peer_import_and_a_cycle(tmp_path: Path) -> None:
    # A little package laid out like ours, with the faults the two tests above must catch.
    package = tmp_path / ROOT
    for rel, text in {
        "__init__.py": "",
        "models/__init__.py": "from accelopt_mcp.models.a import A\n",
        "models/a.py": "def f():\n    from accelopt_mcp.engine import run\n\nclass A: ...\n",
        "store/__init__.py": "from accelopt_mcp import llm\n",
        "llm.py": "from .store import x\n",
        "engine/__init__.py": "from accelopt_mcp.models import A\nrun = 1\n",
        "extra.py": "import accelopt_mcp.models\n",
    }.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    layers = (("models",), ("store", "llm"), ("engine",))
    graph = import_graph(module_names(package))
    assert graph["accelopt_mcp.models.a"] == {"accelopt_mcp.engine"}
    assert graph["accelopt_mcp.llm"] == {"accelopt_mcp.store"}
    assert layer_violations(graph, layers) == [
        "accelopt_mcp.extra: 'extra' has no place in accelopt_mcp.LAYERS",
        "accelopt_mcp.llm imports accelopt_mcp.store (a peer)",
        "accelopt_mcp.models.a imports accelopt_mcp.engine (a higher layer)",
        "accelopt_mcp.store imports accelopt_mcp.llm (a peer)",
    ]
    assert sorted(cycles(graph)) == [
        ["accelopt_mcp.engine", "accelopt_mcp.models", "accelopt_mcp.models.a"],
        ["accelopt_mcp.llm", "accelopt_mcp.store"],
    ]
