"""The source's driver side without Spark: ``MicroBatchDriver`` called as Spark's micro-batch
execution calls the stream reader, the ranges it plans read by the core's reader.

The adapter (``pyspark_atlasbus.stream_reader``) only converts Spark's offset dicts and read
limits; every guarantee of the driver's state machine can be checked here, in one process.
"""

from __future__ import annotations

import json
import threading

import pytest
import redis

from atlasbus.driver.micro_batch import MicroBatchDriver
from atlasbus.errors import DataLossError
from atlasbus.model.offsets import StreamOffsets
from atlasbus.options.source import parse_source_options
from atlasbus.reading.range_reader import read_range
from helpers import payload_numbers, publish


def driver(redis_url: str, prefix: str, **options: str) -> MicroBatchDriver:
    raw = {"url": redis_url, "streamPrefix": prefix, "topics": "orders", **options}
    return MicroBatchDriver(parse_source_options(raw))


def run_batch(
    the_driver: MicroBatchDriver, start: StreamOffsets, max_entries: int | None
) -> tuple[StreamOffsets, list[int]]:
    """One micro-batch: its end, its ranges read, committed; the payload numbers read."""
    end = the_driver.latest_offset(start, max_entries)
    numbers: list[int] = []
    for read in the_driver.plan(start, end):
        for batch in read_range(the_driver.options, read):
            numbers.extend(payload_numbers(batch.to_pylist()))
    the_driver.committed(end)
    return end, numbers


def checkpointed(offsets: StreamOffsets) -> StreamOffsets:
    """The offset as a restarted driver gets it back from Spark's offset log."""
    return StreamOffsets.from_dict(json.loads(json.dumps(offsets.to_dict())), what="start offset")


def test_a_growing_trimmed_stream_is_read_once_in_order_across_a_restart(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    publish(r, prefix, "orders", 500)
    done = threading.Event()

    def grow() -> None:
        publish(r, prefix, "orders", 4_500, start=500, chunk=150)
        done.set()

    grower = threading.Thread(target=grow)
    grower.start()
    options = {"startingOffsets": "earliest", "trimConsumed": "true"}
    the_driver = driver(redis_url, prefix, **options)
    start = the_driver.initial_offset()
    read: list[int] = []
    batches = 0
    while True:
        finished = done.is_set()
        end, numbers = run_batch(the_driver, start, 700)
        read.extend(numbers)
        batches += 1
        if batches == 4:  # the driver dies; a new one resumes from the offset log
            the_driver = driver(redis_url, prefix, **options)
            end = checkpointed(end)
        if finished and end == start:
            break
        start = end
    grower.join()
    assert read == list(range(5_000))
    # trimConsumed removed what was read, and counted none of it as lost
    assert r.xlen(f"{prefix}:orders") < 700


def test_a_latest_start_reads_what_arrives_after_its_first_answer(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    publish(r, prefix, "orders", 10)
    the_driver = driver(redis_url, prefix, startingOffsets="latest")
    first = the_driver.initial_offset()
    publish(r, prefix, "orders", 100, start=10)  # the stream grows between Spark's two asks
    assert the_driver.initial_offset() == first
    end_0, batch_0 = run_batch(the_driver, first, None)
    assert (end_0, batch_0) == (first, [])  # batch 0 ends where the query starts
    publish(r, prefix, "orders", 50, start=110)
    _, batch_1 = run_batch(the_driver, end_0, None)
    assert batch_1 == list(range(10, 160))


def test_a_stream_deleted_with_unread_entries_is_reported_as_lost(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    publish(r, prefix, "orders", 20)
    the_driver = driver(redis_url, prefix, startingOffsets="earliest")
    start = the_driver.initial_offset()
    end, numbers = run_batch(the_driver, start, 5)
    assert numbers == list(range(5))
    r.delete(f"{prefix}:orders")
    with pytest.raises(DataLossError, match=f"{prefix}:orders"):
        the_driver.latest_offset(end, 5)
