"""``sweepGroup``: a streaming query dead-letters a group's retry-exhausted entries each trigger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis
from tests.helpers import BatchCollector, publish, run_available_now, stream_reader

from atlasbus.dead_letters import DeadLetterTable


def test_the_source_sweeps_retry_exhausted_entries_once_per_trigger(
    spark: Any, redis_url: str, r: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    stream = f"{prefix}:orders"
    ids = publish(r, prefix, "orders", 20)
    r.xgroup_create(stream, "workers", id="0")
    r.xreadgroup("workers", "w1", {stream: ">"})  # all 20 delivered once, none acked
    exhausted = ids[3:8]
    r.xclaim(stream, "workers", "w2", 0, exhausted, idle=120_000, retrycount=5)
    table = str(tmp_path / "dlq")
    frame = stream_reader(
        spark,
        redis_url,
        prefix,
        topics="orders",
        sweepGroup="workers",
        sweepMaxDeliveries="3",
        sweepMinIdle="60s",
        deadLetterTable=table,
    )
    collector = BatchCollector()
    run_available_now(frame, str(tmp_path / "cp"), collector)
    assert len(collector.rows) == 20  # the query reads the stream as usual
    letters = DeadLetterTable(table).to_pandas()
    assert sorted(letters["entry_id"]) == sorted(exhausted)
    assert set(letters["stage"]) == {"retry-exhausted"}
    assert list(letters["delivery_attempts"]) == [5] * 5
    pending = r.xpending_range(stream, "workers", "-", "+", 100)
    assert [p["message_id"].decode() for p in pending] == [i for i in ids if i not in exhausted]
    assert {p["consumer"].decode() for p in pending} == {"w1"}
    assert r.xlen(stream) == 20  # acknowledged, not deleted (no sweepDelete)
    # A second run (a restart) records nothing twice.
    run_available_now(
        stream_reader(
            spark,
            redis_url,
            prefix,
            topics="orders",
            sweepGroup="workers",
            sweepMaxDeliveries="3",
            deadLetterTable=table,
        ),
        str(tmp_path / "cp"),
        BatchCollector(),
    )
    assert len(DeadLetterTable(table).to_pandas()) == 5


def test_sweep_delete_removes_only_what_the_query_has_read(
    spark: Any, redis_url: str, r: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """Deleting an entry the query has yet to read would be data loss: those are only acked."""
    stream = f"{prefix}:orders"
    ids = publish(r, prefix, "orders", 20)
    r.xgroup_create(stream, "workers", id="0")
    r.xreadgroup("workers", "w1", {stream: ">"})
    exhausted = ids[3:8]
    r.xclaim(stream, "workers", "w2", 0, exhausted, idle=120_000, retrycount=5)
    table = str(tmp_path / "dlq")
    frame = stream_reader(
        spark,
        redis_url,
        prefix,
        topics="orders",
        startingOffsets=json.dumps({"orders": ids[5]}),  # the query reads after the 6th
        sweepGroup="workers",
        sweepMaxDeliveries="3",
        sweepDelete="true",
        deadLetterTable=table,
    )
    collector = BatchCollector()
    run_available_now(frame, str(tmp_path / "cp"), collector)  # failOnDataLoss=true: no loss
    assert [row["id"] for row in collector.rows] == ids[6:]
    assert sorted(DeadLetterTable(table).to_pandas()["entry_id"]) == sorted(exhausted)
    assert remaining_ids(r, stream) == ids[:3] + ids[5:]  # the 4th and 5th were below it
    pending = r.xpending_range(stream, "workers", "-", "+", 100)
    assert [p["message_id"].decode() for p in pending] == [i for i in ids if i not in exhausted]


def remaining_ids(r: redis.Redis, stream: str) -> list[str]:
    return [entry_id.decode() for entry_id, _ in r.xrange(stream)]
