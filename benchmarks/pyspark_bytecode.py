"""A SPARK_HOME whose pyspark.zip carries bytecode, for measuring Spark's Python start-up.

    python benchmarks/pyspark_bytecode.py [DIRECTORY [SPARK_HOME]]   # prints the one to export

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python process it starts, and
pip's pyspark (and Spark's own distributions) ship that zip with sources only. Python cannot
cache bytecode inside a zip, so each process that does not fork from the worker daemon (a
streaming source's runner: one per query) compiles pyspark again. This builds, once, a
directory of links to a SPARK_HOME (by default the installed pyspark's) whose only real file
is a copy of pyspark.zip with a ``.pyc`` beside each ``.py``. The ``.pyc`` files are
unchecked hash-based ones, so zipimport loads them whatever the clocks and time zones of the
machines that build and use the mirror (the copy never changes). Nothing installed is
changed.

Runs on the benchmark's driver, before the JVM starts (the JVM and its Python processes take
SPARK_HOME from the environment). The mirror holds bytecode for one pyspark.zip and one
Python version (both in its name): build it again after upgrading either.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import sys
import zipfile
from pathlib import Path

ZIP = Path("python", "lib", "pyspark.zip")
UNCHECKED_HASH_BASED = 0b01  # PEP 552: a hash-based .pyc whose source is not checked


def with_bytecode(source: Path, target: Path, final: Path) -> None:
    """Copy the zip ``source`` to ``target``, adding each module's bytecode; ``final`` is where
    the zip will be used from, named in the code's file names as zipimport would name them
    (pyspark's worker recognises its own frames in tracebacks by them)."""
    with zipfile.ZipFile(source) as sources, zipfile.ZipFile(target, "w") as out:
        for info in sources.infolist():
            data = sources.read(info)
            out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
            if not info.filename.endswith(".py"):
                continue
            header = b"".join(
                (
                    importlib.util.MAGIC_NUMBER,
                    UNCHECKED_HASH_BASED.to_bytes(4, "little"),
                    importlib.util.source_hash(data),
                )
            )
            code = compile(data, str(final / info.filename), "exec", dont_inherit=True)
            compiled = zipfile.ZipInfo(info.filename + "c", info.date_time)
            out.writestr(compiled, header + marshal.dumps(code), zipfile.ZIP_DEFLATED)


def spark_home_with_bytecode(spark_home: Path, cache: Path) -> Path:
    """A directory under ``cache`` that mirrors ``spark_home`` (links) but for pyspark.zip."""
    spark_home = spark_home.resolve()
    digest = hashlib.sha256(str(spark_home).encode())
    with (spark_home / ZIP).open("rb") as sources:
        digest.update(hashlib.file_digest(sources, "sha256").digest())
    home = cache.resolve() / (
        f"spark-home-{digest.hexdigest()[:12]}-{importlib.util.MAGIC_NUMBER.hex()}"
    )
    if (home / ZIP).exists():
        return home
    partial = home.with_name(home.name + ".partial")
    if partial.exists():
        for path in sorted(partial.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            path.unlink() if path.is_symlink() or path.is_file() else path.rmdir()
        partial.rmdir()
    (partial / ZIP.parent).mkdir(parents=True)
    for entry in spark_home.iterdir():
        if entry.name != "python":
            (partial / entry.name).symlink_to(entry)
    for entry in (spark_home / "python").iterdir():
        if entry.name != "lib":
            (partial / "python" / entry.name).symlink_to(entry)
    for entry in (spark_home / ZIP.parent).iterdir():
        if entry.name != ZIP.name:
            (partial / ZIP.parent / entry.name).symlink_to(entry)
    with_bytecode(spark_home / ZIP, partial / ZIP, home / ZIP)
    partial.rename(home)
    return home


def installed_spark_home() -> Path:
    """The SPARK_HOME of the pyspark this interpreter imports (pip's: the package itself)."""
    import pyspark

    return Path(pyspark.__file__).parent


def benchmarks_spark_home_with_bytecode() -> Path:
    """The installed SPARK_HOME's mirror, kept in benchmarks/.cache (git-ignored)."""
    return spark_home_with_bytecode(installed_spark_home(), Path(__file__).parent / ".cache")


if __name__ == "__main__":
    cache = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / ".cache"
    spark_home = Path(sys.argv[2]) if len(sys.argv) > 2 else installed_spark_home()
    print(spark_home_with_bytecode(spark_home, cache))
