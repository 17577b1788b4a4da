"""Data loss on live streams, through real streaming queries.

A publisher keeps appending while another client deletes: the bus's own consumer (reads one
entry at a time, XDELs it once handled), or a DEL of the whole stream. Every entry deleted
before the query read it is reported, counted, and nothing the query read is counted as lost.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus.dead_letters import DeadLetterTable
from atlasbus.model.entry_id import EntryId
from helpers import BatchCollector, envelope, publish, redis_major, stream_reader


class Publisher(threading.Thread):
    """Appends envelopes one by one at about ``rate`` per second until stopped."""

    def __init__(self, r: redis.Redis, stream: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.r, self.stream, self.rate = r, stream, rate
        self.ids: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        index = 0
        while not self.stop.is_set():
            entry_id = self.r.xadd(self.stream, envelope("t", index))
            self.ids.append(entry_id.decode())
            index += 1
            time.sleep(1 / self.rate)


class BusConsumer(threading.Thread):
    """The bus's own consumer: XREAD one entry at a time from ``$``, handle, ack, XDEL it."""

    def __init__(self, r: redis.Redis, stream: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.r, self.stream, self.rate = r, stream, rate
        self.deleted: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        last = "$"
        while not self.stop.is_set():
            reply = self.r.xread({self.stream: last}, count=1, block=100)
            if not reply:
                continue
            entry_id = reply[0][1][0][0].decode()
            last = entry_id
            time.sleep(1 / self.rate)  # the handler
            self.r.xdel(self.stream, entry_id)
            self.deleted.append(entry_id)


def _lost_ranges(table: str) -> list[tuple[EntryId, EntryId, int]]:
    ranges = []
    for row in DeadLetterTable(table).to_arrow().to_pylist():
        assert row["stage"] == "data-loss", row
        fields = dict(row["fields"])
        found = re.search(r": (\d+) entr(?:y|ies) after", row["error"])
        assert found, row["error"]  # Redis 7 counts every loss
        ranges.append(
            (EntryId.parse(fields["after"]), EntryId.parse(fields["upto"]), int(found.group(1)))
        )
    return ranges


@pytest.mark.spark
def test_beside_the_bus_consumer_every_entry_deleted_unread_is_reported_once(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    if not redis_major(r) >= 7:
        pytest.skip("counting what was deleted needs Redis 7's entries-added")
    stream = f"{prefix}:t"
    table = str(tmp_path / "dead")
    publish(r, prefix, "t", 20)  # the stream exists before the bus's consumer starts
    collector = BatchCollector(columns=("id",))
    query = (
        stream_reader(
            spark, redis_url, prefix, topics="t", failOnDataLoss="false", deadLetterTable=table
        )
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    publisher = Publisher(r, stream, rate=25)
    bus = BusConsumer(r, stream, rate=20)
    try:
        query.processAllAvailable()
        bus.start()
        publisher.start()
        time.sleep(12)
        publisher.stop.set()
        publisher.join()
        time.sleep(1)
        bus.stop.set()
        bus.join()
        query.processAllAvailable()
    finally:
        query.stop()

    read = {row["id"] for row in collector.rows}
    deleted = set(bus.deleted)
    lost = deleted - read
    assert set(publisher.ids) <= read | deleted
    ranges = _lost_ranges(table)
    reported = sum(count for _, _, count in ranges)
    print(
        f"\nbus consumer beside a query: {len(publisher.ids)} published, {len(deleted)} XDELed "
        f"by the bus, {len(lost)} of them before the query read them, {len(ranges)} data-loss "
        f"dead letters counting {reported}"
    )
    assert reported == len(lost)
    for entry in lost:
        position = EntryId.parse(entry)
        assert any(after < position <= upto for after, upto, _ in ranges), entry
    # a range never counts an entry the query read: its count is at most what is missing from
    # it (a loss found at planning and one found by the task may share the batch's lower bound)
    for after, upto, count in ranges:
        in_range = [e for e in publisher.ids if after < EntryId.parse(e) <= upto]
        assert 0 < count <= len([e for e in in_range if e not in read])


@pytest.mark.spark
def test_a_stream_deleted_with_unread_entries_is_reported_at_the_next_trigger(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    stream = f"{prefix}:t"
    ids = publish(r, prefix, "t", 10)
    collector = BatchCollector(columns=("id",))

    def collect_then_delete(frame: Any, batch_id: int) -> None:
        # the DEL happens inside the first batch, before it commits: the next batch is planned
        # after it, whatever the machine's speed (a DEL from the test thread could come after
        # the second batch had already read the other five entries)
        collector(frame, batch_id)
        if collector.rows and r.exists(stream):
            r.delete(stream)

    query = (
        stream_reader(spark, redis_url, prefix, topics="t", maxEntriesPerTrigger="5")
        .writeStream.foreachBatch(collect_then_delete)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        with pytest.raises(Exception) as info:
            query.awaitTermination(60)
    finally:
        query.stop()
    assert [row["id"] for row in collector.rows] == ids[:5]
    message = str(info.value)
    # found at the next trigger (the stream is gone), or by the task of a batch planned just
    # before the DEL, which counts what it missed: both name the stream and the range
    assert re.search(
        rf"stream {re.escape(repr(stream))}: (\d+ entries|1 entry|entries) after ", message
    ), message[:2000]
    assert "failOnDataLoss=false" in message


@pytest.mark.spark
def test_xdel_beyond_the_batch_end_and_of_read_entries_is_not_loss_streaming_or_batch(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    if redis_major(r) < 7:
        pytest.skip(
            "Redis 6.2 records no XDEL: a deleted last-read entry looks like a trim and is "
            "reported conservatively (docs/guarantees.md)"
        )
    stream = f"{prefix}:t"
    ids = publish(r, prefix, "t", 50)
    collector = BatchCollector(columns=("id",))
    query = (
        stream_reader(spark, redis_url, prefix, topics="t")
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        query.processAllAvailable()
        ids += publish(r, prefix, "t", 50, start=50)
        r.xdel(stream, *ids[:50])  # what the query read, deleted by the bus's consumer
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert [row["id"] for row in collector.rows] == ids

    # batches that end before an XDEL'd entry read in full; the one holding it reports it
    more = publish(r, prefix, "t", 100, start=100)
    r.xdel(stream, more[95])
    capped = BatchCollector(columns=("id",))
    query = (
        stream_reader(spark, redis_url, prefix, topics="t", maxEntriesPerTrigger="20")
        .writeStream.foreachBatch(capped)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception) as info:
        query.awaitTermination(120)
    assert [row["id"] for row in capped.rows] == more[:80]
    assert f"entries after {more[79]} up to {more[95]} were removed" in str(info.value)

    # a batch read ending before an XDEL'd entry reads its range in full, reporting nothing
    rows = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "t")
        .option("startingOffsets", json.dumps({"t": more[9]}))
        .option("endingOffsets", json.dumps({"t": more[90]}))
        .load()
        .select("id")
        .collect()
    )
    assert [row["id"] for row in rows] == more[10:91]
