"""Loss reports that are exact: history removed before the query started is never loss, and a
loss found while a batch is read is counted over the whole batch, not one task's piece.

Driver and executor steps are called as Spark calls them (``latestOffset``'s ``batch_end`` and
``mark_batch``, the end offset's JSON as Spark checkpoints it, ``partitions``'s recorded
losses and ``plan_ranges``, ``read_range`` per piece), on a stream that keeps growing, with
deletions from another client before the query starts and while it runs. Redis 7 only: 6.2
keeps no removal counter, and its loss checks are the conservative ones docs/guarantees.md
describes.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
import redis

from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.dead_letters import DeadLetterTable
from atlasbus.errors import DataLossError
from atlasbus.model.entry_id import EntryId
from atlasbus.model.offsets import StreamOffsets
from atlasbus.options.source import SourceOptions, parse_source_options
from atlasbus.planning.batch_plan import (
    mark_batch,
    plan_ranges,
    report_recorded_losses,
    with_baselines,
)
from atlasbus.planning.positions import batch_end, starting_offsets
from atlasbus.reading.range_reader import read_range
from helpers import publish, redis_major


@pytest.fixture(autouse=True)
def _redis_7(r: redis.Redis) -> None:
    if redis_major(r) < 7:
        pytest.skip("Redis 6.2 keeps no removal counter (entries-added): the exact checks need 7")


def _options(redis_url: str, prefix: str, **extra: str) -> SourceOptions:
    return parse_source_options({"url": redis_url, "streamPrefix": prefix, "topics": "t", **extra})


class Driver:
    """One query's driver and executors, step by step as Spark runs a micro-batch."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.catalog = StreamCatalog(options.endpoint)
        self.start = with_baselines(
            self.catalog, starting_offsets(self.catalog, options, create_group=False)
        )
        self.read: list[str] = []

    def latest(self, cap: int | None) -> str:
        end = batch_end(self.catalog, self.options, self.start, max_entries=cap)
        marked = mark_batch(
            self.catalog, self.options, self.start, end.positions, infos=end.infos, walks=end.walks
        )
        return marked.to_json()

    def run(self, end_json: str) -> None:
        """partitions, then every task, then commit (the end becomes the next start)."""
        end = StreamOffsets.from_json(end_json)
        report_recorded_losses(self.options, self.start, end)
        for piece in plan_ranges(self.options, self.start, end):
            for batch in read_range(self.options, piece):
                self.read.extend(batch.column("id").to_pylist())
        self.start = end

    def batch(self, cap: int | None) -> bool:
        """Plan and run the next batch; False when there was nothing new."""
        end_json = self.latest(cap)
        if StreamOffsets.from_json(end_json).positions() == self.start.positions():
            return False
        self.run(end_json)
        return True


def _deleted_before_the_start(r: redis.Redis, stream: str, ids: list[str]) -> set[str]:
    """The bus's habit: entries handled and XDELed, scattered, the newest near the end."""
    gone = {entry for index, entry in enumerate(ids) if index % 5 == 3}
    r.xdel(stream, *gone)
    return gone


def _letters(table: str) -> list[tuple[EntryId, EntryId, int | None]]:
    if not Path(table).exists():
        return []
    ranges = []
    for row in DeadLetterTable(table).to_arrow().to_pylist():
        assert row["stage"] == "data-loss", row
        fields = dict(row["fields"])
        found = re.search(r": (\d+) entr(?:y|ies) ", row["error"])
        ranges.append(
            (
                EntryId.parse(fields["after"]),
                EntryId.parse(fields["upto"]),
                int(found.group(1)) if found else None,
            )
        )
    return sorted(ranges)


@pytest.mark.parametrize("fail", ["true", "false"])
def test_history_deleted_before_the_start_is_not_loss_in_capped_batches(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path, fail: str
) -> None:
    """Issue 55's case: 618 entries XDELed before the start, read in capped batches."""
    stream = f"{prefix}:t"
    table = str(tmp_path / "dead")
    ids = publish(r, prefix, "t", 3090)
    gone = _deleted_before_the_start(r, stream, ids)
    assert len(gone) == 618
    driver = Driver(_options(redis_url, prefix, failOnDataLoss=fail, deadLetterTable=table))
    batches = 0
    while driver.batch(cap=150):
        batches += 1
        if batches <= 12:  # the stream keeps growing while the query runs
            ids += publish(r, prefix, "t", 20, start=len(ids))
    assert batches >= 18
    assert driver.read == [i for i in ids if i not in gone]
    assert _letters(table) == []


@pytest.mark.parametrize("fail", ["true", "false"])
def test_deletions_while_the_query_runs_are_reported_exactly_beside_older_history(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path, fail: str
) -> None:
    """History XDELed before the start stays silent; entries deleted unread while the query
    runs are each inside a reported range, and no range is reported without one."""
    stream = f"{prefix}:t"
    table = str(tmp_path / "dead")
    ids = publish(r, prefix, "t", 3090)
    gone = _deleted_before_the_start(r, stream, ids)
    driver = Driver(_options(redis_url, prefix, failOnDataLoss=fail, deadLetterTable=table))
    for _ in range(4):
        assert driver.batch(cap=150)
        ids += publish(r, prefix, "t", 20, start=len(ids))
    # While the query runs: unread entries XDELed ahead of it (below the oldest tombstone and
    # past it), and entries it has read XDELed behind it (not loss).
    position = driver.start[stream]
    unread = [i for i in ids if i not in gone and EntryId.parse(i) > position]
    deleted_unread = {unread[40], unread[41], unread[900], unread[-3]}
    behind = driver.read[:50:7]
    r.xdel(stream, *deleted_unread, *behind)
    ids += publish(r, prefix, "t", 20, start=len(ids))
    if fail == "true":
        with pytest.raises(DataLossError) as raised:
            while driver.batch(cap=150):
                pass
        found = re.search(r"entries after (\S+) up to (\S+) were removed", str(raised.value))
        assert found, str(raised.value)
        lo, hi = EntryId.parse(found.group(1)), EntryId.parse(found.group(2))
        assert all(lo < EntryId.parse(d) <= hi for d in deleted_unread), str(raised.value)
        assert not any(lo < EntryId.parse(b) <= hi for b in behind)
        # the range reaches back before the batch: the message says why
        assert "somewhere in this range: Redis keeps only the newest deleted ID" in str(
            raised.value
        )
        assert "failOnDataLoss=false" in str(raised.value)
        return
    while driver.batch(cap=150):
        pass
    assert driver.read == [i for i in ids if i not in gone and i not in deleted_unread]
    ranges = _letters(table)
    assert ranges, "entries deleted unread were not reported"
    for deleted in deleted_unread:
        entry = EntryId.parse(deleted)
        assert any(lo < entry <= hi for lo, hi, _ in ranges), (deleted, ranges)
    for lo, hi, count in ranges:
        inside = [d for d in deleted_unread if lo < EntryId.parse(d) <= hi]
        assert inside, f"a range with no entry deleted unread: {lo}..{hi}"
        assert not any(lo < EntryId.parse(b) <= hi for b in behind)
        if count is not None:
            assert count == len(inside), (lo, hi, count, inside)


def test_a_stream_deleted_whose_newest_ids_were_xdeled_before_the_start_loses_nothing(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """The newest ID ever generated was XDELed before the start: a DEL after the query read
    every entry still there is no loss. An entry still unread when the stream goes is."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from pyspark_atlasbus.stream_reader import AtlasbusStreamReader

    stream = f"{prefix}:t"
    ids = publish(r, prefix, "t", 10)
    r.xdel(stream, *ids[7:])  # history: the bus handled them before the query started
    options = _options(redis_url, prefix)
    reader = AtlasbusStreamReader(options)
    start = reader.initialOffset()
    end_0 = reader.latestOffset(start, ReadMaxRows(7))  # exactly the 7 entries there
    assert StreamOffsets.from_dict(end_0)[stream] == EntryId.parse(ids[6])
    reader.commit(end_0)
    r.delete(stream)
    assert reader.latestOffset(end_0, ReadMaxRows(7)) == end_0  # nothing lost, nothing new

    more = publish(r, prefix, "t", 5, start=10)  # the stream made again: 3 read, 2 unread
    end_1 = reader.latestOffset(end_0, ReadMaxRows(3))
    reader.commit(end_1)
    r.delete(stream)
    with pytest.raises(DataLossError) as raised:
        reader.latestOffset(end_1, ReadMaxRows(3))
    assert f"entries after {more[2]} up to {more[4]} were removed" in str(raised.value)


@pytest.mark.spark
@pytest.mark.parametrize("fail", ["true", "false"])
def test_a_capped_streaming_query_over_history_deleted_before_it_started_reads_every_entry(
    spark: object, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path, fail: str
) -> None:
    """Issue 55's report, through Spark: 618 entries XDELed before the start, the stream
    growing while the query reads it in batches of at most 150: no loss reported."""
    from helpers import BatchCollector, stream_reader

    stream = f"{prefix}:t"
    table = str(tmp_path / "dead")
    ids = publish(r, prefix, "t", 3090)
    gone = _deleted_before_the_start(r, stream, ids)
    collector = BatchCollector(columns=("id", "error"))
    frame = stream_reader(
        spark,
        redis_url,
        prefix,
        topics="t",
        maxEntriesPerTrigger="150",
        failOnDataLoss=fail,
        deadLetterTable=table,
    )
    growing = threading.Event()

    def keep_publishing() -> None:  # the bus goes on publishing while the query reads
        for _ in range(40):
            ids.extend(publish(r, prefix, "t", 10, start=len(ids)))
            time.sleep(0.1)
        growing.set()

    publisher = threading.Thread(target=keep_publishing, daemon=True)
    query = (
        frame.writeStream.foreachBatch(collector)  # type: ignore[attr-defined]
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        publisher.start()
        while not growing.is_set():
            query.processAllAvailable()
        publisher.join()
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert [row["id"] for row in collector.rows] == [i for i in ids if i not in gone]
    assert all(row["error"] is None for row in collector.rows)
    assert len(collector.sizes()) >= 18 and max(collector.sizes()) <= 150
    assert _letters(table) == []


def _batch_of_pieces(
    r: redis.Redis, redis_url: str, prefix: str, **extra: str
) -> tuple[Driver, list[str], str]:
    """A query that read 500 entries, then planned a batch of 3,000 more in pieces of 500
    (six tasks); the stream grew by 200 after planning. Returns the driver, the IDs and the
    planned batch's end offset."""
    ids = publish(r, prefix, "t", 500)
    driver = Driver(_options(redis_url, prefix, maxEntriesPerPartition="500", **extra))
    assert driver.batch(cap=None)
    ids += publish(r, prefix, "t", 3000, start=500, chunk=1000)
    end_json = driver.latest(cap=None)
    assert len(plan_ranges(driver.options, driver.start, StreamOffsets.from_json(end_json))) == 6
    ids += publish(r, prefix, "t", 200, start=3500)
    return driver, ids, end_json


def _remove_while_the_batch_runs(r: redis.Redis, stream: str, ids: list[str]) -> set[str]:
    """A trim into the third piece and XDELs in the fourth to sixth and past the batch;
    returns the entries removed unread (the first 500 were read before)."""
    r.xtrim(stream, minid=ids[1700], approximate=False)  # 1,200 of the batch's entries
    deleted = {ids[i] for i in range(2100, 3500, 100)}  # 14 in the batch
    deleted |= {ids[3550], ids[3600]}  # 2 past its end
    r.xdel(stream, *deleted)
    return set(ids[500:1700]) | deleted


def test_a_loss_found_by_one_task_names_the_whole_batch_and_counts_every_entry(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    stream = f"{prefix}:t"
    driver, ids, end_json = _batch_of_pieces(r, redis_url, prefix)
    _remove_while_the_batch_runs(r, stream, ids)
    with pytest.raises(DataLossError) as raised:
        driver.run(end_json)  # the first task reads its piece and finds all 500 gone
    text = str(raised.value)
    assert text.startswith(
        f"stream {stream!r}: 1214 entries after {ids[499]} up to {ids[3499]} were removed "
        "(trimmed or deleted) before the query read them (in all, in this batch's range; "
        f"this task's piece after {ids[499]} up to {ids[999]} misses 500)."
    ), text
    assert "failOnDataLoss=false" in text


def test_with_fail_on_data_loss_false_the_dead_letters_count_every_removed_entry(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    stream = f"{prefix}:t"
    table = str(tmp_path / "dead")
    driver, ids, end_json = _batch_of_pieces(
        r, redis_url, prefix, failOnDataLoss="false", deadLetterTable=table
    )
    removed = _remove_while_the_batch_runs(r, stream, ids)
    driver.run(end_json)
    while driver.batch(cap=None):
        pass
    assert driver.read == [i for i in ids if i not in removed]
    letters = _letters(table)
    assert sum(count or 0 for _, _, count in letters) == len(removed) == 1216
    assert all(count is not None for _, _, count in letters)
    for lo, hi, count in letters:
        assert count == sum(1 for i in removed if lo < EntryId.parse(i) <= hi)
