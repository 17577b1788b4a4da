"""Batch reads (spark.read), auto-registration, and connection errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import redis

from atlasbus.sandbox.redis_server import free_port
from helpers import payload_numbers, publish


def batch(spark: Any, redis_url: str, prefix: str, **options: str) -> Any:
    reader = spark.read.format("atlasbus").option("url", redis_url).option("streamPrefix", prefix)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_ending_offsets_bound_a_batch_read_exactly(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    ids = publish(r, prefix, "orders", 100)
    publish(r, prefix, "payments", 10)
    rows = batch(
        spark,
        redis_url,
        prefix,
        topics="orders,payments",
        startingOffsets=json.dumps({"orders": ids[9]}),
        endingOffsets=json.dumps({"orders": ids[59], "payments": "0-0"}),
    ).collect()
    rows.sort(key=lambda row: tuple(int(part) for part in row["id"].split("-")))  # (ms, seq) order
    assert [row["id"] for row in rows] == ids[10:60]
    assert payload_numbers(rows) == list(range(10, 60))


def test_batch_read_defaults_to_everything_and_reads_every_topic(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    publish(r, prefix, "a", 30)
    publish(r, prefix, "b", 20)
    counts = {
        row["topic"]: row["count"]
        for row in batch(spark, redis_url, prefix, topicPattern="*")
        .groupBy("topic")
        .count()
        .collect()
    }
    assert counts == {"a": 30, "b": 20}


def test_starting_timestamp_starts_at_the_first_entry_at_or_after_it(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    stream = f"{prefix}:t"
    for entry_id in ("1000-0", "2000-0", "2000-1", "3000-0"):  # explicit: 6.2 has no "ms-*"
        r.xadd(stream, {"payload": "{}", "priority": "1"}, id=entry_id)
    rows = batch(spark, redis_url, prefix, topics="t", startingTimestamp="2000").collect()
    assert sorted(row["id"] for row in rows) == ["2000-0", "2000-1", "3000-0"]


def test_empty_or_missing_streams_read_as_empty(spark: Any, redis_url: str, prefix: str) -> None:
    assert batch(spark, redis_url, prefix, topics="nothing-here").count() == 0


def test_format_resolves_in_a_fresh_session_without_registering(
    redis_url: str, tmp_path: Any
) -> None:
    """As a user gets it after `pip install`: a new process, a new SparkSession, no register()."""
    script = textwrap.dedent(
        f"""
        import os, sys
        os.environ["PYSPARK_PYTHON"] = sys.executable
        import redis
        from pyspark.sql import SparkSession
        redis.Redis.from_url({redis_url!r}).xadd("fresh:t", {{"payload": "{{}}", "priority": "2"}})
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        rows = spark.read.format("atlasbus").option("url", {redis_url!r}).option("streamPrefix", "fresh").option("topics", "t").load().collect()
        print("ROWS", len(rows), rows[0]["priority"])
        spark.stop()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert "ROWS 1 2" in done.stdout, done.stderr[-3000:]


def test_unreachable_redis_is_named_by_host_and_port(spark: Any) -> None:
    port = free_port()
    frame = (
        spark.read.format("atlasbus")
        .option("url", f"redis://:hunter2@127.0.0.1:{port}/0")
        .option("topics", "t")
        .load()
    )
    with pytest.raises(Exception) as info:
        frame.collect()
    message = str(info.value)
    assert f"cannot reach Redis at 127.0.0.1:{port}" in message
    assert "hunter2" not in message


def test_wrong_credentials_are_refused_without_echoing_the_password(
    spark: Any, redis_url: str, r: redis.Redis
) -> None:
    r.acl_setuser("reader", enabled=True, passwords=["+right-pw"], commands=["+@all"], keys=["*"])
    try:
        frame = (
            spark.read.format("atlasbus")
            .option("url", redis_url)
            .option("topics", "t")
            .option("username", "reader")
            .option("password", "wrong-pw")
            .load()
        )
        with pytest.raises(Exception) as info:
            frame.collect()
    finally:
        r.acl_deluser("reader")
    message = str(info.value)
    assert (
        "refused user 'reader'" in message
        and "Check the 'username' and 'password' options" in message
    )
    assert "wrong-pw" not in message and "right-pw" not in message
