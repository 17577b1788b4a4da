"""The dead-letter table in Spark: a DataFrame view, and a ``foreachBatch`` router.

``with_dead_letters`` wraps a ``foreachBatch`` function so rows failing a check, or rows the
function rejects, are recorded with stage ``processing``.

Where Spark has delta-spark on its classpath (``local_session`` loads it when it can) the table
is read natively (``format("delta")``: lazy, distributed, Spark's own storage settings, time
travel, and ``stream_dead_letters`` for alerting). Elsewhere it is read on the driver with
delta-rs and handed to Spark as Arrow, which needs no jars; dead-letter tables are small, so
this is the right trade on a laptop or a cluster without Delta. Both show one row per
``dead_letter_id`` (the first recorded), as ``DeadLetterTable.to_arrow`` does. Runs on the
driver.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from os import PathLike, fspath
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.functions import coalesce, col, expr, lit, row_number
from pyspark.sql.window import Window

from atlasbus.dead_letters import (
    COLUMNS,
    PROCESSING,
    DeadLetter,
    DeadLetterTable,
    DeadLetterTableError,
    QueryContext,
)
from atlasbus.model.conversions import int32_or_none, text_or_none
from pyspark_atlasbus.query_context import query_context_from

log = logging.getLogger("atlasbus.dead_letters")

Engine = Literal["auto", "delta-spark", "delta-rs"]
ENGINES: tuple[Engine, ...] = ("auto", "delta-spark", "delta-rs")

# What format("delta") resolves to; if the JVM cannot load it, delta-spark cannot read.
_DELTA_SOURCE_CLASS = "org.apache.spark.sql.delta.sources.DeltaDataSource"


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
    version: int | None = None,
    all_rows: bool = False,
) -> DataFrame:
    """The dead-letter table at ``uri`` as a DataFrame with the contract's columns.

    ``engine="auto"`` uses delta-spark when its jars load, else delta-rs; one INFO line says
    which and why. ``storage_options`` are delta-rs's; delta-spark uses Spark's Hadoop settings.
    ``version`` reads the table as it was at that Delta version (``versionAsOf``; delta-rs
    loads that version). One row per ``dead_letter_id`` unless ``all_rows``.
    """
    if version is not None and version < 0:
        raise ValueError(f"version must be a non-negative Delta table version, got {version}")
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
            "(pyspark_atlasbus.session.local_session loads them) or use engine='auto' to read "
            "through delta-rs"
        )
    else:
        use_delta_spark, why = False, "the Delta Lake jars are not on Spark's classpath"
    if use_delta_spark:
        log.info("reading dead-letter table %s through delta-spark (%s)", path, why)
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        frame = reader.load(path).select(*COLUMNS)
        return frame if all_rows else first_of_each_id(frame)
    log.info("reading dead-letter table %s through delta-rs and Arrow (%s)", path, why)
    table = DeadLetterTable(path, storage_options, version=version)
    return spark.createDataFrame(table.to_arrow(all_rows=all_rows))


def first_of_each_id(frame: DataFrame) -> DataFrame:
    """One row per ``dead_letter_id``, the first recorded: the order ``to_arrow`` uses."""
    first = Window.partitionBy("dead_letter_id").orderBy("dead_lettered_at", "query_id", "batch_id")
    return (
        frame.withColumn("_atlasbus_n", row_number().over(first))
        .filter(col("_atlasbus_n") == 1)
        .drop("_atlasbus_n")
    )


def stream_dead_letters(spark: SparkSession, uri: str | PathLike[str]) -> DataFrame:
    """New dead letters as a streaming DataFrame (``readStream.format("delta")``), for alerts.

    Needs delta-spark. Every appended row arrives once per query (its checkpoint keeps the
    table version read). ``skipChangeCommits`` is set: a replay rewrites rows it counts
    (a MERGE), which a Delta stream would otherwise refuse as a change to its source; OPTIMIZE
    commits carry no new data and are skipped by Delta itself. A dead letter recorded twice
    under two app IDs (module docstring of ``atlasbus.dead_letters.table``) arrives twice: use
    ``dropDuplicatesWithinWatermark`` on ``dead_letter_id`` if that matters. Driver.
    """
    path = fspath(uri)
    if not delta_jars_available(spark):
        raise DeadLetterTableError(
            f"cannot stream dead-letter table {path!r}: Spark cannot load {_DELTA_SOURCE_CLASS}; "
            "start Spark with the Delta Lake jars (local_session loads them when Maven Central "
            "or the Ivy cache has them; on a cluster see docs/dead-letters.md)"
        )
    return (
        spark.readStream.format("delta")
        .option("skipChangeCommits", "true")
        .load(path)
        .select(*COLUMNS)
    )


# --- foreachBatch: route rejected rows to the table ------------------------------------------

REASON_COLUMN = "dead_letter_reason"
"""Optional column of the DataFrame a ``with_dead_letters`` function returns: the reason code."""
ERROR_COLUMN = "dead_letter_error"
"""Optional column of the DataFrame a ``with_dead_letters`` function returns: the message."""

CHECK_FAILED = "check-failed"
REJECTED = "rejected"

BatchFunction = Callable[[DataFrame, int], "DataFrame | None"]


def with_dead_letters(
    fn: BatchFunction,
    table: str | PathLike[str] | DeadLetterTable,
    *,
    check: str | Column | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Callable[[DataFrame, int], None]:
    """Wrap a ``foreachBatch`` function so that rejected rows go to the dead-letter table.

    ``writeStream.foreachBatch(with_dead_letters(fn, table, check="amount > 0"))``:

    - rows for which ``check`` (a SQL condition or a Column) is not true (false or null) are
      recorded with stage ``processing``, reason ``check-failed``, and never reach ``fn``;
    - ``fn(df, batch_id)`` gets the other rows. It may return a DataFrame of rows it rejects
      (any of the rows it got, same columns, optionally with ``dead_letter_reason`` and
      ``dead_letter_error`` columns; reason ``rejected`` otherwise): those are recorded too.
      Returning None rejects nothing.

    Rows read from the bus (with ``stream`` and ``id`` columns) are identified by their entry,
    so each is recorded once however often the micro-batch is replayed; other rows by the
    query, the batch and their content. The append is also a Delta app transaction per
    (query, batch). The wrapped batch is cached while ``fn`` runs, since it is read twice.
    Driver.
    """
    dlq = table if isinstance(table, DeadLetterTable) else DeadLetterTable(table, storage_options)
    condition = None if check is None else (expr(check) if isinstance(check, str) else check)
    check_text = check if isinstance(check, str) else str(check)
    name = getattr(fn, "__name__", type(fn).__name__)

    def run(df: DataFrame, batch_id: int) -> None:
        spark_context = df.sparkSession.sparkContext
        found = query_context_from(spark_context.getLocalProperty)
        context = QueryContext(found.query_id, found.query_name, batch_id)
        df.persist()
        try:
            passed = df
            failed = None
            if condition is not None:
                holds = coalesce(condition, lit(False))
                passed, failed = df.filter(holds), df.filter(~holds)
            returned = fn(passed, batch_id)
            letters = []
            if failed is not None:
                letters += _processing_letters(
                    failed.toArrow(), CHECK_FAILED, f"failed check: {check_text}", "check", context
                )
            if returned is not None:
                if not isinstance(returned, DataFrame):
                    raise TypeError(
                        f"the foreachBatch function {name} returned {type(returned).__name__}; "
                        "with_dead_letters expects None or a DataFrame of the rows it rejects"
                    )
                letters += _processing_letters(
                    returned.toArrow(), REJECTED, f"rejected by {name}", "rejected", context
                )
        finally:
            df.unpersist()
        if not letters:
            return
        if context.query_id is not None:
            dlq.append(letters, app_id=f"{context.query_id}/processing", version=batch_id)
        else:
            dlq.append(letters)

    return run


def _processing_letters(
    rows: pa.Table, reason: str, error: str, kind: str, context: QueryContext
) -> list[DeadLetter]:
    """Rejected rows as ``processing`` dead letters."""
    names = set(rows.column_names)
    records = rows.to_pylist()
    from_bus = {"stream", "id"} <= names
    if not from_bus:  # a deterministic position: rows ordered by their content
        records.sort(key=_canonical)
    write_id = f"{context.query_id or '-'}/{context.batch_id}/{kind}"
    letters = []
    for position, row in enumerate(records):
        why = row.pop(REASON_COLUMN, None) or reason
        message = row.pop(ERROR_COLUMN, None) or error
        details = _details(row)
        common: dict[str, Any] = {
            "topic": text_or_none(row.get("topic")),
            "correlation_id": text_or_none(row.get("correlation_id")),
            "priority": int32_or_none(row.get("priority")),
            "delivery_attempts": int32_or_none(row.get("delivery_attempts")),
            "payload": _payload(row),
            "fields": details,
            "context": context,
        }
        if from_bus and row.get("stream") and row.get("id"):
            letters.append(
                DeadLetter.for_entry(
                    PROCESSING,
                    why,
                    message,
                    stream=str(row["stream"]),
                    entry_id=str(row["id"]),
                    **common,
                )
            )
        else:
            letters.append(
                DeadLetter.for_row(
                    why, message, write_id=write_id, row=position, stage=PROCESSING, **common
                )
            )
    return letters


_ENVELOPE_COLUMNS = ("topic", "payload", "correlation_id", "priority", "delivery_attempts")
_SOURCE_ONLY = ("stream", "id", "timestamp", "error", "enqueued_time")


def _details(row: Mapping[str, Any]) -> dict[str, str]:
    """``fields``: the raw entry when the row carries it, else its other columns as text
    (maps and structs as JSON, so ``tracing``/``metadata`` can be replayed)."""
    raw = row.get("fields")
    if raw:
        return dict(raw)
    details = {}
    for key, value in row.items():
        if key in _ENVELOPE_COLUMNS or key in _SOURCE_ONLY or key == "fields" or value is None:
            continue
        details[key] = _as_text(value)
    return details


def _payload(row: Mapping[str, Any]) -> str | None:
    if "payload" in row:
        value = row["payload"]
        return None if value is None else _as_text(value)
    rest = {k: v for k, v in row.items() if k not in (REASON_COLUMN, ERROR_COLUMN)}
    return _json(rest)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return _json(dict(value))  # a map, as Arrow gives it
    if isinstance(value, dict | list):
        return _json(value)
    return str(value)


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


def _canonical(row: Mapping[str, Any]) -> str:
    return json.dumps(row, default=str, sort_keys=True)
