"""The packages' import graph, read from the source (nothing is imported): what tests/test_layout.py
holds to its rules, and a report anyone can print.

    python tests/import_graph.py        # modules per folder, depth, loops, upward imports

Every ``import`` and ``from ... import`` counts, at module level or inside a function, except
those under ``if TYPE_CHECKING:`` (they never run). A module's depth is 1 for one that imports no
other module of the packages, else one more than the deepest it imports.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {
    "atlasbus": ROOT / "connector" / "atlasbus",
    "pyspark_atlasbus": ROOT / "python_datasource" / "pyspark_atlasbus",
}


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    # imported module -> True where at least one import of it runs at module level
    imports: dict[str, bool] = field(default_factory=dict)
    # names under the packages' own that no module here holds (a former name, say)
    unresolved: set[str] = field(default_factory=set)

    @property
    def folder(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for top, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            name = ".".join([top, *parts])
            found[name] = Module(name, path, is_package)
    for module in found.values():
        for target, at_module_level in _imports(module, found):
            if target.startswith("?"):
                module.unresolved.add(target[1:])
            elif target != module.name:
                module.imports[target] = module.imports.get(target, False) or at_module_level
    return found


def _imports(module: Module, known: dict[str, Module]) -> Iterator[tuple[str, bool]]:
    tree = ast.parse(module.path.read_text(), str(module.path))
    package = module.name if module.is_package else module.name.rpartition(".")[0]

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                yield from (
                    pair for orelse in child.orelse for pair in visit_one(orelse, in_function)
                )
                continue
            yield from visit_one(child, in_function)

    def visit_one(node: ast.AST, in_function: bool) -> Iterator[tuple[str, bool]]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _resolve(alias.name, None, known, not in_function)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                yield from _resolve(base, alias.name, known, not in_function)
        else:
            nested = in_function or isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            yield from visit(node, nested)

    yield from visit(tree, False)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(
    base: str, name: str | None, known: dict[str, Module], module_level: bool
) -> Iterator[tuple[str, bool]]:
    if name is not None and f"{base}.{name}" in known:
        yield f"{base}.{name}", module_level
        return
    if base in known:
        yield base, module_level
    elif base.partition(".")[0] in SOURCES:
        yield f"?{base}", module_level


def loops(found: dict[str, Module], module_level_only: bool = False) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def edges(name: str) -> list[str]:
        return [t for t, top in found[name].imports.items() if top or not module_level_only]

    def connect(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in edges(name):
            if target not in index:
                connect(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == name:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for name in sorted(found):
        if name not in index:
            connect(name)
    return groups


def unit(name: str, found: dict[str, Module]) -> str:
    """A module's package under the top one (``atlasbus.decoding`` for its kernels too), or the
    module itself where it lies in the top package (``atlasbus.errors``)."""
    top, _, rest = name.partition(".")
    package = f"{top}.{rest.partition('.')[0]}"
    return package if rest and package in found and found[package].is_package else name


def package_graph(found: dict[str, Module]) -> dict[str, Module]:
    """The packages under the top ones as nodes (their modules' imports joined), beside the top
    packages' own modules."""
    units: dict[str, Module] = {}
    for module in found.values():
        here = unit(module.name, found)
        node = units.setdefault(here, Module(here, module.path, True))
        for target, top in module.imports.items():
            there = unit(target, found)
            if there != here:
                node.imports[there] = node.imports.get(there, False) or top
    return units


def depths(found: dict[str, Module], module_level_only: bool = False) -> dict[str, int]:
    """Each module's floor; a module inside a loop counts the loop once."""
    memo: dict[str, int] = {}

    def depth(name: str, seen: frozenset[str]) -> int:
        if name in memo:
            return memo[name]
        targets = [
            t
            for t, top in found[name].imports.items()
            if (top or not module_level_only) and t not in seen
        ]
        value = 1 + max((depth(t, seen | {t}) for t in targets), default=0)
        memo[name] = value
        return value

    return {name: depth(name, frozenset({name})) for name in found}


def report(found: dict[str, Module]) -> str:
    per_folder = Counter(
        m.folder for m in found.values() if not m.is_package or m.path.stat().st_size
    )
    lines = ["modules per folder:"]
    lines += [f"  {folder:<40} {count:>3}" for folder, count in sorted(per_folder.items())]
    in_functions = sum(1 for m in found.values() for top in m.imports.values() if not top)
    all_depths = depths(found)
    top_depths = depths(found, module_level_only=True)
    core = [n for n in found if n.startswith("atlasbus")]
    lines += [
        f"modules: {len(found)} ({len(core)} in the core)",
        f"import depth, every import: {max(all_depths.values())} (core {max(all_depths[n] for n in core)})",
        f"import depth, module level: {max(top_depths.values())} (core {max(top_depths[n] for n in core)})",
        f"imports inside functions (module pairs): {in_functions}",
    ]
    every_loop = loops(found)
    lines.append(f"import loops, counting imports inside functions: {len(every_loop)}")
    lines += [f"  {' <-> '.join(group)}" for group in every_loop]
    folder_loops = loops(package_graph(found))
    lines.append(f"import loops between packages, the same way: {len(folder_loops)}")
    lines += [f"  {' <-> '.join(group)}" for group in folder_loops]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(modules()))
