"""``sweepGroup``: a streaming query dead-letters a group's retry-exhausted entries each trigger."""

from __future__ import annotations

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
