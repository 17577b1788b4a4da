"""A time window of a batch read by options, as with Spark's Kafka source: ``startingTimestamp``
(included) to ``endingTimestamp`` (excluded) reads only the window's range from Redis, on
every pyspark line, whatever Spark pushes. Planned and read here without Spark; the same read
through Spark: test_pushdown_spark.py; bad values: test_source_options.py."""

from __future__ import annotations

import pytest
import redis

from atlasbus.errors import ConfigurationError, DataLossError
from atlasbus.options.source import (
    parse_source_options,
    require_batch_compatible,
    require_streaming_compatible,
)
from pyspark_atlasbus.batch_reader import AtlasbusBatchReader
from pyspark_atlasbus.partition import read_partition
from test_pushdown import T0, fill


def reader_of(redis_url: str, prefix: str, **options: str) -> AtlasbusBatchReader:
    parsed = parse_source_options(
        {"url": redis_url, "streamPrefix": prefix, "topics": "orders,payments", **options}
    )
    require_batch_compatible(parsed)
    return AtlasbusBatchReader(parsed)


def ids_read(partitions: list[object]) -> list[str]:
    return [
        entry
        for partition in partitions
        for batch in read_partition(partition)  # type: ignore[arg-type]
        for entry in batch.column("id").to_pylist()
    ]


def in_window(ids: list[str], first_ms: int, end_ms: int) -> list[str]:
    return [i for i in ids if first_ms <= int(i.split("-")[0]) < end_ms]


def test_a_window_reads_from_its_first_millisecond_to_before_its_end(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """Entries of ``endingTimestamp``'s own millisecond (two per odd ms here) are left out,
    those of ``startingTimestamp``'s read; entries added after planning are not read."""
    orders = fill(r, f"{prefix}:orders", 100)
    payments = fill(r, f"{prefix}:payments", 100)
    start, end = T0 + 210, T0 + 410  # 210 and 410 are odd steps: two entries each
    partitions = reader_of(
        redis_url, prefix, startingTimestamp=str(start), endingTimestamp=str(end)
    ).partitions()
    r.xadd(f"{prefix}:orders", {"topic": "orders", "payload": "{}"})
    expected = in_window(orders, start, end) + in_window(payments, start, end)
    assert sorted(ids_read(partitions)) == sorted(expected)
    assert len(expected) == 2 * 30 and f"{T0 + 410}-0" not in expected


def test_an_ending_timestamp_alone_reads_from_the_first_entry(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    orders = fill(r, f"{prefix}:orders", 50)
    reader = reader_of(redis_url, prefix, endingTimestamp=str(T0 + 100))
    assert ids_read(reader.partitions()) == in_window(orders, 0, T0 + 100)
    nothing = reader_of(redis_url, prefix, endingTimestamp="0")
    assert ids_read(nothing.partitions()) == []
    everything = reader_of(redis_url, prefix, endingTimestamp=str(T0 + 10**6))
    assert ids_read(everything.partitions()) == orders


@pytest.mark.parametrize(
    "window",
    [
        {"startingTimestamp": str(T0 + 200), "endingTimestamp": str(T0 + 300)},
        {
            "startingOffsets": f'{{"orders": "{T0 + 190}-1"}}',
            "endingOffsets": f'{{"orders": "{T0 + 290}-1"}}',
        },
    ],
    ids=["timestamps", "offsets"],
)
def test_removals_outside_the_window_after_planning_are_no_loss_and_inside_it_are(
    r: redis.Redis, redis_url: str, prefix: str, window: dict[str, str]
) -> None:
    """The window's end is before the stream's newest entry, so Redis's counters cannot count
    it: an XDEL past it or a trim below it is never taken for the window's own loss, and one
    inside it is reported exactly."""
    orders = fill(r, f"{prefix}:orders", 100)
    expected = in_window(orders, T0 + 200, T0 + 300)
    for remove in (
        lambda: r.xdel(f"{prefix}:orders", f"{T0 + 500}-0"),
        lambda: r.xtrim(f"{prefix}:orders", minid=f"{T0 + 100}-0", approximate=False),
        lambda: r.xdel(f"{prefix}:orders", f"{T0 + 150}-0", f"{T0 + 700}-0"),
    ):
        partitions = reader_of(redis_url, prefix, **window).partitions()
        assert remove()
        assert ids_read(partitions) == expected
    partitions = reader_of(redis_url, prefix, **window).partitions()
    r.xdel(f"{prefix}:orders", f"{T0 + 250}-0")
    with pytest.raises(DataLossError, match=f"{prefix}:orders") as caught:
        ids_read(partitions)
    assert "1 entry after" in str(caught.value)


def test_a_streaming_query_refuses_an_ending_timestamp() -> None:
    parsed = parse_source_options(
        {"url": "redis://localhost:1", "topics": "a", "endingTimestamp": "1700000000000"}
    )
    with pytest.raises(ConfigurationError, match="'endingTimestamp' is for batch reads"):
        require_streaming_compatible(parsed)


@pytest.mark.parametrize(
    "window",
    [
        {"endingTimestamp": str(T0)},  # before the first entry
        {"startingTimestamp": str(T0 + 201), "endingTimestamp": str(T0 + 210)},  # between two
        {"startingTimestamp": str(T0 + 200), "endingTimestamp": str(T0 + 200)},  # no time at all
        {"endingOffsets": f'{{"orders": "{T0 - 1}-0", "payments": "{T0 - 1}-0"}}'},
        {  # after one entry, before the next
            "startingOffsets": f'{{"orders": "{T0 + 980}-0", "payments": "{T0 + 980}-0"}}',
            "endingOffsets": f'{{"orders": "{T0 + 985}-0", "payments": "{T0 + 985}-0"}}',
        },
    ],
    ids=[
        "before-first",
        "between-entries",
        "start-is-end",
        "offsets-before-first",
        "offsets-between-entries",
    ],
)
def test_an_empty_window_reads_nothing_and_reports_no_loss_for_removals_after_planning(
    r: redis.Redis, redis_url: str, prefix: str, window: dict[str, str]
) -> None:
    """A window that holds no entry is known empty at planning: XDELs past it and trims of
    the whole stream, by another client between planning and the read, are no loss of it."""
    fill(r, f"{prefix}:orders", 100)
    fill(r, f"{prefix}:payments", 100)
    for remove in (
        lambda: r.xdel(f"{prefix}:orders", f"{T0 + 990}-0", f"{T0 + 990}-1"),
        lambda: r.xdel(f"{prefix}:orders", f"{T0 + 500}-0", f"{T0 + 700}-0"),
        lambda: r.xdel(f"{prefix}:payments", f"{T0}-0"),
        lambda: r.xtrim(f"{prefix}:orders", maxlen=10, approximate=False),
    ):
        partitions = reader_of(redis_url, prefix, **window).partitions()
        assert remove()
        assert ids_read(partitions) == []
