"""Where a query starts and how far each micro-batch goes (atlasbus.planning.positions), on a real Redis.

Entries are added with explicit IDs, so every expected position is written out.
"""

from __future__ import annotations

import json
import logging

import pytest
import redis

from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.errors import ConfigurationError
from atlasbus.model.entry_id import EntryId
from atlasbus.options.source import (
    SourceOptions,
    parse_source_options,
    require_batch_compatible,
    require_streaming_compatible,
)
from atlasbus.planning.positions import (
    batch_end,
    ending_offsets,
    latest_offsets,
    starting_offsets,
)


def options(redis_url: str, prefix: str, **extra: str) -> SourceOptions:
    """Topics a and b unless ``topics``, ``topicPattern`` or ``streams`` is given."""
    subscribed = {} if {"topicPattern", "streams"} & set(extra) else {"topics": "a,b"}
    return parse_source_options({"url": redis_url, "streamPrefix": prefix, **subscribed, **extra})


def add(r: redis.Redis, stream: str, *ids: str) -> None:
    for entry_id in ids:
        r.xadd(stream, {"n": entry_id}, id=entry_id)


def ids(positions: dict[str, EntryId]) -> dict[str, str]:
    return {stream: str(position) for stream, position in positions.items()}


def group_at(r: redis.Redis, stream: str, group: str) -> str | None:
    for info in r.xinfo_groups(stream):
        name = info["name"].decode() if isinstance(info["name"], bytes) else info["name"]
        if name == group:
            value = info["last-delivered-id"]
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def id_range(ms: int, count: int) -> list[str]:
    return [f"{ms + n}-0" for n in range(count)]


# --- starting_offsets ----------------------------------------------------------------------------


def test_earliest_gives_no_positions_so_every_stream_is_read_from_its_first_entry(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0", "2000-0")
    chosen = options(redis_url, prefix)
    assert starting_offsets(StreamCatalog(chosen.endpoint), chosen) == {}
    assert r.xinfo_stream(f"{prefix}:a")["groups"] == 0  # no group option: no group


def test_latest_starts_after_the_newest_entry_of_each_stream_that_has_one(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0", "2000-0", "3000-0")
    chosen = options(redis_url, prefix, startingOffsets="latest")
    # b does not exist: it is new to the query, read from its first entry when it appears
    assert ids(starting_offsets(StreamCatalog(chosen.endpoint), chosen)) == {
        f"{prefix}:a": "3000-0"
    }


def test_latest_after_the_newest_entry_was_deleted_is_the_newest_entry_still_there(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0", "2000-0", "3000-0")
    r.xdel(f"{prefix}:a", "3000-0")
    chosen = options(redis_url, prefix, startingOffsets="latest")
    # reading after 2000-0 or after 3000-0 is the same; a real entry lets loss checks work
    assert ids(starting_offsets(StreamCatalog(chosen.endpoint), chosen)) == {
        f"{prefix}:a": "2000-0"
    }


def test_timestamp_starts_at_the_first_entry_at_or_after_it(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0", "1999-7", "2000-0", "2000-1", "3000-0")
    add(r, f"{prefix}:b", "2500-0")  # nothing before the timestamp: read from its beginning
    chosen = options(redis_url, prefix, startingTimestamp="2000")
    assert ids(starting_offsets(StreamCatalog(chosen.endpoint), chosen)) == {
        f"{prefix}:a": "1999-7"
    }


def test_group_starts_where_the_group_is_and_creates_it_where_it_is_missing(
    r: redis.Redis, redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    add(r, f"{prefix}:a", "1000-0", "2000-0", "3000-0")
    add(r, f"{prefix}:b", "1000-0")
    r.xgroup_create(f"{prefix}:a", "g", id="2500-0")  # between two entries
    r.xgroup_create(f"{prefix}:b", "other", id="1000-0")
    chosen = options(redis_url, prefix, startingOffsets="group", group="g")
    with caplog.at_level(logging.INFO, logger="atlasbus.positions"):
        positions = starting_offsets(StreamCatalog(chosen.endpoint), chosen)
    assert ids(positions) == {f"{prefix}:a": "2000-0"}
    assert f"consumer group 'g' does not exist yet on {prefix}:b" in caplog.text
    # the group is created at the start on b, left where it was on a
    assert (group_at(r, f"{prefix}:a", "g"), group_at(r, f"{prefix}:b", "g")) == ("2500-0", "0-0")
    assert group_at(r, f"{prefix}:b", "other") == "1000-0"


def test_group_option_with_earliest_creates_the_group_at_the_start_even_on_absent_streams(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0")
    chosen = options(redis_url, prefix, group="g")
    assert starting_offsets(StreamCatalog(chosen.endpoint), chosen) == {}
    assert (group_at(r, f"{prefix}:a", "g"), group_at(r, f"{prefix}:b", "g")) == ("0-0", "0-0")
    assert r.xlen(f"{prefix}:b") == 0  # created empty, so the group has a stream to live on


def test_json_offsets_are_moved_back_to_the_newest_entry_at_or_before_them(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0", "2000-0", "3000-0")
    add(r, f"{prefix}:b", "5000-0")
    offsets = {"a": "2500-0", f"{prefix}:b": "4000-0"}
    chosen = options(redis_url, prefix, startingOffsets=json.dumps(offsets), group="g")
    catalog = StreamCatalog(chosen.endpoint)
    # b's position is before its first entry: read from its beginning, like a new stream
    assert ids(starting_offsets(catalog, chosen)) == {f"{prefix}:a": "2000-0"}
    # the group is created at the positions as given
    assert (group_at(r, f"{prefix}:a", "g"), group_at(r, f"{prefix}:b", "g")) == (
        "2500-0",
        "4000-0",
    )


def test_json_offsets_earliest_per_topic_and_exact_entries(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0", "2000-0")
    add(r, f"{prefix}:b", "1000-0")
    for earliest in ("earliest", "EARLIEST", " Earliest"):  # any case, as the option's own
        offsets = json.dumps({"a": "2000-0", "b": earliest})
        chosen = options(redis_url, prefix, startingOffsets=offsets)
        assert ids(starting_offsets(StreamCatalog(chosen.endpoint), chosen)) == {
            f"{prefix}:a": "2000-0"
        }


def test_create_group_false_leaves_redis_unchanged(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0")
    chosen = options(redis_url, prefix, startingOffsets="latest", group="g")
    positions = starting_offsets(StreamCatalog(chosen.endpoint), chosen, create_group=False)
    assert ids(positions) == {f"{prefix}:a": "1000-0"}
    assert r.xinfo_groups(f"{prefix}:a") == []
    assert r.exists(f"{prefix}:b") == 0


# --- batch_end -----------------------------------------------------------------------------------


def test_without_a_cap_a_batch_reaches_the_newest_entry_of_every_stream(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", *id_range(1000, 5))
    add(r, f"{prefix}:b", "1000-0", "2000-0")
    r.xdel(f"{prefix}:b", "2000-0")  # the newest ever added is the position, deleted or not
    chosen = options(redis_url, prefix)
    end = batch_end(StreamCatalog(chosen.endpoint), chosen, {}, max_entries=None)
    assert ids(end.positions) == {f"{prefix}:a": "1004-0", f"{prefix}:b": "2000-0"}
    assert {stream: info.length if info else None for stream, info in end.infos.items()} == {
        f"{prefix}:a": 5,
        f"{prefix}:b": 1,
    }
    assert end.walks == {}  # nothing was counted


def test_a_stream_enters_the_offsets_only_once_something_of_it_is_read(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0")
    r.xgroup_create(f"{prefix}:b", "g", id="0", mkstream=True)  # b exists, empty
    chosen = options(redis_url, prefix)
    catalog = StreamCatalog(chosen.endpoint)
    assert ids(latest_offsets(catalog, chosen, {}, max_entries=None)) == {f"{prefix}:a": "1000-0"}
    assert ids(latest_offsets(catalog, chosen, {}, max_entries=10)) == {f"{prefix}:a": "1000-0"}


def test_a_stream_in_the_start_keeps_its_position_when_it_has_nothing_newer_or_is_gone(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0", "2000-0")
    chosen = options(redis_url, prefix)
    catalog = StreamCatalog(chosen.endpoint)
    start = {f"{prefix}:a": EntryId(2000, 0), f"{prefix}:b": EntryId(7000, 0)}  # b was deleted
    for cap in (None, 10):
        assert latest_offsets(catalog, chosen, start, max_entries=cap) == start


def test_a_cap_is_shared_fairly_and_what_a_short_stream_leaves_goes_to_the_others(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    a, b, c = (f"{prefix}:{name}" for name in "abc")
    add(r, a, *id_range(1000, 100))
    add(r, b, *id_range(1000, 5))
    add(r, c, *id_range(1000, 100))
    chosen = options(redis_url, prefix, topics="a,b,c", maxEntriesPerPartition="10")
    end = batch_end(StreamCatalog(chosen.endpoint), chosen, {}, max_entries=60)
    # shares of 20; b has 5, so its 15 are shared out again (7 each), and the last one goes to
    # the first stream in order: 28 + 5 + 27 = 60 exactly
    assert ids(end.positions) == {a: "1027-0", b: "1004-0", c: "1026-0"}
    assert {stream: walk.total for stream, walk in end.walks.items()} == {a: 28, b: 5, c: 27}
    assert end.walks[a].pieces(EntryId(1027, 0)) == (
        (EntryId(1009, 0), EntryId(1019, 0)),
        (10, 10, 8),
    )


def test_a_cap_short_of_one_entry_per_stream_goes_in_order_past_streams_with_nothing_left(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    a, b, c, d = (f"{prefix}:{name}" for name in "abcd")
    add(r, a, "1000-0", "2000-0")
    r.xdel(a, "2000-0")  # a's newest is 2000-0, but nothing is left after 1000-0
    for stream in (b, c, d):
        add(r, stream, *id_range(1000, 3))
    chosen = options(redis_url, prefix, topics="a,b,c,d")
    start = {a: EntryId(1000, 0)}
    end = batch_end(StreamCatalog(chosen.endpoint), chosen, start, max_entries=2)
    # shares of 1 in stream order: a walks none (and is done), so b and c get one each
    assert ids(end.positions) == {a: "2000-0", b: "1000-0", c: "1000-0"}
    assert {stream: walk.total for stream, walk in end.walks.items()} == {a: 0, b: 1, c: 1}


def test_a_cap_counts_from_the_start_and_skips_deleted_entries(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    stream = f"{prefix}:a"
    add(r, stream, *id_range(1000, 20))
    r.xdel(stream, "1011-0", "1012-0")
    chosen = options(redis_url, prefix, topics="a")
    start = {stream: EntryId(1009, 0)}
    end = batch_end(StreamCatalog(chosen.endpoint), chosen, start, max_entries=4)
    assert ids(end.positions) == {stream: "1015-0"}  # 1010, 1013, 1014, 1015
    assert end.walks[stream].total == 4


def test_a_cap_larger_than_what_is_there_reads_everything(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", *id_range(1000, 3))
    add(r, f"{prefix}:b", *id_range(5000, 2))
    chosen = options(redis_url, prefix)
    end = batch_end(StreamCatalog(chosen.endpoint), chosen, {}, max_entries=1000)
    assert ids(end.positions) == {f"{prefix}:a": "1002-0", f"{prefix}:b": "5001-0"}
    assert sum(walk.total for walk in end.walks.values()) == 5


def test_available_now_target_caps_every_stream_and_leaves_streams_found_later(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", *id_range(1000, 10))
    chosen = options(redis_url, prefix, topicPattern="*")
    catalog = StreamCatalog(chosen.endpoint)
    target = latest_offsets(catalog, chosen, {}, max_entries=None)  # when the trigger begins
    assert ids(target) == {f"{prefix}:a": "1009-0"}
    add(r, f"{prefix}:a", *id_range(2000, 10))  # after the trigger began
    add(r, f"{prefix}:late", "1000-0")
    assert latest_offsets(catalog, chosen, {}, max_entries=None, target=target) == target
    first = batch_end(catalog, chosen, {}, max_entries=6, target=target)
    assert ids(first.positions) == {f"{prefix}:a": "1005-0"}
    second = batch_end(catalog, chosen, first.positions, max_entries=6, target=target)
    assert ids(second.positions) == {f"{prefix}:a": "1009-0"}  # 4 left before the target
    assert second.walks[f"{prefix}:a"].total == 4


# --- batch reads ---------------------------------------------------------------------------------


def test_a_batch_read_ends_at_ending_offsets_or_at_the_newest_entries(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    add(r, f"{prefix}:a", "1000-0", "2000-0")
    chosen = options(redis_url, prefix)
    catalog = StreamCatalog(chosen.endpoint)
    assert ids(ending_offsets(catalog, chosen)) == {f"{prefix}:a": "2000-0", f"{prefix}:b": "0-0"}
    bounded = options(redis_url, prefix, endingOffsets=json.dumps({"a": "1500-0"}))
    assert ids(ending_offsets(catalog, bounded)) == {f"{prefix}:a": "1500-0", f"{prefix}:b": "0-0"}
    # a stream endingOffsets does not list is read to its newest entry (it was left out)
    add(r, f"{prefix}:b", "3000-0")
    assert ids(ending_offsets(catalog, bounded)) == {
        f"{prefix}:a": "1500-0",
        f"{prefix}:b": "3000-0",
    }


def test_options_for_the_other_kind_of_read_are_refused_naming_them(redis_url: str) -> None:
    ending = options(redis_url, "p", endingOffsets=json.dumps({"a": "1-0"}))
    with pytest.raises(ConfigurationError, match="option 'endingOffsets' is for batch reads"):
        require_streaming_compatible(ending)
    require_batch_compatible(ending)
    latest = options(redis_url, "p", startingOffsets="latest")
    with pytest.raises(ConfigurationError, match="option 'startingOffsets' cannot be 'latest'"):
        require_batch_compatible(latest)
    require_streaming_compatible(latest)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"minEntriesPerTrigger": "5"}, "option 'minEntriesPerTrigger' is for streaming queries"),
        ({"trimConsumed": "true"}, "option 'trimConsumed' is for streaming queries"),
        (
            {"sweepGroup": "g", "sweepMaxDeliveries": "3", "deadLetterTable": "/tmp/dlq"},
            "option 'sweepGroup' is for streaming queries (spark.readStream) only",
        ),
    ],
)
def test_streaming_only_options_are_refused_for_a_batch_read(
    redis_url: str, extra: dict[str, str], message: str
) -> None:
    chosen = options(redis_url, "p", **extra)
    require_streaming_compatible(chosen)
    with pytest.raises(ConfigurationError) as info:
        require_batch_compatible(chosen)
    assert message in str(info.value)


def test_pending_of_is_a_batch_read(redis_url: str) -> None:
    pending = options(redis_url, "p", pendingOf="workers")
    with pytest.raises(ConfigurationError, match="option 'pendingOf' is for batch reads"):
        require_streaming_compatible(pending)
    require_batch_compatible(pending)
