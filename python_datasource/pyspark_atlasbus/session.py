"""A local SparkSession set up the way atlasbus needs, for the demo, notebooks, tests, benchmarks.

Spark starts its Python workers with ``$PYSPARK_PYTHON`` (default: ``python3`` on PATH, not the
running virtualenv), so workers cannot import atlasbus unless it points at this interpreter
before the JVM starts; setting ``spark.pyspark.python`` on the builder was not enough.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession


def local_session(
    app_name: str,
    *,
    master: str = "local[2]",
    driver_memory: str = "2g",
    config: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """Get or create a local session whose Python workers run this interpreter."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", driver_memory)
    )
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session
