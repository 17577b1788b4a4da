"""Trigger pacing: ``minEntriesPerTrigger`` waits for enough entries, ``maxTriggerDelay`` bounds it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import redis
from tests.helpers import (
    BatchCollector,
    envelope,
    payload_numbers,
    publish,
    redis_major,
    stream_reader,
)

from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.model.entry_id import EntryId
from atlasbus.model.offsets import StreamOffsets
from atlasbus.options.source import TriggerPacing, parse_source_options
from atlasbus.planning.pacing import TriggerPacer, new_entries_at_least
from atlasbus.planning.positions import batch_end


class FakeClock:
    """Seconds that move only when the test says so: the pacer's own arithmetic, exactly."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_pacer_waits_for_enough_entries_but_never_past_the_delay() -> None:
    clock = FakeClock()
    pacer = TriggerPacer(TriggerPacing(min_entries=1000, max_delay_ms=2000), clock)
    assert not pacer.hold(100)  # the first trigger goes, as in Kafka's source (a restart)
    clock.now += 0.5
    assert pacer.hold(100)  # too few, too soon after the last batch
    clock.now += 1.499
    assert pacer.hold(999)
    clock.now += 0.001  # the delay is up: a trickle goes
    assert not pacer.hold(100)
    clock.now += 0.5  # the clock restarted at that release
    assert pacer.hold(10)
    assert not pacer.hold(1000)  # enough entries: at once, whatever the clock
    assert not pacer.hold(5000)
    clock.now += 1.0
    assert pacer.hold(0)


def test_new_entries_are_counted_only_as_far_as_needed(redis_url: str, r: redis.Redis) -> None:
    stream = "pace:orders"
    r.delete(stream)
    for ms in range(1, 51):
        r.xadd(stream, {"n": ms}, id=f"{ms}-0")
    options = parse_source_options({"url": redis_url, "streams": stream})
    catalog = StreamCatalog(options.endpoint)
    start = StreamOffsets({})
    end = batch_end(catalog, options, start, max_entries=None)
    # A stream new to the query: its length, without reading an entry.
    assert new_entries_at_least(catalog, start, end.positions, end.infos, end.walks, 10) == 50
    # Part-way, without Redis 7's count at the start: walked, but only up to what is needed.
    middle = StreamOffsets({stream: EntryId(20, 0)})
    assert new_entries_at_least(catalog, middle, end.positions, end.infos, {}, 1000) == 30
    assert new_entries_at_least(catalog, middle, end.positions, end.infos, {}, 7) == 7
    if redis_major(r) >= 7:
        # With entries-added recorded at the start (the previous batch's end): no walk.
        from atlasbus.planning.batch_plan import mark_batch

        marked = mark_batch(catalog, options, start, {stream: EntryId(50, 0)})
        for ms in range(51, 61):
            r.xadd(stream, {"n": ms}, id=f"{ms}-0")
        later = batch_end(catalog, options, marked, max_entries=None)
        assert new_entries_at_least(catalog, marked, later.positions, later.infos, {}, 99) == 10


def publish_at_once(r: redis.Redis, prefix: str, count: int, start: int) -> None:
    """One MULTI/EXEC: a trigger sees none or all of them, so batch sizes are exact."""
    pipe = r.pipeline(transaction=True)
    for index in range(start, start + count):
        pipe.xadd(f"{prefix}:orders", envelope("orders", index))
    pipe.execute()


def wait_for_rows(collector: BatchCollector, count: int, query: Any, timeout: float = 60) -> float:
    """Poll until ``count`` rows arrived; returns when (monotonic). Fails if the query died."""
    deadline = time.monotonic() + timeout
    while len(collector.rows) < count:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"only {len(collector.rows)} of {count} rows arrived"
        time.sleep(0.05)
    return time.monotonic()


def test_min_entries_hold_a_trickle_until_enough_arrive(
    spark: Any, redis_url: str, r: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    publish(r, prefix, "orders", 1)  # the stream exists before the query
    frame = stream_reader(
        spark,
        redis_url,
        prefix,
        topics="orders",
        startingOffsets="latest",
        minEntriesPerTrigger="1000",
        maxTriggerDelay="10m",
    )
    collector = BatchCollector()
    query = (
        frame.writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    try:
        query.processAllAvailable()  # the first trigger fixes "latest" before anything new
        publish(r, prefix, "orders", 400, start=1)
        # Twice: the first wait may end on a trigger that began before the publish.
        query.processAllAvailable()
        query.processAllAvailable()
        assert collector.rows == []  # the triggers found too few and ran no batch
        publish(r, prefix, "orders", 600, start=401)
        wait_for_rows(collector, 1000, query)
        assert collector.sizes() == [1000]
        assert payload_numbers(collector.rows) == list(range(1, 1001))
    finally:
        query.stop()


def test_max_trigger_delay_releases_a_trickle_and_a_burst_goes_at_once(
    spark: Any, redis_url: str, r: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """minEntriesPerTrigger=1000, maxTriggerDelay=2s: 100 entries wait, 5,000 do not."""
    publish(r, prefix, "orders", 1)
    frame = stream_reader(
        spark,
        redis_url,
        prefix,
        topics="orders",
        startingOffsets="latest",
        minEntriesPerTrigger="1000",
        maxTriggerDelay="2s",
    )
    collector = BatchCollector()
    query = (
        frame.writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    try:
        query.processAllAvailable()  # the first trigger fixes "latest" before anything new
        published = time.monotonic()
        publish_at_once(r, prefix, 5000, start=1)
        burst_latency = wait_for_rows(collector, 5000, query) - published
        published = time.monotonic()
        publish_at_once(r, prefix, 100, start=5001)
        trickle_latency = wait_for_rows(collector, 5100, query) - published
        print(f"\nburst of 5,000: {burst_latency:.2f} s; trickle of 100: {trickle_latency:.2f} s")
        # Each arrives whole, in one batch: the trickle was held, not read as it came.
        assert collector.sizes() == [5000, 100]
        assert payload_numbers(collector.rows) == list(range(1, 5101))
    finally:
        query.stop()
