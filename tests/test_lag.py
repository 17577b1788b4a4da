"""Entries behind latest, from the offsets in a query's progress (``atlasbus.operations.lag``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from tests.helpers import publish, redis_major, stream_reader

from atlasbus.operations.lag import entries_behind
from pyspark_atlasbus.lag import LagListener


def test_entries_behind_is_the_difference_of_the_recorded_counts() -> None:
    end = {"bus:a": {"id": "5-0", "index": 40}, "bus:b": "9-0", "bus:c": "3-0"}
    latest = json.dumps(
        {
            "bus:a": {"id": "8-0", "index": 55},
            "bus:b": {"id": "9-0", "index": 12},
            "bus:c": {"id": "4-0", "index": 7},
            "bus:d": {"id": "2-0", "index": 3},
            "bus:e": "6-0",
        }
    )
    assert entries_behind(end, latest) == {
        "bus:a": 15,  # both counts known
        "bus:b": 0,  # caught up, whatever the counts
        "bus:c": None,  # behind, but the end's count is unknown
        "bus:d": 3,  # not read at all yet
        "bus:e": None,  # no count at all (Redis 6.2)
    }


def test_offsets_of_another_source_are_not_ours_to_read() -> None:
    assert entries_behind('{"topic": {"0": 5}}', '{"topic": {"0": 9}}') is None
    assert entries_behind(None, '{"bus:a": "1-0"}') is None
    assert entries_behind("not json", '{"bus:a": "1-0"}') is None


def test_the_listener_reports_entries_behind_each_batch(
    spark: Any, redis_url: str, r: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    publish(r, prefix, "orders", 1000)
    stream = f"{prefix}:orders"
    seen: list[tuple[str, dict[str, int | None]]] = []
    listener = LagListener(on_lag=lambda query, behind: seen.append((query, behind)))
    spark.streams.addListener(listener)
    try:
        frame = stream_reader(spark, redis_url, prefix, topics="orders", maxEntriesPerTrigger="250")
        query = (
            frame.writeStream.format("noop")
            .queryName(f"lag_{prefix}")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        deadline = time.monotonic() + 30  # listener events arrive asynchronously
        while len(seen) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        spark.streams.removeListener(listener)
    figures = [behind[stream] for name, behind in seen if name == f"lag_{prefix}"]
    if redis_major(r) >= 7:
        assert figures == [750, 500, 250, 0]
    else:  # no entry counts on 6.2: only a stream read from its start, or caught up, is told
        assert figures == [750, None, None, 0]
    assert listener.latest[f"lag_{prefix}"] == {stream: 0}


def test_the_mirrored_group_shows_the_query_lag_on_redis_7(
    spark: Any, redis_url: str, r: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    if redis_major(r) < 7:
        pytest.skip("Redis 6.2 keeps no consumer group lag (XINFO GROUPS has no 'lag' field)")
    stream = f"{prefix}:orders"
    ids = publish(r, prefix, "orders", 1000)
    r.xdel(stream, ids[10])  # a gap behind the query: Redis alone could no longer count
    frame = stream_reader(
        spark, redis_url, prefix, topics="orders", group="mirror", maxEntriesPerTrigger="250"
    )
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)

    def mirror() -> dict[str, Any]:
        groups = r.xinfo_groups(stream)
        return next(g for g in groups if g["name"] == b"mirror")

    assert mirror()["last-delivered-id"].decode() == ids[-1]
    assert mirror()["lag"] == 0
    publish(r, prefix, "orders", 40, start=1000)
    # Redis counts it only because the query told it how many entries the group had read.
    assert mirror()["lag"] == 40
