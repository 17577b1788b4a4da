"""A local SparkSession set up the way atlasbus needs, for the demo, notebooks, tests, benchmarks.

Spark starts its Python workers with ``$PYSPARK_PYTHON`` (default: ``python3`` on PATH, not the
running virtualenv), so workers cannot import atlasbus unless it points at this interpreter
before the JVM starts; setting ``spark.pyspark.python`` on the builder was not enough.

Quiet by default: ``SparkContext.setLogLevel`` only takes effect once the session is up, after
Spark has already logged its start-up warnings, so the JVM is also started with the log4j2
configuration shipped next to this module (errors only; see ``log4j2.properties``). One line
remains, ``WARNING: Using incubator modules: jdk.incubator.vector``: the JVM itself prints it
for the ``--add-modules`` flag Spark's launcher always passes, before any logging exists.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
"""Errors only from the JVM's start; ``local_session(quiet=True)`` points log4j2 at it."""

_DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def local_session(
    app_name: str,
    *,
    master: str = "local[2]",
    driver_memory: str = "2g",
    config: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
    quiet: bool = True,
) -> SparkSession:
    """Get or create a local session whose Python workers run this interpreter.

    Runs on the driver, before the JVM exists (the environment and Java options below only
    apply to a JVM this call starts). ``quiet`` starts the JVM with ``LOG4J2_CONFIG``: a
    ``-Dlog4j2.configurationFile`` in ``config``'s ``spark.driver.extraJavaOptions`` comes later
    on the command line and wins. A ``local`` master binds to 127.0.0.1 unless
    ``$SPARK_LOCAL_IP`` says otherwise: nothing outside this machine needs to reach the driver,
    and Spark no longer warns that the hostname resolves to a loopback address.
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
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", driver_memory)
    )
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session
