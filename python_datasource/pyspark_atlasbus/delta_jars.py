"""The Delta Lake jars for a local session: fetched once, quietly, then used from the disk.

Why not just ``spark.jars.packages``: Spark's Ivy resolver then runs at every JVM start (about
a second, and some 20 lines of resolution report on stderr, which lands in a notebook's cell),
and when Maven Central is out of reach the launcher dies after some 60 lines of Ivy errors. So
the coordinate delta-spark's own ``configure_spark_with_delta_pip`` computes is resolved once
in a throwaway JVM whose output is kept aside (the jars land in Ivy's cache, ``~/.ivy2.5.2``),
the list of jar files is remembered in atlasbus's cache directory (``cache_dir``), and every
later session is started with ``spark.jars`` set to those files: no resolver, no network, no
output. A missing file (a cleaned Ivy cache) means resolving again.

Runs on the driver, before the session's JVM exists. ``$ATLASBUS_DELTA_JARS=off`` turns it off.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pyspark import SparkConf
from pyspark.sql import SparkSession

from pyspark_atlasbus.cache_dir import cache_dir

OFF_VALUES = ("0", "off", "false", "no")


NOT_INSTALLED = (
    "delta-spark is not installed (pip install 'atlasbus[delta]' where a delta-spark release "
    "supports this pyspark)"
)


@dataclass(frozen=True)
class DeltaJars:
    """The outcome: ``jars`` (comma-separated ``file:`` URIs for ``spark.jars``) or ``why`` not.

    ``coordinate`` is None when delta-spark is not installed (an extra: it pins pyspark).
    """

    coordinate: str | None
    jars: str | None
    why: str | None = None


def delta_package() -> str | None:
    """The Maven coordinate of delta-spark's jar matching the installed delta-spark and pyspark,
    or None when delta-spark is not installed.

    Asked of ``configure_spark_with_delta_pip`` itself (on a throwaway builder), so the version
    is the installed Python package's, never a second copy kept here.
    """
    try:
        from delta import configure_spark_with_delta_pip
    except ImportError:
        return None
    builder = configure_spark_with_delta_pip(SparkSession.Builder())
    return str(builder._options["spark.jars.packages"])


def turned_off() -> bool:
    return os.environ.get("ATLASBUS_DELTA_JARS", "").strip().lower() in OFF_VALUES


def cache_file(coordinate: str) -> Path:
    return cache_dir() / (coordinate.replace(":", "_") + ".jars")


def find_delta_jars(ivy_settings: dict[str, str] | None = None) -> DeltaJars:
    """The jar files of delta-spark and its dependencies, resolved once and remembered.

    ``ivy_settings``: ``spark.jars.ivy``, ``spark.jars.repositories``, ``spark.jars.ivySettings``
    or ``spark.driver.extraJavaOptions`` (a proxy) for the resolving JVM, as a session would
    pass them.
    """
    coordinate = delta_package()
    if coordinate is None:
        return DeltaJars(None, None, NOT_INSTALLED)
    jars = remembered_jars(coordinate)
    if jars is not None:
        return DeltaJars(coordinate, jars)
    remembered = cache_file(coordinate)
    found = _resolve(coordinate, ivy_settings or {})
    if found.jars is not None:
        try:
            remembered.parent.mkdir(parents=True, exist_ok=True)
            remembered.write_text(found.jars + "\n")
        except OSError:
            pass  # not remembered: resolved again next time
    return found


def remembered_jars(coordinate: str) -> str | None:
    """The jars resolved for ``coordinate`` before, when every file is still there; else None
    (the next session resolves them: a download on a machine that never had them)."""
    remembered = cache_file(coordinate)
    if not remembered.is_file():
        return None
    jars = remembered.read_text().strip()
    return jars if jars and all(_exists(uri) for uri in jars.split(",")) else None


def _exists(uri: str) -> bool:
    parsed = urlparse(uri)
    return parsed.scheme in ("", "file") and Path(parsed.path).is_file()


def _resolve(coordinate: str, ivy_settings: dict[str, str]) -> DeltaJars:
    """Resolve ``coordinate`` in a JVM of its own (Spark's launcher and Ivy), output kept aside."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False).set("spark.jars.packages", coordinate)
    for key, value in ivy_settings.items():
        conf = conf.set(key, value)
    with tempfile.TemporaryFile() as output:
        try:
            gateway = launch_gateway(  # type: ignore[no-untyped-call]
                conf, popen_kwargs={"stdout": output, "stderr": output}
            )
        except PySparkRuntimeError:
            output.seek(0)
            return DeltaJars(coordinate, None, _why(output.read().decode(errors="replace")))
        try:
            jars = str(gateway.jvm.System.getProperty("spark.jars") or "")
        finally:
            gateway.shutdown()
            if gateway.proc is not None:
                if gateway.proc.stdin is not None:
                    gateway.proc.stdin.close()  # the gateway server exits when stdin closes
                gateway.proc.wait(60)
    return DeltaJars(coordinate, jars or None, None if jars else "Ivy resolved no jar files")


def _why(output: str) -> str:
    """The telling line of a failed resolution (Ivy's own words), else a general one."""
    for line in output.splitlines():
        text = line.strip()
        if "module not found" in text or "UnresolvedDependency" in text or "unresolved" in text:
            return text[:200]
    return "Spark's launcher could not resolve them"
