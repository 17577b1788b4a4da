"""The streaming source against a real redis-server and a real local SparkSession."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import (
    BatchCollector,
    payload_numbers,
    publish,
    run_available_now,
    run_until_idle,
    stream_reader,
)


def ids_in_order(rows: list[Any]) -> list[tuple[int, int]]:
    return [tuple(int(part) for part in row["id"].split("-")) for row in rows]


def test_cold_start_reads_all_history_by_default(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    published = publish(r, prefix, "orders", 1000)
    collector = BatchCollector()
    run_available_now(
        stream_reader(spark, redis_url, prefix, topics="orders"), str(tmp_path), collector
    )
    assert [row["id"] for row in collector.rows] == published
    assert payload_numbers(collector.rows) == list(range(1000))


def test_latest_reads_only_entries_published_after_the_start(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    publish(r, prefix, "orders", 300)
    collector = BatchCollector()
    query = (
        stream_reader(spark, redis_url, prefix, topics="orders", startingOffsets="latest")
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path))
        .start()
    )
    try:
        query.processAllAvailable()
        assert collector.rows == []
        later = publish(r, prefix, "orders", 200, start=300)
        query.processAllAvailable()
    finally:
        query.stop()
    assert [row["id"] for row in collector.rows] == later


def test_restart_resumes_exactly_where_it_stopped(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    publish(r, prefix, "orders", 1000)
    publish(r, prefix, "payments", 1000)
    checkpoint = str(tmp_path / "ck")
    first = BatchCollector()
    run_available_now(
        stream_reader(spark, redis_url, prefix, topics="orders,payments"), checkpoint, first
    )
    assert len(first.rows) == 2000

    # The query is down while 500 more arrive (250 per topic).
    later = {"orders": publish(r, prefix, "orders", 250, start=1000)}
    later["payments"] = publish(r, prefix, "payments", 250, start=1000)
    second = BatchCollector()
    run_available_now(
        stream_reader(spark, redis_url, prefix, topics="orders,payments"), checkpoint, second
    )

    rows = second.rows
    assert len(rows) == 500
    for topic in ("orders", "payments"):
        got = [row["id"] for row in rows if row["topic"] == topic]
        assert got == later[topic]  # exactly those, none twice, none missing, in stream order
    everything = [row["id"] for row in first.rows + second.rows]
    assert len(everything) == len(set(everything)) == 2500


def test_parallel_ranges_cover_a_hot_stream_exactly(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    published = publish(r, prefix, "hot", 100_000, chunk=5000)
    frame = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "hot")
        .option("maxEntriesPerPartition", "10000")
        .load()
    )
    assert frame.rdd.getNumPartitions() >= 10
    per_task = frame.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
    assert [n for n in per_task if n] == [10_000] * 10  # cut by count: whatever the write rate
    ids = [row["id"] for row in frame.select("id").collect()]
    assert len(ids) == 100_000
    assert sorted(ids, key=lambda i: tuple(map(int, i.split("-")))) == published
    assert len(set(ids)) == 100_000


@pytest.mark.parametrize("available_now", [True, False])
def test_max_entries_per_trigger_caps_each_batch(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path, available_now: bool
) -> None:
    publish(r, prefix, "a", 6000)
    publish(r, prefix, "b", 4000)
    collector = BatchCollector(columns=("topic", "id"))
    frame = stream_reader(spark, redis_url, prefix, topics="a,b", maxEntriesPerTrigger="1000")
    if available_now:
        run_available_now(frame, str(tmp_path), collector)
    else:
        run_until_idle(frame, str(tmp_path), collector)
    assert collector.sizes() == [1000] * 10
    assert len({row["id"] + row["topic"] for row in collector.rows}) == 10_000


def test_group_mirrors_committed_offsets_and_seeds_new_checkpoints(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    stream = f"{prefix}:orders"
    publish(r, prefix, "orders", 3000)
    positions_seen: list[str] = []

    def check_group(frame: Any, batch_id: int) -> None:
        rows = frame.select("id").collect()
        groups = {g["name"].decode(): g for g in r.xinfo_groups(stream)}
        positions_seen.append(groups["etl"]["last-delivered-id"].decode())
        collector_ids.extend(row["id"] for row in rows)

    collector_ids: list[str] = []
    query = (
        stream_reader(
            spark, redis_url, prefix, topics="orders", group="etl", maxEntriesPerTrigger="1000"
        )
        .writeStream.foreachBatch(check_group)
        .option("checkpointLocation", str(tmp_path / "one"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    batch_ends = [collector_ids[i - 1] for i in (1000, 2000, 3000)]
    # While batch N runs, the group shows the end of batch N-1 (the last committed offset).
    assert positions_seen == ["0-0", *batch_ends[:2]]
    final = {g["name"].decode(): g for g in r.xinfo_groups(stream)}["etl"]
    assert final["last-delivered-id"].decode() == batch_ends[-1]

    later = publish(r, prefix, "orders", 300, start=3000)
    resumed = BatchCollector()
    run_available_now(
        stream_reader(
            spark, redis_url, prefix, topics="orders", group="etl", startingOffsets="group"
        ),
        str(tmp_path / "two"),
        resumed,
    )
    assert [row["id"] for row in resumed.rows] == later


def test_topic_pattern_picks_up_a_topic_created_after_the_start(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    publish(r, prefix, "orders-us", 20)
    publish(r, prefix, "payments", 20)
    collector = BatchCollector()
    query = (
        stream_reader(spark, redis_url, prefix, topicPattern="orders-*")
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path))
        .start()
    )
    try:
        query.processAllAvailable()
        assert {row["topic"] for row in collector.rows} == {"orders-us"}
        created = publish(r, prefix, "orders-eu", 50)
        query.processAllAvailable()
    finally:
        query.stop()
    eu = [row["id"] for row in collector.rows if row["topic"] == "orders-eu"]
    assert eu == created  # from its very first entry
    assert len(collector.rows) == 70


def test_trimmed_entries_fail_the_restart_naming_stream_and_range(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    stream = f"{prefix}:orders"
    first_ids = publish(r, prefix, "orders", 100)
    checkpoint = str(tmp_path / "ck")
    run_available_now(
        stream_reader(spark, redis_url, prefix, topics="orders"), checkpoint, BatchCollector()
    )

    unread = publish(r, prefix, "orders", 100, start=100)
    r.xtrim(
        stream, maxlen=40, approximate=False
    )  # removes the last-read entry and 60 never-read ones
    survivors = unread[60:]

    query = (
        stream_reader(spark, redis_url, prefix, topics="orders")
        .writeStream.foreachBatch(BatchCollector())
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception) as info:
        query.awaitTermination(300)
    message = str(info.value)
    counted = int(str(r.info("server")["redis_version"]).split(".")[0]) >= 7  # entries-added
    how_many = "60 entries" if counted else "entries"
    assert f"stream '{stream}': {how_many} after {first_ids[-1]} " in message
    assert "failOnDataLoss=false" in message

    collector = BatchCollector()
    run_available_now(
        stream_reader(spark, redis_url, prefix, topics="orders", failOnDataLoss="false"),
        checkpoint,
        collector,
    )
    assert [row["id"] for row in collector.rows] == survivors


def test_payloads_survive_the_trip_unchanged(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    payload = {"name": "Zoë", "emoji": "🚌", "nested": {"list": [1, 2.5, None, True]}}
    r.xadd(
        f"{prefix}:t", {"payload": json.dumps(payload), "priority": "0", "metadata": '{"k": "v"}'}
    )
    collector = BatchCollector(columns=("payload", "priority", "metadata", "error"))
    run_available_now(stream_reader(spark, redis_url, prefix, topics="t"), str(tmp_path), collector)
    (row,) = collector.rows
    assert json.loads(row["payload"]) == payload
    assert (row["priority"], row["metadata"], row["error"]) == (0, {"k": "v"}, None)
