"""A local SparkSession set up the way atlasbus needs, for the demo, notebooks, tests, benchmarks.

Spark starts its Python workers with ``$PYSPARK_PYTHON`` (default: ``python3`` on PATH, not the
running virtualenv), so workers cannot import atlasbus unless it points at this interpreter
before the JVM starts; setting ``spark.pyspark.python`` on the builder was not enough.

Quiet by default: ``SparkContext.setLogLevel`` only takes effect once the session is up, after
Spark has already logged its start-up warnings, so the JVM is also started with the log4j2
configuration shipped next to this module (errors only; see ``log4j2.properties``). One line
remains, ``WARNING: Using incubator modules: jdk.incubator.vector``: the JVM itself prints it
for the ``--add-modules`` flag Spark's launcher always passes, before any logging exists.

Delta Lake: by default the session is started with delta-spark's jars and its SQL extension and
catalog, so ``format("delta")``, ``delta.`path``` SQL, OPTIMIZE and VACUUM work. The jars are
the coordinate ``delta.configure_spark_with_delta_pip`` computes from the installed delta-spark
(the ``delta`` extra) and pyspark, fetched from Maven Central once (see ``delta_jars``: quietly,
then from the disk). When they cannot be had (delta-spark not installed, no network on first
use, no jar for this Spark line) one line on stderr says so, the session starts without them,
and atlasbus reads and writes its Delta tables with delta-rs.
``delta_lake_note()`` returns that line (None when the jars loaded).

Query starts: the JVM is started from a copy of its SPARK_HOME whose ``pyspark.zip`` is pyspark
unzipped with its bytecode (``spark_home``), so a streaming query's runner neither compiles
pyspark nor rereads a zip at each start.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from pyspark_atlasbus.delta_jars import find_delta_jars, turned_off
from pyspark_atlasbus.spark_home import use_spark_home_with_bytecode

LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
"""Errors only from the JVM's start; ``local_session(quiet=True)`` points log4j2 at it."""

_DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"

DELTA_EXTENSIONS: Mapping[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""What delta-spark needs beyond its jars (Delta's own quick start sets the same two)."""

LOCAL_DELTA_SETTINGS: Mapping[str, str] = {"spark.databricks.delta.snapshotPartitions": "2"}
"""For a local master: Delta replays a table's log in 50 tasks by default (sized for clusters);
on local[2] that made a read, an append and an OPTIMIZE of a 12-commit table take 25-67 s
instead of 5.5 s (measured on this project's 2-core machines)."""

WORKER_DAEMON: Mapping[str, str] = {"spark.python.daemon.module": "pyspark_atlasbus.worker_daemon"}
"""Python workers forked with atlasbus's executor code already loaded (``worker_daemon``); a
``spark.python.daemon.module`` in ``config`` wins."""

_note: str | None = None


def delta_lake_note() -> str | None:
    """Why the last ``local_session`` started without the Delta Lake jars; None if they loaded."""
    return _note


def local_session(
    app_name: str,
    *,
    master: str = "local[2]",
    driver_memory: str = "2g",
    config: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
    quiet: bool = True,
    delta: bool | None = None,
    pyspark_bytecode: bool = True,
) -> SparkSession:
    """Get or create a local session whose Python workers run this interpreter.

    Runs on the driver, before the JVM exists (the environment and Java options below only
    apply to a JVM this call starts). ``quiet`` starts the JVM with ``LOG4J2_CONFIG``: a
    ``-Dlog4j2.configurationFile`` in ``config``'s ``spark.driver.extraJavaOptions`` comes later
    on the command line and wins. A ``local`` master binds to 127.0.0.1 unless
    ``$SPARK_LOCAL_IP`` says otherwise: nothing outside this machine needs to reach the driver,
    and Spark no longer warns that the hostname resolves to a loopback address. Workers fork
    from ``WORKER_DAEMON``, which loads atlasbus's executor code once per session, not once per
    worker.

    ``delta``: None (default) loads the Delta Lake jars when they can be had (and
    ``$ATLASBUS_DELTA_JARS`` is not ``off``), else starts without them and prints one line
    saying so; True requires them (an error says why not); False never loads them. A
    ``spark.jars`` in ``config`` is kept, delta-spark's added. When a session already exists,
    it is returned as it is; when this process already runs a JVM (a session was stopped), the
    jars are whatever that JVM has.

    ``pyspark_bytecode``: start the JVM with ``$SPARK_HOME`` pointed at a copy of the SPARK_HOME
    it would use whose ``pyspark.zip`` is pyspark unzipped with its bytecode (built once, in
    ``cache_dir()``; see ``spark_home``): about 1 s less at each streaming query's start on a
    2-core machine (docs/benchmarks.md). Nothing is done when the
    JVM already runs (an earlier session, or ``spark-submit``'s). When no copy can be made,
    one line on stderr says why and the JVM starts from the SPARK_HOME as it was. It changes
    this process's ``$SPARK_HOME``, which processes it starts inherit.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = dict(config or {})
    if quiet:
        ours = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}"
        theirs = settings.get(_DRIVER_JAVA_OPTIONS, "").strip()
        settings[_DRIVER_JAVA_OPTIONS] = f"{ours} {theirs}".strip()
    base = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": driver_memory,
        **WORKER_DAEMON,
        **settings,
    }
    session = None
    # under spark-submit the JVM is already running (its port in the environment): too late
    if pyspark_bytecode and SparkContext._jvm is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        why_not = use_spark_home_with_bytecode()
        if why_not is not None:
            print(why_not, file=sys.stderr, flush=True)
    if SparkSession.getActiveSession() is None:
        jars = _delta_settings(master, base, delta)
        if jars is not None:
            session = _builder(master, app_name, {**base, **jars}).getOrCreate()
    if session is None:
        session = _builder(master, app_name, base).getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session


def _delta_settings(
    master: str, base: Mapping[str, str], delta: bool | None
) -> dict[str, str] | None:
    """The settings that load delta-spark, or None (and ``_note`` says why, once printed)."""
    global _note
    _note = None
    if delta is False or (delta is None and turned_off()):
        return None
    local = dict(LOCAL_DELTA_SETTINGS) if master.startswith("local") else {}
    if SparkContext._jvm is not None:  # a JVM from an earlier session: no new jars possible
        if _jvm_has_delta(SparkContext._jvm):
            return {**local, **base, **DELTA_EXTENSIONS}
        why = "this process's JVM was started without them"
    else:
        ivy = {k: v for k, v in base.items() if k.startswith("spark.jars.") or "Java" in k}
        found = find_delta_jars(ivy)
        if found.jars is not None:
            theirs = base.get("spark.jars", "").strip()
            jars = f"{found.jars},{theirs}" if theirs else found.jars
            return {**local, **base, **DELTA_EXTENSIONS, "spark.jars": jars}
        if found.coordinate is None:
            why = found.why or "delta-spark is not installed"
        else:
            why = f"{found.coordinate} could not be fetched ({found.why}; no Maven Central?)"
    if delta:
        raise RuntimeError(f"the Delta Lake jars are needed and cannot be had: {why}")
    _note = (
        f"atlasbus: Spark starts without the Delta Lake jars: {why}; Delta tables are read "
        "and written with delta-rs"
    )
    print(_note, file=sys.stderr, flush=True)
    return None


def _jvm_has_delta(jvm: object) -> bool:
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()  # type: ignore[attr-defined]
        jvm.java.lang.Class.forName(  # type: ignore[attr-defined]
            "io.delta.sql.DeltaSparkSessionExtension", False, loader
        )
    except Exception:
        return False
    return True


def _builder(master: str, app_name: str, settings: Mapping[str, str]) -> SparkSession.Builder:
    """A fresh builder (``SparkSession.builder`` is shared: its options would outlive a failed
    start)."""
    builder = SparkSession.Builder().master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder
