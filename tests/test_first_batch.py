"""A start that moves (``latest``, ``group``) skips nothing while the stream grows.

Spark 4.2 asks a new query's source for its start twice before batch 0 runs (to plan batch 0,
then to run it from), and once more when the driver restarts before batch 0 commits. Entries
published in between must not fall between the answers. The reader-level tests call the
stream reader in the order Spark's micro-batch execution does, with entries published
between the calls; the Spark test replays batch 0 from its checkpoint as a driver killed
before batch 0's commit does.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.sql.streaming.datasource import ReadAllAvailable

from atlasbus.model.offsets import StreamOffsets
from atlasbus.options.source import parse_source_options
from helpers import BatchCollector, payload_numbers, publish, run_until_idle, stream_reader
from pyspark_atlasbus.partition import read_partition
from pyspark_atlasbus.stream_reader import AtlasbusStreamReader


def new_reader(redis_url: str, prefix: str, **options: str) -> AtlasbusStreamReader:
    """The driver's reader as ``format("atlasbus")`` makes it for a streaming query."""
    raw = {"url": redis_url, "streamPrefix": prefix, "topics": "orders", **options}
    return AtlasbusStreamReader(parse_source_options(raw))


def batch_numbers(reader: AtlasbusStreamReader, start: Any, end: Any) -> list[int]:
    """The payload numbers a batch from ``start`` to ``end`` reads, as its tasks read them."""
    numbers: list[int] = []
    for partition in reader.partitions(start, end):
        for batch in read_partition(partition):
            numbers.extend(payload_numbers(batch.to_pylist()))
    return numbers


MOVING_STARTS = [
    pytest.param({"startingOffsets": "latest"}, id="latest"),
    pytest.param({"startingOffsets": "group", "group": "etl"}, id="group"),
]


def move_group_to_the_end(r: redis.Redis, stream: str) -> None:
    """Another consumer of the group reads everything, as the bus's consumers do."""
    r.xreadgroup("etl", "another-consumer", {stream: ">"})


def ten_entries_and_a_reader(
    r: redis.Redis, redis_url: str, prefix: str, options: dict[str, str]
) -> AtlasbusStreamReader:
    """A stream of entries 0-9 (and the group at its end, for a ``group`` start); a reader."""
    publish(r, prefix, "orders", 10)
    if "group" in options:
        r.xgroup_create(f"{prefix}:orders", "etl", id="$")
    return new_reader(redis_url, prefix, **options)


def move_on(r: redis.Redis, prefix: str, options: dict[str, str]) -> None:
    """The group's other consumers read all there is (a ``group`` start); entries 110-159."""
    if "group" in options:
        move_group_to_the_end(r, f"{prefix}:orders")
    publish(r, prefix, "orders", 50, start=110)


@pytest.mark.parametrize("options", MOVING_STARTS)
def test_spark_asking_twice_gets_one_start_and_batch_0_ends_there(
    r: redis.Redis, redis_url: str, prefix: str, options: dict[str, str]
) -> None:
    reader = ten_entries_and_a_reader(r, redis_url, prefix, options)
    first = reader.initialOffset()  # Spark plans batch 0 from this answer
    publish(r, prefix, "orders", 100, start=10)  # the stream grows meanwhile
    end_0 = reader.latestOffset(first, ReadAllAvailable())
    move_on(r, prefix, options)
    again = reader.initialOffset()  # and runs batch 0 from this one

    assert again == first
    assert end_0 == first  # batch 0 reads nothing
    assert batch_numbers(reader, again, end_0) == []
    end_1 = reader.latestOffset(end_0, ReadAllAvailable())
    reader.commit(end_1)
    assert batch_numbers(reader, end_0, end_1) == list(range(10, 160))


@pytest.mark.parametrize("options", MOVING_STARTS)
def test_a_driver_restarted_before_batch_0_commits_reads_from_the_first_start(
    r: redis.Redis, redis_url: str, prefix: str, options: dict[str, str]
) -> None:
    before_crash = ten_entries_and_a_reader(r, redis_url, prefix, options)
    first = before_crash.initialOffset()
    publish(r, prefix, "orders", 100, start=10)
    end_0 = before_crash.latestOffset(first, ReadAllAvailable())  # in the offset log

    # The driver dies before batch 0 commits; the stream grows (and the group moves on).
    move_on(r, prefix, options)
    restarted = new_reader(redis_url, prefix, **options)
    replay_from = restarted.initialOffset()  # Spark runs batch 0 again from a new answer

    assert batch_numbers(restarted, replay_from, end_0) == []
    end_1 = restarted.latestOffset(end_0, ReadAllAvailable())
    assert batch_numbers(restarted, end_0, end_1) == list(range(10, 160))


def crash_after_planning_batch_0(
    r: redis.Redis, redis_url: str, prefix: str, options: dict[str, str]
) -> Any:
    """A driver that planned batch 0 of entries 0-9's stream, 100 more arriving meanwhile
    (10-109), and died before running it; returns batch 0's end, as the offset log has it."""
    before_crash = ten_entries_and_a_reader(r, redis_url, prefix, options)
    first = before_crash.initialOffset()
    publish(r, prefix, "orders", 100, start=10)
    return before_crash.latestOffset(first, ReadAllAvailable())


def test_a_restart_whose_group_did_not_move_reads_the_backlog_in_its_first_batch(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """The restarted driver's start equals batch 0's end: its first trigger is batch 1."""
    options = {"startingOffsets": "group", "group": "etl"}
    end_0 = crash_after_planning_batch_0(r, redis_url, prefix, options)
    restarted = new_reader(redis_url, prefix, **options)
    restarted_start = StreamOffsets.from_dict(restarted.initialOffset())
    assert restarted_start.positions() == StreamOffsets.from_dict(end_0).positions()
    assert batch_numbers(restarted, end_0, end_0) == []  # batch 0 again

    end_1 = restarted.latestOffset(end_0, ReadAllAvailable())
    assert batch_numbers(restarted, end_0, end_1) == list(range(10, 110))


def test_a_replay_after_the_group_was_moved_back_still_reads_nothing(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """Batch 0 was planned empty; a replay from an earlier answer must not read history."""
    options = {"startingOffsets": "group", "group": "etl"}
    end_0 = crash_after_planning_batch_0(r, redis_url, prefix, options)
    r.xgroup_setid(f"{prefix}:orders", "etl", id="0")  # an operator resets the group
    restarted = new_reader(redis_url, prefix, **options)
    replay_from = restarted.initialOffset()
    assert replay_from != end_0

    assert batch_numbers(restarted, replay_from, end_0) == []
    assert batch_numbers(restarted, replay_from, end_0) == []  # asked again: the same
    end_1 = restarted.latestOffset(end_0, ReadAllAvailable())
    assert batch_numbers(restarted, end_0, end_1) == list(range(10, 110))


def test_trim_consumed_never_trims_to_the_start_of_a_replayed_batch_0(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """Entries 0-9 lie before a ``latest`` start: the query consumed none of them."""
    stream = f"{prefix}:orders"
    options = {"startingOffsets": "latest", "trimConsumed": "true"}
    end_0 = crash_after_planning_batch_0(r, redis_url, prefix, options)
    restarted = new_reader(redis_url, prefix, **options)
    assert batch_numbers(restarted, restarted.initialOffset(), end_0) == []

    end_1 = restarted.latestOffset(end_0, ReadAllAvailable())  # batch 0 is committed now
    assert r.xlen(stream) == 110
    assert batch_numbers(restarted, end_0, end_1) == list(range(10, 110))
    restarted.commit(end_1)
    assert r.xlen(stream) == 1  # trimmed to what batch 1 consumed: its last entry stays


def test_min_entries_hold_a_trickle_after_the_empty_first_batch_of_a_latest_start(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """The empty batch 0 is the first trigger, which is never held; the next one is."""
    options = {"startingOffsets": "latest", "minEntriesPerTrigger": "100", "maxTriggerDelay": "10m"}
    reader = ten_entries_and_a_reader(r, redis_url, prefix, options)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    assert batch_numbers(reader, start, start) == []
    publish(r, prefix, "orders", 5, start=10)
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # held: 5 of 100
    publish(r, prefix, "orders", 95, start=15)
    end_1 = reader.latestOffset(start, ReadAllAvailable())
    assert batch_numbers(reader, start, end_1) == list(range(10, 110))


def test_a_group_start_reads_a_small_backlog_at_its_first_trigger_after_batch_0(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """As Kafka's first trigger, never held: the group's 5 unread entries go at once."""
    options = {"startingOffsets": "group", "group": "etl", "minEntriesPerTrigger": "100"}
    reader = ten_entries_and_a_reader(r, redis_url, prefix, options)
    publish(r, prefix, "orders", 5, start=10)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    assert batch_numbers(reader, start, start) == []
    end_1 = reader.latestOffset(start, ReadAllAvailable())
    assert batch_numbers(reader, start, end_1) == list(range(10, 15))


@pytest.mark.spark
@pytest.mark.parametrize("set_back", [False, True], ids=["group-moved-on", "group-set-back"])
def test_group_start_replayed_after_a_crash_before_batch_0_commits_loses_nothing(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path, set_back: bool
) -> None:
    """Batch 0 replayed from a later or an earlier group position reads nothing, and the
    query goes on from where it first started: entries 50-109, each once."""
    stream = f"{prefix}:orders"
    ids = publish(r, prefix, "orders", 100)
    r.xgroup_create(stream, "etl", id=ids[49])  # the group has had entries 0-49
    checkpoint = tmp_path / "ck"
    options = {"topics": "orders", "group": "etl", "startingOffsets": "group"}

    first = BatchCollector()
    run_until_idle(stream_reader(spark, redis_url, prefix, **options), str(checkpoint), first)
    assert payload_numbers(first.rows) == list(range(50, 100))

    # What a driver killed right after planning batch 0 leaves: batch 0's offsets, no
    # commit. The group has moved on meanwhile (this query mirrored it; others may too).
    shutil.rmtree(checkpoint / "commits")
    for planned in (checkpoint / "offsets").iterdir():
        if planned.name not in ("0", ".0.crc"):
            planned.unlink()
    assert r.xinfo_groups(stream)[0]["last-delivered-id"].decode() == ids[-1]
    if set_back:
        r.xgroup_setid(stream, "etl", id="0")  # an operator resets the group
    publish(r, prefix, "orders", 10, start=100)

    replayed = BatchCollector()
    run_until_idle(stream_reader(spark, redis_url, prefix, **options), str(checkpoint), replayed)
    assert payload_numbers(replayed.rows) == list(range(50, 110))
