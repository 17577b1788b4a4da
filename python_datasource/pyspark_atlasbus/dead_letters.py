"""The dead-letter table as a Spark DataFrame, with or without the Delta Lake jars.

Where Spark has delta-spark on its classpath the table is read natively (``format("delta")``:
lazy, distributed, Spark's own storage settings). Elsewhere it is read on the driver with
delta-rs and handed to Spark as Arrow, which needs no jars; dead-letter tables are small, so
this is the right trade on a laptop or a cluster without Delta. Runs on the driver.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from os import PathLike, fspath
from typing import Literal

from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession

from atlasbus.dead_letters import DeadLetterTable, DeadLetterTableError, QueryContext

log = logging.getLogger("atlasbus.dead_letters")

Engine = Literal["auto", "delta-spark", "delta-rs"]
ENGINES: tuple[Engine, ...] = ("auto", "delta-spark", "delta-rs")

# What format("delta") resolves to; if the JVM cannot load it, delta-spark cannot read.
_DELTA_SOURCE_CLASS = "org.apache.spark.sql.delta.sources.DeltaDataSource"


# Spark's own keys (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY), and the
# job description a streaming query sets: "{name}\nid = {id}\nrunId = {runId}\nbatch = {n}".
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
JOB_DESCRIPTION_PROPERTY = "spark.job.description"


def query_context_from(get: Callable[[str], str | None]) -> QueryContext:
    """The streaming query's ID, name and micro-batch from Spark's local properties.

    ``get`` is ``TaskContext.getLocalProperty`` on an executor or
    ``SparkContext.getLocalProperty`` in ``foreachBatch``. Outside a streaming query (a batch
    read) every field is None.
    """
    query_id = get(QUERY_ID_PROPERTY) or None
    raw_batch = get(BATCH_ID_PROPERTY)
    batch_id = int(raw_batch) if raw_batch and raw_batch.lstrip("-").isdigit() else None
    name = None
    description = get(JOB_DESCRIPTION_PROPERTY) or ""
    lines = description.split("\n")
    if query_id and len(lines) > 1 and lines[1] == f"id = {query_id}":
        name = lines[0] or None
    return QueryContext(query_id=query_id, query_name=name, batch_id=batch_id)


def task_query_context() -> QueryContext:
    """``query_context_from`` the running task's local properties; executor."""
    context = TaskContext.get()
    if context is None:
        return QueryContext()
    return query_context_from(context.getLocalProperty)


def delta_jars_available(spark: SparkSession) -> bool:
    """Whether Spark's JVM can load delta-spark's data source class (cheap, no query)."""
    try:
        jvm = spark.sparkContext._jvm
        if jvm is None:
            return False
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(_DELTA_SOURCE_CLASS, False, loader)
    except Exception:  # no JVM (Spark Connect) or class not found: both mean "no jars here"
        return False
    return True


def read_dead_letters(
    spark: SparkSession,
    uri: str | PathLike[str],
    storage_options: Mapping[str, str] | None = None,
    *,
    engine: Engine = "auto",
) -> DataFrame:
    """The dead-letter table at ``uri`` as a DataFrame with the contract's columns.

    ``engine="auto"`` uses delta-spark when its jars load, else delta-rs; one INFO line says
    which and why. ``storage_options`` are delta-rs's; delta-spark uses Spark's Hadoop settings.
    """
    if engine not in ENGINES:
        raise ValueError(f"{engine!r} is not a valid engine. Valid values are: {list(ENGINES)}")
    path = fspath(uri)
    if engine == "delta-rs":
        use_delta_spark, why = False, "requested"
    elif delta_jars_available(spark):
        use_delta_spark = True
        why = "requested" if engine == "delta-spark" else "the Delta Lake jars are on the classpath"
    elif engine == "delta-spark":
        raise DeadLetterTableError(
            f"cannot read dead-letter table {path!r} with engine='delta-spark': Spark cannot load "
            f"{_DELTA_SOURCE_CLASS}; put the Delta Lake jars on Spark's classpath "
            "(io.delta:delta-spark_2.13) or use engine='auto' to read through delta-rs"
        )
    else:
        use_delta_spark, why = False, "the Delta Lake jars are not on Spark's classpath"
    if use_delta_spark:
        log.info("reading dead-letter table %s through delta-spark (%s)", path, why)
        return spark.read.format("delta").load(path)
    log.info("reading dead-letter table %s through delta-rs and Arrow (%s)", path, why)
    return spark.createDataFrame(DeadLetterTable(path, storage_options).to_arrow())
