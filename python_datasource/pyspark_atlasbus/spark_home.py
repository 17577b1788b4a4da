"""A SPARK_HOME whose ``pyspark.zip`` is pyspark's modules with their bytecode, unzipped.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it
starts, and pip's pyspark (like Spark's own distributions) ships that zip with sources only.
Python caches no bytecode for modules imported from a zip, so every process that does not fork
from a warm daemon compiles pyspark again: each streaming query's driver-side runner (0.5-0.9 s
of every query's start on a 2-core machine, measured in docs/benchmarks.md), and each planning
or worker process Spark starts afresh. And as each of them starts, pyspark calls
``importlib.invalidate_caches()``, which makes every zip importer read the zip's whole
directory again, in Python: 0.12-0.23 s for the installed zip in a fresh runner, twice that
for a zip with bytecode.

``spark_home_with_bytecode`` builds, once, a directory of links to a SPARK_HOME whose only real
part is ``python/lib/pyspark.zip``: a directory (Python imports from any directory on its path,
whatever its name) holding the zip's files and each module's bytecode in ``__pycache__``. The
``.pyc`` files are unchecked hash-based ones (PEP 552), so they are used whatever the clocks and
time zones of the machines that build and use the copy (it never changes). Nothing installed
is changed. The copy fits one ``pyspark.zip`` and one Python version (both in its name), so an
upgrade of either builds a new one.

Runs on the driver, before the JVM starts: the JVM and its Python processes take SPARK_HOME from
the environment. ``local_session`` uses it; ``atlasbus spark-home`` prints one for a cluster's
image or a ``spark-submit`` to export.
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import importlib.util
import os
import py_compile
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from pyspark_atlasbus.cache_dir import cache_dir

ZIP = Path("python", "lib", "pyspark.zip")
_MARKER = "pyspark/__init__.pyc"  # a zip that has it already carries bytecode
_LAYOUT = b"unzipped, bytecode in __pycache__"  # in the copy's name: an earlier layout's differs
_CANNOT_BUILD = (OSError, zipfile.BadZipFile)  # an unwritable cache, a damaged pyspark.zip


def installed_spark_home() -> Path:
    """The SPARK_HOME pyspark's launcher would use: ``$SPARK_HOME``, else the package's own."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def has_bytecode(spark_home: Path) -> bool:
    """Whether ``spark_home``'s pyspark.zip already carries bytecode: a copy made here (a
    directory), or a zip that holds ``.pyc`` files."""
    if (spark_home / ZIP).is_dir():
        return True
    with zipfile.ZipFile(spark_home / ZIP) as archive:
        return _MARKER in archive.NameToInfo


def spark_home_with_bytecode(spark_home: Path, cache: Path) -> Path:
    """A directory under ``cache`` that mirrors ``spark_home`` (links) but for pyspark.zip.

    Built once per zip and Python version; later calls return it at once. Building one also
    removes the copies of SPARK_HOMEs that no longer exist. Built in a private
    directory and renamed into place, so processes building it at the same time each see a
    complete copy (the first rename wins, the others' copies are removed). A ``spark_home``
    whose zip already carries bytecode is returned as it is. Raises OSError when ``cache``
    cannot be written.
    """
    spark_home = spark_home.resolve()
    if has_bytecode(spark_home):
        return spark_home
    digest = hashlib.sha256(str(spark_home).encode() + _LAYOUT)
    with (spark_home / ZIP).open("rb") as sources:
        digest.update(hashlib.file_digest(sources, "sha256").digest())
    name = f"spark-home-{digest.hexdigest()[:12]}-{importlib.util.MAGIC_NUMBER.hex()}"
    home = cache.resolve() / name
    if (home / ZIP).exists():
        return home
    cache.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{name}.", suffix=".partial", dir=cache))
    try:
        _link_all_but_the_zip(spark_home, building)
        _unzip_with_bytecode(spark_home / ZIP, building / ZIP, home / ZIP)
        try:
            building.rename(home)
        except OSError:
            if not (home / ZIP).exists():  # not another builder's finished copy: a real error
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    _remove_copies_of_removed_spark_homes(cache)
    return home


def _remove_copies_of_removed_spark_homes(cache: Path) -> None:
    """Delete earlier copies whose SPARK_HOME is gone (a removed virtualenv's pyspark): each
    holds pyspark's modules and bytecode (about 45 MB) that nothing can use any more."""
    for copy in cache.glob("spark-home-*"):
        jars = copy / "jars"
        if not copy.name.endswith(".partial") and jars.is_symlink() and not jars.exists():
            shutil.rmtree(copy, ignore_errors=True)


def _link_all_but_the_zip(spark_home: Path, target: Path) -> None:
    (target / ZIP.parent).mkdir(parents=True)
    for parent in (Path(), ZIP.parent.parent, ZIP.parent):
        for entry in (spark_home / parent).iterdir():
            below = parent / entry.name
            if below not in (ZIP.parent.parent, ZIP.parent, ZIP):
                (target / below).symlink_to(entry)


def _unzip_with_bytecode(source: Path, target: Path, final: Path) -> None:
    """Unzip ``source`` into the directory ``target`` and compile each module beside it; the
    code names its source by ``final``, where the directory will be used from."""
    with zipfile.ZipFile(source) as archive:
        archive.extractall(target)
    compileall.compile_dir(
        target,
        ddir=final,
        quiet=2,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )


def bytecode_spark_home() -> Path:
    """The bytecode copy of the SPARK_HOME the launcher would use, in ``cache_dir()``."""
    return spark_home_with_bytecode(installed_spark_home(), cache_dir())


def use_spark_home_with_bytecode() -> str | None:
    """Point ``$SPARK_HOME`` at the bytecode copy of the SPARK_HOME the launcher would use.

    For a session about to start its JVM. Returns None, or one line saying why it could not
    (the session then starts from the SPARK_HOME as it was, only slower to start queries).
    """
    try:
        home = bytecode_spark_home()
    except _CANNOT_BUILD as exc:
        return (
            f"atlasbus: Spark's Python processes compile pyspark at each start: no copy of "
            f"pyspark.zip with bytecode could be made under {cache_dir()} ({exc}); set "
            "$ATLASBUS_CACHE_DIR to a writable directory to have one"
        )
    os.environ["SPARK_HOME"] = str(home)
    return None


def register(subparsers: Any) -> None:
    """Add the ``spark-home`` command to the ``atlasbus`` command line."""
    parser = subparsers.add_parser(
        "spark-home",
        help="print a SPARK_HOME whose pyspark.zip carries bytecode (faster query starts)",
        description=(
            "Build once, and print, a directory of links to SPARK_HOME whose pyspark.zip is "
            "pyspark's modules unzipped with their bytecode, so Spark's Python processes stop "
            "compiling pyspark and rereading the zip at every start. Export it: "
            "SPARK_HOME=$(atlasbus spark-home)."
        ),
    )
    parser.add_argument(
        "--spark-home",
        type=Path,
        help="the SPARK_HOME to mirror (default: $SPARK_HOME, else the installed pyspark's)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        help="where to build it (default: $ATLASBUS_CACHE_DIR, else ~/.cache/atlasbus)",
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    spark_home = args.spark_home or installed_spark_home()
    cache = args.cache or cache_dir()
    if not (spark_home / ZIP).exists():
        given = "--spark-home" if args.spark_home else "$SPARK_HOME"
        if not args.spark_home and not os.environ.get("SPARK_HOME"):
            given = "the installed pyspark"
        print(
            f"atlasbus spark-home: error: {spark_home} (from {given}) has no {ZIP}: "
            "pass --spark-home a Spark installation (or pip's pyspark package directory)",
            file=sys.stderr,
        )
        return 2
    try:
        print(spark_home_with_bytecode(spark_home, cache))
    except _CANNOT_BUILD as exc:
        print(f"atlasbus spark-home: error: cannot build under {cache}: {exc}", file=sys.stderr)
        return 1
    return 0
