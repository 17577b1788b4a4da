"""The compiled loops' machine code, cached on disk (atlasbus.decoding.kernels.compiler): loaded again while
atlasbus's sources are the same, never once any of them has changed, and cached even where
neither the module's directory nor the user's cache can be written: in a folder of the user's
own in the temporary directory, and never in one another user could have made first.

Each case runs Python in a process of its own, over a private copy of the package or of a
module, so that its cache starts empty and the suite's own cache is left alone.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import atlasbus
from atlasbus.decoding.kernels import cut_one_layout as xrange_reply

PROBE_HELPER = """
from atlasbus.decoding.kernels.compiler import inlined


@inlined
def step(value):
    return value + {increment}
"""

PROBE_LOOP = """
from atlasbus.decoding.kernels.compiler import compiled
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
    changed only a helper compiled into a loop (a scanner of atlasbus.decoding.kernels.json_lexer inlined into
    atlasbus.decoding.kernels.flat_json_maps) would run the old helper, cached beside the unchanged module."""
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


CUT_ONE_ENTRY = (
    "import numpy as np, copied_xrange_reply as x\n"
    "reply = b'*1\\r\\n*2\\r\\n$3\\r\\n1-1\\r\\n*2\\r\\n$1\\r\\na\\r\\n$1\\r\\nb\\r\\n'\n"
    "buf = np.frombuffer(reply, np.uint8).copy()\n"
    "walk = x.Walk()\n"
    "assert x.walk_reply(buf, len(reply), walk) == x.COMPLETE\n"
    "page = x.cut_reply(buf, walk)\n"
    "print(page.ids.to_pylist(), page.columns[b'a'].to_pylist())\n"
)


def cut_where_neither_the_module_nor_the_user_can_cache(
    tmp_path: Path,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Cut one entry in a fresh process whose module folder and home cannot hold a cache;
    the process's temporary directory is ``tmp_path / "tmp"``."""
    package = tmp_path / "readonly"
    package.mkdir()
    module = Path(xrange_reply.__file__).read_text()
    (package / "copied_xrange_reply.py").write_text(module)
    (package / "__pycache__").write_text("a file where numba would make its cache directory")
    not_a_directory = tmp_path / "home-is-a-file"
    not_a_directory.write_text("")
    temporary = tmp_path / "tmp"
    temporary.mkdir(exist_ok=True)
    done = run_python(
        CUT_ONE_ENTRY,
        package,
        HOME=str(not_a_directory),
        XDG_CACHE_HOME=str(not_a_directory / "cache"),
        TMPDIR=str(temporary),
    )
    return done, temporary / f"atlasbus-numba-{os.getuid()}"


def test_compiles_where_neither_the_module_nor_the_user_can_cache(tmp_path: Path) -> None:
    """A read-only installation run by a user without a home directory: the code is cached
    in a folder of this user's alone (mode 0700) in the temporary directory."""
    done, folder = cut_where_neither_the_module_nor_the_user_can_cache(tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[b'1-1'] [b'b']"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert folder.stat().st_uid == os.getuid()
    assert len(list(folder.rglob("copied_xrange_reply._walk-*.nbi"))) == 1
    assert "not a private folder" not in done.stderr


def refused(tmp_path: Path, make: Callable[[Path], None]) -> None:
    """A folder ``make`` puts where the private cache folder would be is not used: the
    process warns, caches nothing there, and still cuts the entry."""
    folder = tmp_path / "tmp" / f"atlasbus-numba-{os.getuid()}"
    folder.parent.mkdir()
    make(folder)
    before = sorted(path.name for path in folder.rglob("*")) if folder.is_dir() else []

    done, _ = cut_where_neither_the_module_nor_the_user_can_cache(tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[b'1-1'] [b'b']"
    assert f"atlasbus: {folder} is not a private folder of this user" in done.stderr
    assert "compiled code is not cached on disk" in done.stderr
    after = sorted(path.name for path in folder.rglob("*")) if folder.is_dir() else []
    assert after == before  # nothing written, nothing of it loaded


def test_a_cache_folder_another_user_made_first_is_refused(tmp_path: Path) -> None:
    """Another local user can create the folder first in a shared temporary directory (and
    fill it with machine code); it is refused, whatever its mode."""
    if os.getuid() != 0:
        pytest.skip("making a folder another user owns needs root (CI runs as root)")

    def foreign(folder: Path) -> None:
        folder.mkdir(mode=0o700)
        (folder / "planted.nbi").write_bytes(b"not ours")
        os.chown(folder, 65534, 65534)

    refused(tmp_path, foreign)


def test_a_cache_folder_others_may_write_is_refused(tmp_path: Path) -> None:
    def open_to_all(folder: Path) -> None:
        folder.mkdir()
        folder.chmod(0o777)

    refused(tmp_path, open_to_all)


def test_a_link_in_place_of_the_cache_folder_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    refused(tmp_path, lambda folder: folder.symlink_to(elsewhere))


def test_a_temporary_directory_others_may_write_without_the_sticky_bit_is_not_used(
    tmp_path: Path,
) -> None:
    """In a world-writable folder without /tmp's sticky bit, another user could rename this
    user's folder away and put theirs in its place: nothing is cached there."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    temporary.chmod(0o777)

    done, folder = cut_where_neither_the_module_nor_the_user_can_cache(tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[b'1-1'] [b'b']"
    assert f"atlasbus: other users may replace folders in {temporary}" in done.stderr
    assert not folder.exists()
