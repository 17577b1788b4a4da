"""The dead-letter table as a Spark DataFrame (real local SparkSession, real Delta table)."""

from __future__ import annotations

import logging
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
    DeadLetterTableError,
    QueryContext,
)
from pyspark_atlasbus.dead_letters import delta_jars_available, read_dead_letters

pytestmark = pytest.mark.spark

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


def test_view_without_delta_jars_reads_through_delta_rs(
    spark: Any, table: DeadLetterTable, caplog: pytest.LogCaptureFixture
) -> None:
    assert not delta_jars_available(spark)  # this machine has no Delta Lake jars
    with caplog.at_level(logging.INFO, logger="atlasbus.dead_letters"):
        df = read_dead_letters(spark, table.uri)
    lines = [r.getMessage() for r in caplog.records if r.name == "atlasbus.dead_letters"]
    assert lines == [
        f"reading dead-letter table {table.uri} through delta-rs and Arrow "
        "(the Delta Lake jars are not on Spark's classpath)"
    ]
    assert df.columns == list(COLUMNS)
    assert df.schema.simpleString() == (
        "struct<dead_letter_id:string,stage:string,reason:string,error:string,topic:string,"
        "stream:string,entry_id:string,correlation_id:string,priority:int,delivery_attempts:int,"
        "payload:string,fields:map<string,string>,query_id:string,query_name:string,"
        "batch_id:bigint,dead_lettered_at:timestamp,replay_count:int,last_replayed_at:timestamp,"
        "last_replay_entry_id:string>"
    )
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


def test_view_of_an_empty_table_has_the_schema(spark: Any, tmp_path: Path) -> None:
    empty = DeadLetterTable(tmp_path / "empty")
    empty.create()
    df = read_dead_letters(spark, empty.uri, engine="delta-rs")
    assert df.columns == list(COLUMNS)
    assert df.count() == 0


def test_asking_for_delta_spark_without_the_jars_says_what_to_do(
    spark: Any, table: DeadLetterTable
) -> None:
    with pytest.raises(DeadLetterTableError, match=r"engine='delta-spark'.*engine='auto'"):
        read_dead_letters(spark, table.uri, engine="delta-spark")
    with pytest.raises(ValueError, match=r"'spark' is not a valid engine. Valid values are"):
        read_dead_letters(spark, table.uri, engine="spark")  # type: ignore[arg-type]


@pytest.mark.delta_jars
def test_delta_spark_reads_the_table_delta_rs_wrote(
    spark: Any, table: DeadLetterTable, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the Delta Lake jars load (a cluster), delta-spark reads what delta-rs wrote."""
    if not delta_jars_available(spark):
        pytest.skip(
            "the test session starts Spark without the Delta Lake jars (Maven Central is "
            "reachable: loading them in local_session is issue 15); the delta-rs path is tested"
        )
    with caplog.at_level(logging.INFO, logger="atlasbus.dead_letters"):
        native = read_dead_letters(spark, table.uri)
    assert "through delta-spark" in caplog.records[-1].getMessage()
    arrow = read_dead_letters(spark, table.uri, engine="delta-rs")
    assert native.schema.simpleString() == arrow.schema.simpleString()  # nullability aside
    key = "dead_letter_id"
    assert native.orderBy(key).collect() == arrow.orderBy(key).collect()


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
