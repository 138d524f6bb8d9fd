"""Print the import graph of the library packages and its cycles (AST-based, nothing is imported).

Every ``import``/``from ... import`` counts, wherever it stands (module level, inside a function, under
``TYPE_CHECKING``), as import-linter counts them. Two granularities:

- module level: one node per module (``lakefs_core.repos.graveler``);
- package level: one node per module truncated to ``--depth`` dotted parts (default 2:
  ``lakefs_core.repos``, ``lakefs_core.keys``, ``lakefs_gc.sweep``), so a package's modules form one node.

Cycles are the strongly connected components with more than one node. Usage::

    python scripts/import_graph.py                 # summary: counts and cycles at both levels
    python scripts/import_graph.py --edges         # also every package-level edge
    python scripts/import_graph.py --depth 3       # a finer package level
    python scripts/import_graph.py --why A B       # the module imports behind package edge A -> B
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lakefs_core", "lakefs_gc", "lakefs_mirror", "lakefs_server")
Graph = dict[str, set[str]]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def discover() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name.endswith("_pb2.py"):
                continue
            modules[module_name(path)] = path
    return modules


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` names or lies inside (``a.b.func`` -> ``a.b``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: Iterable[str]
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
        else:
            continue
        for target in targets:
            resolved = resolve(target, modules)
            if resolved is not None and resolved != name:
                found.add(resolved)
    return found


def module_graph() -> Graph:
    modules = discover()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def collapse(graph: Graph, depth: int) -> Graph:
    def node(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    out: Graph = defaultdict(set)
    for src, targets in graph.items():
        out[node(src)]
        for dst in targets:
            if node(dst) != node(src):
                out[node(src)].add(node(dst))
    return dict(out)


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return sorted(found)


def report(title: str, graph: Graph) -> int:
    edges = sum(len(v) for v in graph.values())
    found = cycles(graph)
    print(f"{title}: {len(graph)} nodes, {edges} edges, {len(found)} cycles")
    for component in found:
        inner = sum(1 for a in component for b in graph[a] if b in component)
        print(f"  cycle of {len(component)} nodes ({inner} edges): {', '.join(component)}")
    return len(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=2, help="dotted parts of a package-level node")
    parser.add_argument("--edges", action="store_true", help="print every package-level edge")
    parser.add_argument("--why", nargs=2, metavar=("SRC", "DST"), help="module imports behind an edge")
    args = parser.parse_args()
    modules = module_graph()
    packages = collapse(modules, args.depth)
    if args.why:
        src, dst = args.why
        for a in sorted(modules):
            for b in sorted(modules[a]):
                if (a == src or a.startswith(src + ".")) and (b == dst or b.startswith(dst + ".")):
                    print(f"{a} -> {b}")
        return 0
    report("module level", modules)
    report(f"package level (depth {args.depth})", packages)
    report("top level", collapse(modules, 1))
    if args.edges:
        for src in sorted(packages):
            for dst in sorted(packages[src]):
                print(f"{src} -> {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
