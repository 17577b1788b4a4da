"""The compiled loops' machine code, cached on disk (atlasbus.compiled): loaded again while
atlasbus's sources are the same, never once any of them has changed, and cached even where
neither the module's directory nor the user's cache can be written.

Each case runs Python in a process of its own, over a private copy of the package or of a
module, so that its cache starts empty and the suite's own cache is left alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import atlasbus
from atlasbus import xrange_reply

PROBE_HELPER = """
from atlasbus.compiled import inlined


@inlined
def step(value):
    return value + {increment}
"""

PROBE_LOOP = """
from atlasbus.compiled import compiled
from atlasbus.probe_helper import step


@compiled
def loop(value):
    return step(value)
"""

RUN_PROBE = (
    "from atlasbus.probe_loop import loop\n"
    "print(loop(40), sum(loop.stats.cache_hits.values()), sum(loop.stats.cache_misses.values()))\n"
)


def copied_package(root: Path) -> Path:
    """A copy of the atlasbus under test, without its caches, in ``root``."""
    package = root / "atlasbus"
    shutil.copytree(
        Path(atlasbus.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__")
    )
    return package


def run_python(script: str, path: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    variables = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), *sys.path])}
    variables.pop("NUMBA_CACHE_DIR", None)
    variables.pop("NUMBA_DISABLE_JIT", None)
    variables["PYTHONDONTWRITEBYTECODE"] = "1"  # a rewrite within the second a .pyc was kept
    variables.update(environment)
    return subprocess.run(
        [sys.executable, "-c", script], env=variables, capture_output=True, text=True
    )


def probe(root: Path) -> tuple[int, int, int]:
    """The loop's answer for 40, and its cache's hits and misses, in a fresh process."""
    done = run_python(RUN_PROBE, root)
    assert done.returncode == 0, done.stderr
    answer, hits, misses = done.stdout.split()
    return int(answer), int(hits), int(misses)


def test_a_change_in_a_helpers_module_alone_recompiles_the_loops_that_inline_it(
    tmp_path: Path,
) -> None:
    """numba keys its cache on the loop's own module and bytecode only. A release that
    changed only a helper compiled into a loop (a scanner of atlasbus.json_scan inlined into
    atlasbus.flat_json_maps) would run the old helper, cached beside the unchanged module."""
    package = copied_package(tmp_path)
    (package / "probe_helper.py").write_text(PROBE_HELPER.format(increment=1))
    (package / "probe_loop.py").write_text(PROBE_LOOP)

    assert probe(tmp_path) == (41, 0, 1)  # compiled, and cached
    assert probe(tmp_path) == (41, 1, 0)  # loaded from the cache

    (package / "probe_helper.py").write_text(PROBE_HELPER.format(increment=20))
    assert probe(tmp_path) == (60, 0, 1)
    assert probe(tmp_path) == (60, 1, 0)


def test_a_change_in_any_module_of_the_package_recompiles(tmp_path: Path) -> None:
    """Constants are compiled into the loops as well, from whichever module holds them: any
    change to atlasbus's sources (a release) makes every loop compile once more."""
    package = copied_package(tmp_path)
    (package / "probe_helper.py").write_text(PROBE_HELPER.format(increment=1))
    (package / "probe_loop.py").write_text(PROBE_LOOP)
    assert probe(tmp_path) == (41, 0, 1)

    with (package / "errors.py").open("a") as errors:
        errors.write("# a comment\n")
    assert probe(tmp_path) == (41, 0, 1)
    assert probe(tmp_path) == (41, 1, 0)


def test_compiles_where_neither_the_module_nor_the_user_can_cache(tmp_path: Any) -> None:
    """A read-only installation run by a user without a home directory: numba refuses to
    compile a cached function when it can write to neither place it caches, so the code
    is cached in the temporary directory instead, and the cutter works."""
    package = tmp_path / "readonly"
    package.mkdir()
    module = Path(xrange_reply.__file__).read_text()
    (package / "copied_xrange_reply.py").write_text(module)
    (package / "__pycache__").write_text("a file where numba would make its cache directory")
    not_a_directory = tmp_path / "home-is-a-file"
    not_a_directory.write_text("")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    script = (
        "import numpy as np, copied_xrange_reply as x\n"
        "reply = b'*1\\r\\n*2\\r\\n$3\\r\\n1-1\\r\\n*2\\r\\n$1\\r\\na\\r\\n$1\\r\\nb\\r\\n'\n"
        "buf = np.frombuffer(reply, np.uint8).copy()\n"
        "walk = x.Walk()\n"
        "assert x.walk_reply(buf, len(reply), walk) == x.COMPLETE\n"
        "page = x.cut_reply(buf, walk)\n"
        "print(page.ids.to_pylist(), page.columns[b'a'].to_pylist())\n"
    )
    done = run_python(
        script,
        package,
        HOME=str(not_a_directory),
        XDG_CACHE_HOME=str(not_a_directory / "cache"),
        TMPDIR=str(temporary),
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[b'1-1'] [b'b']"
    cached = list((temporary / "atlasbus-numba-cache").rglob("copied_xrange_reply._walk-*.nbi"))
    assert len(cached) == 1
