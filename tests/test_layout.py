"""The core's layout by concern, held to its rules (docs/architecture.md draws it).

Each package of the core has a layer; a module imports only from its own layer or lower ones,
counting imports inside functions, so no import loop can form at any level. The graph is read
from the source (``tests/import_graph.py``; ``python tests/import_graph.py`` prints it).
"""

from __future__ import annotations

import ast
import importlib

import pytest

from atlasbus.former_names import FORMER_NAMES
from import_graph import Module, loops, modules, package_graph

# Lowest first. A module's layer is that of the longest name here that is a prefix of its own.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("atlasbus.errors", "atlasbus.option_names", "atlasbus.version", "atlasbus.former_names"),
    ("atlasbus.model",),
    ("atlasbus.wire",),
    ("atlasbus.bus",),
    ("atlasbus.options",),
    ("atlasbus.decoding",),
    ("atlasbus.publishing",),
    ("atlasbus.dead_letters",),
    ("atlasbus.planning",),
    ("atlasbus.reading",),
    ("atlasbus.operations",),
    ("atlasbus.driver",),
    ("atlasbus.preload", "atlasbus.cli", "atlasbus.sandbox"),
    ("atlasbus",),
    ("pyspark_atlasbus",),
)

GRAPH = modules()


def layer_of(name: str) -> int:
    best, layer = "", -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
                best, layer = prefix, index
    assert layer >= 0, f"{name} has no layer: add its package to LAYERS"
    return layer


def test_every_module_has_a_layer() -> None:
    for name in GRAPH:
        layer_of(name)


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [
        f"{module.name} (layer {layer_of(module.name)}) imports {target} (layer {layer_of(target)})"
        for module in GRAPH.values()
        for target in module.imports
        if layer_of(target) > layer_of(module.name)
    ]
    assert upward == []


def test_no_import_loop_counting_imports_inside_functions() -> None:
    assert loops(GRAPH) == []


def test_no_loop_between_packages() -> None:
    assert loops(package_graph(GRAPH)) == []


def test_the_packages_import_their_modules_by_their_own_names() -> None:
    """A former name (``atlasbus.connection``) is for users' code, not the packages'."""
    assert {name: sorted(m.unresolved) for name, m in GRAPH.items() if m.unresolved} == {}


def test_the_core_never_imports_spark_or_the_adapter() -> None:
    for module in GRAPH.values():
        if module.name.startswith("atlasbus"):
            assert not [t for t in module.imports if t.startswith("pyspark_atlasbus")], module.name
    core_text = [
        m.name for m in GRAPH.values() if m.name.startswith("atlasbus") and _imports_pyspark(m)
    ]
    assert core_text == []


def _imports_pyspark(module: Module) -> bool:
    tree = ast.parse(module.path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "pyspark" for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pyspark":
            return True
    return False


def test_no_folder_of_the_core_holds_more_than_fifteen_modules() -> None:
    counts: dict[str, int] = {}
    for module in GRAPH.values():
        if not module.is_package and module.name.startswith("atlasbus"):
            counts[module.folder] = counts.get(module.folder, 0) + 1
    assert {folder: n for folder, n in counts.items() if n > 15} == {}


@pytest.mark.parametrize("former", sorted(FORMER_NAMES))
def test_a_former_module_name_is_the_module_that_holds_it_now(former: str) -> None:
    old = importlib.import_module(f"atlasbus.{former}")
    assert old is importlib.import_module(f"atlasbus.{FORMER_NAMES[former]}")


def test_what_the_docs_import_still_imports() -> None:
    from atlasbus.connection import RedisEndpoint, shown_url
    from atlasbus.lag import entries_behind
    from atlasbus.raw_fields import raw_bytes, raw_entry
    from atlasbus.reaper import sweep_retry_exhausted
    from atlasbus.retention import trim_consumed
    from atlasbus.status import bus_status

    assert RedisEndpoint.from_options(None, None, None).description == "localhost:6379"
    assert all(
        callable(f)
        for f in (shown_url, entries_behind, raw_bytes, raw_entry, sweep_retry_exhausted)
    )
    assert callable(trim_consumed) and callable(bus_status)
