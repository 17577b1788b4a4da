"""Planning and data loss on streams that change between planning and reading.

Driver and executor steps are called as Spark calls them (``mark_batch`` when the end offset
is chosen, its JSON as Spark checkpoints it, ``plan_ranges`` from that JSON, ``read_range`` per
piece), with appends, XDELs, trims and DELs from another client in between.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.dead_letters import DeadLetterTable
from atlasbus.errors import ConfigurationError, DataLossError
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.model.offsets import StreamOffsets
from atlasbus.model.stream_plan import LostEntries, StreamPlan
from atlasbus.options.source import SourceOptions, parse_source_options
from atlasbus.planning import batch_plan as planning
from atlasbus.planning.batch_plan import (
    ReadRange,
    mark_batch,
    plan_ranges,
    report_recorded_losses,
    split_range,
)
from atlasbus.planning.positions import batch_end
from atlasbus.reading.range_reader import read_range
from helpers import publish, redis_major


def _options(redis_url: str, prefix: str, **extra: str) -> SourceOptions:
    return parse_source_options({"url": redis_url, "streamPrefix": prefix, "topics": "t", **extra})


def _end(options: SourceOptions, start: StreamOffsets, *, cap: int | None = None) -> str:
    """The end offset JSON as Spark checkpoints it (latestOffset's answer)."""
    catalog = StreamCatalog(options.endpoint)
    end = batch_end(catalog, options, start, max_entries=cap)
    marked = mark_batch(catalog, options, start, end.positions, infos=end.infos, walks=end.walks)
    return marked.to_json()


def _plan(options: SourceOptions, start: StreamOffsets, end_json: str) -> list[ReadRange]:
    """partitions(start, end) as the stream reader does it: recorded losses, then ranges."""
    end = StreamOffsets.from_json(end_json)
    report_recorded_losses(options, start, end)
    return plan_ranges(options, start, end)


def _read_ids(options: SourceOptions, ranges: list[ReadRange]) -> list[str]:
    ids: list[str] = []
    for piece in ranges:
        for batch in read_range(options, piece):
            ids.extend(batch.column("id").to_pylist())
    return ids


def _spans(ranges: list[ReadRange]) -> list[tuple[str, str, str, int | None]]:
    return [(r.stream, str(r.after), str(r.upto), r.expected) for r in ranges]


# --- 1. a replanned batch reads the same pieces ------------------------------------------------


@pytest.mark.parametrize("cap", [None, 1500], ids=["all-available", "maxEntriesPerTrigger"])
def test_replanning_after_appends_and_deletes_gives_the_same_pieces(
    r: redis.Redis, redis_url: str, prefix: str, cap: int | None
) -> None:
    options = _options(redis_url, prefix, maxEntriesPerPartition="200")
    ids = publish(r, prefix, "t", 2000)
    start = StreamOffsets({f"{prefix}:t": EntryId.parse(ids[99])})
    end_json = _end(options, start, cap=cap)
    before = _plan(options, start, end_json)
    assert len(before) >= 5
    assert before[0].after == EntryId.parse(ids[99])

    publish(r, prefix, "t", 50_000, start=2000, chunk=5000)  # a burst after planning
    upto = before[-1].upto
    inside = next(i for i in ids if EntryId.parse(i) > before[1].after)
    beyond = r.xrevrange(f"{prefix}:t", count=1)[0][0]
    r.xdel(f"{prefix}:t", inside, beyond)
    assert EntryId.parse(beyond) > upto

    again = _plan(options, start, end_json)
    assert _spans(again) == _spans(before)
    # and a fresh plan of the same (start, end) from the same checkpointed JSON, read back
    assert _spans(_plan(options, start, StreamOffsets.from_json(end_json).to_json())) == _spans(
        before
    )


def test_pieces_of_a_counted_batch_hold_max_entries_per_partition(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    options = _options(redis_url, prefix, maxEntriesPerPartition="300")
    publish(r, prefix, "t", 1000)
    start = StreamOffsets()
    ranges = _plan(options, start, _end(options, start, cap=1000))
    assert [r.expected for r in ranges] == [300, 300, 300, 100]
    assert len(_read_ids(options, ranges)) == 1000


def test_an_idle_stream_keeps_its_offset_so_spark_runs_no_batch(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    options = _options(redis_url, prefix)
    publish(r, prefix, "t", 10)
    first = StreamOffsets.from_json(_end(options, StreamOffsets()))
    assert _end(options, first) == first.to_json()


def test_old_plain_checkpoints_are_read_as_one_piece_per_stream(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    options = _options(redis_url, prefix, maxEntriesPerPartition="10")
    ids = publish(r, prefix, "t", 100)
    start = StreamOffsets({f"{prefix}:t": EntryId.parse(ids[9])})
    ranges = _plan(options, start, f'{{"{prefix}:t": "{ids[-1]}"}}')
    assert _spans(ranges) == [(f"{prefix}:t", ids[9], ids[-1], None)]
    assert _read_ids(options, ranges) == ids[10:]


# --- 2. what is not loss is not reported ----------------------------------------------------------


def test_xdel_beyond_the_batch_and_of_read_entries_is_not_loss(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    if redis_major(r) < 7:
        pytest.skip(
            "Redis 6.2 records no XDEL: a deleted last-read entry looks like a trim and is "
            "reported conservatively (docs/guarantees.md)"
        )
    options = _options(redis_url, prefix)
    stream = f"{prefix}:t"
    ids = publish(r, prefix, "t", 100)
    start = StreamOffsets.from_json(_end(options, StreamOffsets()))
    assert start[stream] == EntryId.parse(ids[99])
    ids += publish(r, prefix, "t", 100, start=100)
    r.xdel(stream, *ids[:100])  # the bus's consumer deletes what it handled
    end_json = _end(options, start)
    ids += publish(r, prefix, "t", 100, start=200)
    r.xdel(stream, ids[250], ids[299])  # beyond this batch's end (ids[199])
    ranges = _plan(options, start, end_json)
    assert _read_ids(options, ranges) == ids[100:200]

    # the next batch starts at a deleted entry and reports only its own two
    nxt = StreamOffsets.from_json(end_json)
    r.xdel(stream, *ids[100:200])
    with pytest.raises(DataLossError) as info:
        _plan(options, nxt, _end(options, nxt))
    assert f"2 entries after {ids[199]} up to {ids[299]} were removed" in str(info.value)


def test_a_first_batch_cut_by_time_takes_no_removal_past_it_for_loss_of_its_first_piece(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """A new query's first batch starts at 0-0; cut by time, its pieces are not counted, and
    the stream's first entry always lies past 0-0. The first piece checks a trim against the
    batch's first entry when planned (the end offset's ``first``), so one XDEL past the batch
    (the bus's consumer) is no loss of it, while a trim into it before the read still is."""
    options = _options(redis_url, prefix, minPartitions="3")
    stream = f"{prefix}:t"
    ids = publish(r, prefix, "t", 3000)
    end_json = _end(options, StreamOffsets())
    assert StreamOffsets.from_json(end_json).plan(stream).first == EntryId.parse(ids[0])
    later = publish(r, prefix, "t", 10, start=3000)
    assert r.xdel(stream, later[5]) == 1
    ranges = _plan(options, StreamOffsets(), end_json)
    assert len(ranges) == 3 and all(piece.expected is None for piece in ranges)
    assert _read_ids(options, ranges) == ids
    if redis_major(r) < 7:
        return  # 6.2 keeps no removal counter: a trim after planning goes unseen there
    r.xtrim(stream, minid=ids[10], approximate=False)
    with pytest.raises(DataLossError) as info:
        _read_ids(options, ranges)
    assert str(info.value).startswith(
        f"stream {stream!r}: entries after 0-0 up to {EntryId.parse(ids[10]).predecessor()} "
        "were removed"
    )


# --- 3. loss is reported, counted, once -----------------------------------------------------------


def _removals(r: redis.Redis, stream: str, ids: list[str]) -> dict[str, Any]:
    return {
        "xdel": lambda: r.xdel(stream, ids[150], ids[160]),
        "xtrim-minid": lambda: r.xtrim(stream, minid=ids[180], approximate=False),
        "xtrim-maxlen-0": lambda: r.xtrim(stream, maxlen=0, approximate=False),
        "del": lambda: r.delete(stream),
    }


@pytest.mark.parametrize("how", ["xdel", "xtrim-minid", "xtrim-maxlen-0", "del"])
@pytest.mark.parametrize("when", ["before-the-read", "between-attempts"])
def test_entries_removed_after_planning_are_reported_with_stream_range_and_count(
    r: redis.Redis, redis_url: str, prefix: str, how: str, when: str
) -> None:
    if not redis_major(r) >= 7:
        pytest.skip("Redis 6.2 keeps no entries-added counter: loss after planning needs Redis 7")
    options = _options(redis_url, prefix)
    stream = f"{prefix}:t"
    ids = publish(r, prefix, "t", 100)
    start = StreamOffsets.from_json(_end(options, StreamOffsets()))
    ids += publish(r, prefix, "t", 200, start=100)
    ranges = _plan(options, start, _end(options, start))
    assert len(ranges) == 1
    if when == "between-attempts":
        assert _read_ids(options, ranges) == ids[100:]  # attempt 1, whose task then fails
    _removals(r, stream, ids)[how]()
    expected_missing = {"xdel": 2, "xtrim-minid": 80, "xtrim-maxlen-0": 200, "del": 200}[how]
    with pytest.raises(DataLossError) as info:
        _read_ids(options, ranges)
    assert str(info.value).startswith(
        f"stream {stream!r}: {expected_missing} entries after {ids[99]} up to {ids[-1]} were "
        "removed (trimmed or deleted) before the query read them."
    )
    assert "failOnDataLoss=false" in str(info.value)


def test_with_fail_on_data_loss_false_each_loss_is_one_dead_letter_however_often_found(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    table = str(tmp_path / "dead")
    options = _options(redis_url, prefix, failOnDataLoss="false", deadLetterTable=table)
    stream = f"{prefix}:t"
    if not redis_major(r) >= 7:
        pytest.skip("Redis 6.2 keeps no entries-added counter: loss after planning needs Redis 7")
    ids = publish(r, prefix, "t", 100)
    start = StreamOffsets.from_json(_end(options, StreamOffsets()))
    ids += publish(r, prefix, "t", 200, start=100)
    r.xtrim(stream, minid=ids[120], approximate=False)  # before planning: 20 unread entries
    end_json = _end(options, start)
    ranges = _plan(options, start, end_json)
    r.xdel(stream, ids[200])  # between planning and the read
    for _ in range(3):  # the task retried, the batch replanned and replayed
        assert _read_ids(options, _plan(options, start, end_json)) == [
            i for i in ids[120:] if i != ids[200]
        ]
    assert len(ranges) == 1
    letters = DeadLetterTable(table).to_arrow().to_pylist()
    assert len(letters) == 2
    assert {(dict(row["fields"])["upto"], row["stage"], row["error"]) for row in letters} == {
        (
            str(EntryId.parse(ids[120]).predecessor()),
            "data-loss",
            f"stream {stream!r}: 20 entries "
            f"{LostEntries(stream, EntryId.parse(ids[99]), EntryId.parse(ids[120]).predecessor()).span()}"
            " were removed (trimmed or deleted) before the query read them",
        ),
        (
            ids[-1],
            "data-loss",
            f"stream {stream!r}: 1 entry after {ids[99]} up to {ids[-1]} was removed "
            "(trimmed or deleted) before the query read them",
        ),
    }


def test_a_stream_new_to_the_query_reads_what_redis_holds_without_reporting_loss(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    options = _options(redis_url, prefix)
    ids = publish(r, prefix, "t", 100)
    r.xtrim(f"{prefix}:t", maxlen=40, approximate=False)
    r.xdel(f"{prefix}:t", ids[70])
    ranges = _plan(options, StreamOffsets(), _end(options, StreamOffsets()))
    assert _read_ids(options, ranges) == [i for i in ids[60:] if i != ids[70]]


def test_counted_pieces_cover_every_entry_once(r: redis.Redis, redis_url: str, prefix: str) -> None:
    options = _options(redis_url, prefix, maxEntriesPerPartition="7")
    ids = publish(r, prefix, "t", 100)
    r.xdel(f"{prefix}:t", *ids[::9])
    start = StreamOffsets()
    ranges = _plan(options, start, _end(options, start, cap=1000))
    got = _read_ids(options, ranges)
    assert got == [i for k, i in enumerate(ids) if k % 9]
    assert all(a.upto == b.after for a, b in itertools.pairwise(ranges))
    assert ranges[0].after == ZERO


def test_a_key_that_is_not_a_stream_is_named_in_a_clear_error(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    r.set(f"{prefix}:t", "not a stream")
    options = _options(redis_url, prefix)
    with pytest.raises(ConfigurationError) as info:
        _end(options, StreamOffsets())
    assert str(info.value).startswith(
        f"key '{prefix}:t' on Redis at 127.0.0.1:{redis_url.rsplit(':', 1)[1].split('/')[0]} "
        "is not a stream: check options 'topics'/'topicPattern'/'streams' and 'streamPrefix'"
    )


# --- 4. many streams planned together ----------------------------------------------------------


@pytest.mark.parametrize("cap", [None, 70], ids=["all-available", "maxEntriesPerTrigger"])
def test_streams_planned_together_get_the_plans_each_gets_alone(
    r: redis.Redis, redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch, cap: int | None
) -> None:
    """One batch where each stream takes another path: the questions are asked together."""
    monkeypatch.setattr(planning, "COUNT_CUTS_UP_TO", 25)  # beyond 25 entries: cut by time
    topics = ("plain", "new", "xdel", "one", "idle", "big")
    options = _options(redis_url, prefix, topics=",".join(topics), maxEntriesPerPartition="7")
    ids = {topic: publish(r, prefix, topic, 20) for topic in topics if topic != "one"}
    ids["one"] = []
    catalog = StreamCatalog(options.endpoint)
    marked = StreamOffsets.from_json(_end(options, StreamOffsets()))
    key = {topic: f"{prefix}:{topic}" for topic in topics}
    start = StreamOffsets.from_plans(
        {
            key["plain"]: StreamPlan(marked[key["plain"]]),  # as atlasbus 0.1 wrote it
            key["xdel"]: marked.plan(key["xdel"]),
            key["idle"]: marked.plan(key["idle"]),
            key["big"]: marked.plan(key["big"]),
        }
    )
    ids["plain"] += publish(r, prefix, "plain", 30, start=20)
    ids["xdel"] += publish(r, prefix, "xdel", 30, start=20)
    r.xdel(key["xdel"], ids["xdel"][30])
    ids["one"] += publish(r, prefix, "one", 1)
    ids["big"] += publish(r, prefix, "big", 60, start=20)

    end = batch_end(catalog, options, start, max_entries=cap)
    together = mark_batch(catalog, options, start, end.positions, infos=end.infos, walks=end.walks)
    assert set(together) == {key[t] for t in topics}
    for topic in topics:
        stream = key[topic]
        alone_options = _options(redis_url, prefix, topics=topic, maxEntriesPerPartition="7")
        alone_start = StreamOffsets.from_plans(
            {stream: start.plan(stream)} if stream in start else {}
        )
        # under a cap, the stream alone gets the share it got together
        share = end.walks[stream].total if stream in end.walks else cap
        alone_end = batch_end(catalog, alone_options, alone_start, max_entries=share)
        alone = mark_batch(
            catalog,
            alone_options,
            alone_start,
            alone_end.positions,
            infos=alone_end.infos,
            walks=alone_end.walks,
        )
        assert alone.plan(stream) == together.plan(stream), topic
    assert together.plan(key["idle"]) == start.plan(key["idle"])
    if cap is None:
        assert together.plan(key["new"]).counts == (7, 7, 6)
        if redis_major(r) >= 7:  # the XDEL above the start is counted: 29 entries present
            assert sum(together.plan(key["xdel"]).counts or ()) == 29
            xdel = [EntryId.parse(ids["xdel"][n]) for n in (19, 30)]
            assert together.plan(key["xdel"]).lost == (xdel[0], xdel[1], 1)
            # 60 new entries, more than COUNT_CUTS_UP_TO: 9 pieces cut by time, not counted;
            # by sequence number within one millisecond, else at millisecond bounds (so as many
            # pieces as the milliseconds the entries took, up to 9, as the machine's speed goes)
            big = together.plan(key["big"])
            first, upto = (EntryId.parse(ids["big"][n]) for n in (20, -1))
            by_time = split_range(marked[key["big"]], first, upto, 9)
            assert big.counts is None
            assert big.cuts == tuple(high for _, high in by_time[:-1])
            assert 1 <= len(big.cuts) <= 8


# --- 5. minPartitions: small batches over both cores ------------------------------------------


def test_min_partitions_cuts_a_small_batch_by_time_into_that_many_pieces_without_a_walk(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """Kafka's minPartitions: a batch under maxEntriesPerPartition is one task without it; with
    it, each stream gets pieces in proportion to its entries, cut by time (nothing walked)."""
    topics = "t,u"
    ids = {"t": publish(r, prefix, "t", 3000), "u": publish(r, prefix, "u", 1000)}
    start = StreamOffsets({f"{prefix}:{t}": EntryId.parse(ids[t][99]) for t in ids})
    wanted = ids["t"][100:] + ids["u"][100:]

    alone = _options(redis_url, prefix, topics=topics)
    ranges = _plan(alone, start, _end(alone, start))
    assert [r.stream for r in ranges] == [f"{prefix}:t", f"{prefix}:u"]

    options = _options(redis_url, prefix, topics=topics, minPartitions="4")
    ranges = _plan(options, start, _end(options, start))
    assert [r.stream for r in ranges] == [f"{prefix}:t"] * 3 + [f"{prefix}:u"]
    assert all(r.expected is None for r in ranges[:3])  # cut by time: counts unknown per piece
    assert sorted(_read_ids(options, ranges)) == sorted(wanted)  # every entry once
    assert all(a.upto == b.after for a, b in itertools.pairwise(ranges[:3]))

    # by time means by sequence number when the entries share a millisecond, and at
    # millisecond bounds otherwise: as many pieces as the milliseconds allow, up to 3
    more = _options(redis_url, prefix, topics="t", minPartitions="3", maxEntriesPerPartition="2")
    one = StreamOffsets({f"{prefix}:t": EntryId.parse(ids["t"][-3])})
    pieces = _plan(more, one, _end(more, one))
    assert _read_ids(more, pieces) == ids["t"][-2:]


def test_min_partitions_is_validated_and_refused_with_pending_of(redis_url: str) -> None:
    base = {"url": redis_url, "topics": "t"}
    with pytest.raises(ConfigurationError, match="option 'minPartitions'"):
        parse_source_options({**base, "minPartitions": "0"})
    with pytest.raises(ConfigurationError) as info:
        parse_source_options({**base, "pendingOf": "g", "minPartitions": "2"})
    assert str(info.value).startswith(
        "option 'minPartitions' does not apply with option 'pendingOf'"
    )
