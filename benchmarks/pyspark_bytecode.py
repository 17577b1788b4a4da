"""A SPARK_HOME whose pyspark.zip carries bytecode, for measuring Spark's Python start-up.

    python benchmarks/pyspark_bytecode.py [DIRECTORY]   # prints the SPARK_HOME to export

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python process it starts, and
pip's pyspark ships that zip with sources only. Python cannot cache bytecode inside a zip, so
each process that does not fork from the worker daemon (a streaming source's runner: one per
query) compiles pyspark again. This builds, once, a directory of links to the installed
SPARK_HOME whose only real file is a copy of pyspark.zip with a ``.pyc`` beside each ``.py``
(zipimport loads those when their timestamps match). Nothing installed is changed.

Runs on the benchmark's driver, before the JVM starts (the JVM and its Python processes take
SPARK_HOME from the environment). The mirror holds bytecode for one pyspark and one Python
version (both in its name): build it again after upgrading either.
"""

from __future__ import annotations

import importlib.util
import marshal
import sys
import time
import zipfile
from pathlib import Path

ZIP = Path("python", "lib", "pyspark.zip")


def with_bytecode(source: Path, target: Path) -> None:
    """Copy the zip ``source`` to ``target``, adding each module's timestamp-checked bytecode."""
    with zipfile.ZipFile(source) as sources, zipfile.ZipFile(target, "w") as out:
        for info in sources.infolist():
            data = sources.read(info)
            out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
            if not info.filename.endswith(".py"):
                continue
            # zipimport compares the .pyc's mtime with the .py entry's DOS time, read as local
            mtime = int(time.mktime((*info.date_time, 0, 0, -1)))
            header = b"".join(
                (
                    importlib.util.MAGIC_NUMBER,
                    (0).to_bytes(4, "little"),  # flags: timestamp-checked
                    (mtime & 0xFFFFFFFF).to_bytes(4, "little"),
                    (len(data) & 0xFFFFFFFF).to_bytes(4, "little"),
                )
            )
            code = compile(data, info.filename, "exec", dont_inherit=True)
            compiled = zipfile.ZipInfo(info.filename + "c", info.date_time)
            out.writestr(compiled, header + marshal.dumps(code), zipfile.ZIP_DEFLATED)


def spark_home_with_bytecode(spark_home: Path, cache: Path) -> Path:
    """A directory under ``cache`` that mirrors ``spark_home`` (links) but for pyspark.zip."""
    import pyspark

    home = cache / f"spark-home-{pyspark.__version__}-{importlib.util.MAGIC_NUMBER.hex()}"
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
    with_bytecode(spark_home / ZIP, partial / ZIP)
    partial.rename(home)
    return home


if __name__ == "__main__":
    import pyspark

    cache = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / ".cache"
    print(spark_home_with_bytecode(Path(pyspark.__file__).parent, cache.resolve()))
