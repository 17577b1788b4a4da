"""A range's replies received on a thread of their own while the task decodes (read_ahead).

The thread must hand over every reply in order, raise the producer's error where it
happened, never run more than a batch ahead, and end (its connection closed) when the task
stops early. The read tests run on a real redis-server, on a stream that keeps growing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator

import pytest
import redis

from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.options.source import parse_source_options
from atlasbus.planning.batch_plan import ReadRange
from atlasbus.reading.range_reader import TARGET_BATCH_ROWS, read_range
from atlasbus.reading.read_ahead import read_ahead
from helpers import envelope, publish


def read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "atlasbus-read-ahead"]


def test_items_arrive_in_order_made_on_another_thread() -> None:
    made_on: set[int] = set()

    def numbers() -> Generator[int]:
        for n in range(1000):
            made_on.add(threading.get_ident())
            yield n

    assert list(read_ahead(numbers)) == list(range(1000))
    assert made_on and threading.get_ident() not in made_on
    assert read_ahead_threads() == []


def test_the_producers_error_is_raised_after_the_items_before_it() -> None:
    def failing() -> Generator[int]:
        yield 1
        yield 2
        raise ValueError("entry 3-0 of stream s:t is not what was expected")

    got: list[int] = []
    with pytest.raises(ValueError, match=r"entry 3-0 of stream s:t is not what was expected"):
        for item in read_ahead(failing):
            got.append(item)
    assert got == [1, 2]
    assert read_ahead_threads() == []


@pytest.mark.parametrize("how", ["close", "raise"])
def test_a_consumer_that_stops_early_closes_the_producer_on_its_thread(how: str) -> None:
    produced: list[int] = []
    closed_on: list[int] = []

    def endless() -> Generator[int]:
        try:
            n = 0
            while True:
                produced.append(n)
                yield n
                n += 1
        finally:
            closed_on.append(threading.get_ident())

    items = read_ahead(endless, ahead=1)
    assert next(items) == 0
    if how == "close":
        items.close()
    else:
        with pytest.raises(RuntimeError, match="the task failed"):
            items.throw(RuntimeError("the task failed"))
    assert read_ahead_threads() == []  # joined before close() returned
    assert closed_on and closed_on[0] != threading.get_ident()
    assert len(produced) <= 3  # one taken, one queued, one made and put when told to stop


def xrange_calls(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_xrange", {}).get("calls", 0))


def test_the_receiving_thread_reads_ahead_of_the_decoding_but_no_more_than_a_batch(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    page_size = 1000
    publish(r, prefix, "t", 5 * TARGET_BATCH_ROWS)
    options = parse_source_options(
        {"url": redis_url, "streamPrefix": prefix, "topics": "t", "pageSize": str(page_size)}
    )
    whole = ReadRange(f"{prefix}:t", "t", ZERO, EntryId(2**63, 0))
    pages_a_batch = TARGET_BATCH_ROWS // page_size
    before = xrange_calls(r)
    batches = read_range(options, whole)
    first = next(batches)  # the decoding thread holds it: the receiving one goes on
    assert first.num_rows == TARGET_BATCH_ROWS
    deadline = time.monotonic() + 30
    while xrange_calls(r) - before < 3 * pages_a_batch and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    # Batch 2 handed over and waiting, batch 3 received and waiting to be handed over, the
    # first page of batch 4 asked for: no further while the first batch is not taken.
    assert xrange_calls(r) - before == 3 * pages_a_batch + 1
    rest = sum(batch.num_rows for batch in batches)
    assert first.num_rows + rest == 5 * TARGET_BATCH_ROWS


def test_a_range_read_while_the_stream_grows_gives_its_entries_once_in_order(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    stream = f"{prefix}:t"
    ids = publish(r, prefix, "t", 3000)
    upto = EntryId.parse(ids[-1])
    stop = threading.Event()

    def keep_appending() -> None:
        client = redis.Redis.from_url(redis_url)
        n = 3000
        while not stop.is_set():
            client.xadd(stream, envelope("t", n))
            n += 1
        client.close()

    appender = threading.Thread(target=keep_appending)
    appender.start()
    try:
        options = parse_source_options(
            {"url": redis_url, "streamPrefix": prefix, "topics": "t", "pageSize": "7"}
        )
        rows = [
            row
            for batch in read_range(options, ReadRange(stream, "t", ZERO, upto))
            for row in batch.select(["id"]).to_pylist()
        ]
    finally:
        stop.set()
        appender.join()
    assert [row["id"] for row in rows] == ids
    assert r.xlen(stream) > 3000  # it grew while read


def test_a_task_that_stops_early_leaves_no_thread_and_a_clean_connection(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    stream = f"{prefix}:t"
    ids = publish(r, prefix, "t", 3 * TARGET_BATCH_ROWS)
    options = parse_source_options(
        {"url": redis_url, "streamPrefix": prefix, "topics": "t", "pageSize": "500"}
    )
    whole = ReadRange(stream, "t", ZERO, EntryId(2**63, 0))
    batches = read_range(options, whole)
    assert next(batches).num_rows == TARGET_BATCH_ROWS
    batches.close()  # a limit: the receiving thread had replies in flight
    assert read_ahead_threads() == []
    # The connection left with a reply unread was closed, not reused: the next read is whole.
    again = [row["id"] for batch in read_range(options, whole) for row in batch.to_pylist()]
    assert again == ids


def test_a_task_that_fails_ends_its_receiving_thread_while_the_error_is_still_held(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    publish(r, prefix, "t", 3 * TARGET_BATCH_ROWS)
    options = parse_source_options(
        {"url": redis_url, "streamPrefix": prefix, "topics": "t", "pageSize": "500"}
    )
    batches = read_range(options, ReadRange(f"{prefix}:t", "t", ZERO, EntryId(2**63, 0)))
    assert next(batches).num_rows == TARGET_BATCH_ROWS
    with pytest.raises(RuntimeError, match="the sink failed") as failed:
        batches.throw(RuntimeError("the sink failed"))
    assert failed.tb is not None  # the traceback, and the frames it holds, are still alive
    assert read_ahead_threads() == []


def test_a_range_of_several_batches_read_while_the_bus_appends_deletes_and_trims(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """Many pages and hand-overs while another client appends past the range, XDELs inside it
    and trims its front: what is returned is in order, never twice, and holds every entry
    nobody removed."""
    stream = f"{prefix}:t"
    ids = publish(r, prefix, "t", 3 * TARGET_BATCH_ROWS)
    upto = EntryId.parse(ids[-1])
    doomed = ids[TARGET_BATCH_ROWS::7]  # deleted while the range is read
    trimmed_below = ids[200]  # the front trimmed away meanwhile
    stop = threading.Event()

    def bus_at_work() -> None:
        client = redis.Redis.from_url(redis_url)
        n = len(ids)
        for start in range(0, len(doomed), 50):
            client.xadd(stream, envelope("t", n))
            n += 1
            client.xdel(stream, *doomed[start : start + 50])
        client.xtrim(stream, minid=trimmed_below)
        while not stop.is_set():
            client.xadd(stream, envelope("t", n))
            n += 1
        client.close()

    options = parse_source_options(
        {"url": redis_url, "streamPrefix": prefix, "topics": "t", "pageSize": "97"}
    )
    worker = threading.Thread(target=bus_at_work)
    worker.start()
    try:
        got = [
            row["id"]
            for batch in read_range(options, ReadRange(stream, "t", ZERO, upto))
            for row in batch.select(["id"]).to_pylist()
        ]
    finally:
        stop.set()
        worker.join()
    position = {entry_id: i for i, entry_id in enumerate(ids)}
    assert all(entry_id in position for entry_id in got)  # nothing past the range
    assert [position[entry_id] for entry_id in got] == sorted({position[i] for i in got})
    removed = set(doomed) | set(ids[:200])
    assert set(ids) - removed <= set(got)  # every entry nobody removed
    assert r.xlen(stream) > len(ids) - len(removed)  # the stream grew meanwhile
