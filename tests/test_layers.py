"""The packages of sim/ form layers (style.md §7, issue 32): a package imports only from its own layer or
below, and the packages never import each other in a cycle. The graph is read from the sources (ast), so
it holds whether or not a module has been imported. Counted: every import that runs when a module is
imported (module level, inside `try` / `if`), not an import inside a function (a lazy import runs only when
called; the few that reach up are listed in LAZY_UP below, so a new one fails here too) and not an import
under `if TYPE_CHECKING:` (a type named in an annotation for the compiler, never run).

kernels_bench sits beside sim and uses sim's public API only: no name with a leading underscore and
nothing of sim.cli (the commands)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from sim.paths import project_root

ROOT = project_root()

# bottom up; a top-level module of sim (sim/units.py) counts as a package of its own
LAYERS: tuple[tuple[str, ...], ...] = (
    ("sim", "units", "rng", "errors", "paths", "native", "core"),  # 0: base; sim.core: the request record
    ("model", "hardware", "config"),  # 1: what is simulated (config reads no engine code)
    ("timing", "kvcache", "sched", "metrics"),  # 2: mechanisms and policies the engine calls; the sinks
    ("cluster",),  # 3: the engine (instances, links, the event loop, the build of a simulation)
    ("workload", "extensions"),  # 4: traces and the arrival driver that feeds the engine (told of ends by callback);
    # users' SimPy processes on the engine's operations API
    ("api", "preflight", "outputs", "processes", "capacity"),  # 5: one run (and its capacity search)
    ("plan", "sweep", "validate", "report", "fleet"),  # 6: many runs, pages from their outputs
    ("cli",),  # 7: the commands
)
LAYER = {package: level for level, packages in enumerate(LAYERS) for package in packages}

# imports inside functions that reach a higher layer (module, imported module): known, to be removed.
# sim.timing.forward reads efficiency and hw_rates through sim.cluster.build; they live in
# sim.timing.factory now, where it should import them from.
LAZY_UP: set[tuple[str, str]] = set()


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "sim":
        return None
    return parts[1] if len(parts) > 1 else "sim"


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, root: Path) -> list[str]:
    """The modules an import statement names (`from sim import units` names sim.units, `from sim import
    __version__` names sim)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[: len(here) - (node.level - 1)]
        base = ".".join([*here, *([node.module] if node.module else [])])

    def submodule(name: str) -> bool:
        return (root / name).is_dir() or (root / f"{name}.py").is_file()

    return [f"{base}.{a.name}" if base == "sim" and submodule(a.name) else base for a in node.names]


def _visit(node: ast.AST, module: str, is_package: bool, root: Path, in_function: bool, out: tuple) -> None:
    eager, lazy = out
    if isinstance(node, ast.If) and _is_type_checking(node):
        for child in node.orelse:
            _visit(child, module, is_package, root, in_function, out)
        return
    if isinstance(node, ast.Import | ast.ImportFrom):
        for target in _targets(node, module, is_package, root):
            (lazy if in_function else eager).append((module, target, node.lineno))
        return
    function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    for child in ast.iter_child_nodes(node):
        _visit(child, module, is_package, root, in_function or function, out)


def imports(root: Path) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """(module-level imports, imports inside functions) of every module under `root`: (module, target, line)."""
    eager: list[tuple[str, str, int]] = []
    lazy: list[tuple[str, str, int]] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        _visit(tree, _module_name(path, root.parent), path.name == "__init__.py", root, False, (eager, lazy))
    return eager, lazy


def package_edges(edges: list[tuple[str, str, int]]) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> where, for imports between two packages of sim."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, target, line in edges:
        src, dst = _package(module), _package(target)
        if src and dst and src != dst:
            out[(src, dst)].append(f"{module}:{line} imports {target}")
    return out


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


EAGER, LAZY = imports(ROOT / "sim")


def test_every_package_of_sim_has_a_layer():
    packages = {_package(module) for module, _, _ in EAGER} | {
        p.name if p.is_dir() else p.stem for p in (ROOT / "sim").iterdir() if p.suffix == ".py" or p.is_dir()
    }
    packages -= {"__pycache__", "__init__"}
    assert sorted(p for p in packages if p not in LAYER) == []


def test_no_package_imports_a_layer_above_it():
    up = {edge: where for edge, where in package_edges(EAGER).items() if LAYER[edge[1]] > LAYER[edge[0]]}
    assert up == {}


def test_the_packages_import_each_other_in_no_cycle():
    assert cycles(set(package_edges(EAGER))) == []


def test_imports_inside_functions_reach_up_only_where_listed():
    up = {
        (module, target)
        for module, target, _ in LAZY
        if _package(module) and _package(target) and LAYER[_package(target)] > LAYER[_package(module)]
    }
    assert sorted(up - LAZY_UP) == [] and sorted(LAZY_UP - up) == []


def test_the_graph_reader_sees_a_cycle_and_an_upward_import(tmp_path):
    """The checks above are not vacuous: a planted cycle and an upward import are found."""
    (tmp_path / "sim" / "cluster").mkdir(parents=True)
    (tmp_path / "sim" / "units.py").write_text("from sim.cluster import x\n")
    (tmp_path / "sim" / "cluster" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nfrom sim import units\nif TYPE_CHECKING:\n    from sim.cli import y\n"
    )
    found = package_edges(imports(tmp_path / "sim")[0])
    assert set(found) == {("units", "cluster"), ("cluster", "units")}
    assert cycles(set(found)) == [["cluster", "units"]]


def test_kernels_bench_uses_only_the_public_api_of_sim():
    eager, lazy = imports(ROOT / "kernels_bench")
    private = []
    for path in sorted((ROOT / "kernels_bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sim"):
                private += [
                    f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")
                ]
    assert private == []
    assert [t for _, t, _ in eager + lazy if t == "sim.cli" or t.startswith("sim.cli.")] == []
