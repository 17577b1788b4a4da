"""The dead-letter table as a Spark DataFrame (real local SparkSession, real Delta table)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from atlasbus.dead_letters import (
    COLUMNS,
    SINK_PUBLISH,
    SOURCE_DECODE,
    DeadLetter,
    DeadLetterTable,
    QueryContext,
)
from pyspark_atlasbus.dead_letters import read_dead_letters

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
NAIVE_T0 = T0.replace(tzinfo=None)  # Spark collects timestamps in the session zone (UTC)


@pytest.fixture
def table(tmp_path: Path) -> DeadLetterTable:
    dlq = DeadLetterTable(tmp_path / "dead_letters")
    decode = DeadLetter.for_entry(
        SOURCE_DECODE,
        "malformed-entry",
        "field 'priority' must be a decimal integer, got 'x'",
        stream="atlas_bus:orders",
        entry_id="5-0",
        topic="orders",
        payload='{"n": 5}',
        fields={"priority": "x", "payload": '{"n": 5}'},
        context=QueryContext("q-1", "orders", 4),
        at=T0,
    )
    publish = DeadLetter.for_row(
        "message-too-large",
        "too big",
        write_id="q-1/4/0",
        row=0,
        topic="payments",
        priority=1,
        delivery_attempts=2,
        at=T0 + timedelta(minutes=1),
    )
    dlq.append([decode, publish])
    dlq.mark_replayed([publish.dead_letter_id], ["9-0"], T0 + timedelta(hours=1))
    return dlq


SCHEMA = (
    "struct<dead_letter_id:string,stage:string,reason:string,error:string,topic:string,"
    "stream:string,entry_id:string,correlation_id:string,priority:int,delivery_attempts:int,"
    "payload:string,fields:map<string,string>,query_id:string,query_name:string,"
    "batch_id:bigint,dead_lettered_at:timestamp,replay_count:int,last_replayed_at:timestamp,"
    "last_replay_entry_id:string>"
)


def check_rows(df: Any, table: DeadLetterTable) -> None:
    assert df.columns == list(COLUMNS)
    assert df.schema.simpleString() == SCHEMA
    rows = [r.asDict() for r in df.orderBy("dead_lettered_at").collect()]
    by_time = table.to_arrow().sort_by("dead_lettered_at")
    assert [r["dead_letter_id"] for r in rows] == by_time.column("dead_letter_id").to_pylist()
    decode, publish = rows
    assert {k: decode[k] for k in ("stage", "topic", "stream", "entry_id", "payload")} == {
        "stage": SOURCE_DECODE,
        "topic": "orders",
        "stream": "atlas_bus:orders",
        "entry_id": "5-0",
        "payload": '{"n": 5}',
    }
    assert decode["fields"] == {"priority": "x", "payload": '{"n": 5}'}
    assert (decode["query_id"], decode["query_name"], decode["batch_id"]) == ("q-1", "orders", 4)
    assert (decode["dead_lettered_at"], decode["replay_count"]) == (NAIVE_T0, 0)
    assert decode["last_replayed_at"] is None
    assert (publish["stage"], publish["priority"], publish["delivery_attempts"]) == (
        SINK_PUBLISH,
        1,
        2,
    )
    assert (publish["replay_count"], publish["last_replay_entry_id"]) == (1, "9-0")
    assert publish["last_replayed_at"] == NAIVE_T0 + timedelta(hours=1)
    assert df.filter("stage = 'sink-publish'").count() == 1  # a real DataFrame: Spark SQL works


def test_view_through_delta_rs(
    spark: Any, table: DeadLetterTable, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="atlasbus.dead_letters"):
        df = read_dead_letters(spark, table.uri, engine="delta-rs")
    lines = [r.getMessage() for r in caplog.records if r.name == "atlasbus.dead_letters"]
    assert lines == [
        f"reading dead-letter table {table.uri} through delta-rs and Arrow (requested)"
    ]
    check_rows(df, table)


def test_view_of_an_empty_table_has_the_schema(spark: Any, tmp_path: Path) -> None:
    empty = DeadLetterTable(tmp_path / "empty")
    empty.create()
    df = read_dead_letters(spark, empty.uri, engine="delta-rs")
    assert df.columns == list(COLUMNS)
    assert df.count() == 0


def test_view_refuses_a_bad_engine_or_version(spark: Any, table: DeadLetterTable) -> None:
    with pytest.raises(ValueError, match=r"'spark' is not a valid engine. Valid values are"):
        read_dead_letters(spark, table.uri, engine="spark")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^version must be a non-negative Delta table version"):
        read_dead_letters(spark, table.uri, version=-1)


@pytest.mark.delta_jars
def test_delta_spark_reads_the_table_delta_rs_wrote(
    delta_spark: Any, table: DeadLetterTable, caplog: pytest.LogCaptureFixture
) -> None:
    """With the Delta Lake jars loaded, ``auto`` reads through delta-spark: the same rows."""
    with caplog.at_level(logging.INFO, logger="atlasbus.dead_letters"):
        native = read_dead_letters(delta_spark, table.uri)
    assert caplog.records[-1].getMessage() == (
        f"reading dead-letter table {table.uri} through delta-spark "
        "(the Delta Lake jars are on the classpath)"
    )
    check_rows(native, table)
    arrow = read_dead_letters(delta_spark, table.uri, engine="delta-rs")
    key = "dead_letter_id"
    assert native.orderBy(key).collect() == arrow.orderBy(key).collect()
    # time travel: version 1 is the append, before the replay was recorded
    (old,) = (
        read_dead_letters(delta_spark, table.uri, version=1)
        .filter("stage = 'sink-publish'")
        .collect()
    )
    assert (old["replay_count"], old["last_replay_entry_id"]) == (0, None)


WITHOUT_JARS = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stdout)
from pyspark_atlasbus.session import local_session
from pyspark_atlasbus.dead_letters import read_dead_letters, stream_dead_letters

spark = local_session("no-jars", delta=False)
df = read_dead_letters(spark, sys.argv[1])
print("rows", df.count(), flush=True)
for action in (
    lambda: read_dead_letters(spark, sys.argv[1], engine="delta-spark"),
    lambda: stream_dead_letters(spark, sys.argv[1]),
):
    try:
        action()
    except Exception as exc:
        print(type(exc).__name__, str(exc), flush=True)
spark.stop()
"""


def test_without_the_jars_the_view_reads_through_delta_rs_and_says_what_to_do(
    table: DeadLetterTable,
) -> None:
    """A session without the jars (``local_session(delta=False)``, in a child process)."""
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_JARS, table.uri],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if not line.startswith("py4j")]
    source = "org.apache.spark.sql.delta.sources.DeltaDataSource"
    assert lines == [
        f"atlasbus.dead_letters: reading dead-letter table {table.uri} through delta-rs and "
        "Arrow (the Delta Lake jars are not on Spark's classpath)",
        "rows 2",
        f"DeadLetterTableError cannot read dead-letter table {table.uri!r} with "
        f"engine='delta-spark': Spark cannot load {source}; put the Delta Lake jars on Spark's "
        "classpath (pyspark_atlasbus.session.local_session loads them) or use engine='auto' to "
        "read through delta-rs",
        f"DeadLetterTableError cannot stream dead-letter table {table.uri!r}: Spark cannot load "
        f"{source}; start Spark with the Delta Lake jars (local_session loads them when Maven "
        "Central or the Ivy cache has them; on a cluster see docs/dead-letters.md)",
    ]
    assert "Ivy" not in done.stderr  # delta=False: no resolution attempted


def test_spark_computes_the_same_dead_letter_ids(spark: Any) -> None:
    """The documented formula, so a Spark job can find or join dead letters by ID."""
    row = spark.sql(
        "SELECT sha2(concat_ws('\\u001f', 'source-decode', 'atlas_bus:orders', '5-0'), 256) AS a,"
        " sha2(concat_ws('\\u001f', 'sink-publish', 'q-1/4/0', 0), 256) AS b"
    ).first()
    assert (
        row.a
        == DeadLetter.for_entry(
            SOURCE_DECODE, "r", None, stream="atlas_bus:orders", entry_id="5-0"
        ).dead_letter_id
    )
    assert row.b == DeadLetter.for_row("r", None, write_id="q-1/4/0", row=0).dead_letter_id
