"""Filter pushdown without Spark: the bounds' arithmetic, the filters' translation, and the
planning of a pushed batch read against a real Redis (data loss in and outside the window).

The same reads through Spark, row for row against the unpushed query: test_pushdown_spark.py.
"""

from __future__ import annotations

import datetime
import itertools
import re

import pytest
import redis
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from atlasbus.decoding import decoder
from atlasbus.errors import ConfigurationError, DataLossError
from atlasbus.model.entry_id import MAX_SEQ, ZERO, EntryId
from atlasbus.options.source import (
    parse_source_options,
    require_batch_compatible,
    require_streaming_compatible,
)
from atlasbus.planning.pushdown import (
    LAST_TIMESTAMP_MS,
    MAX_ID,
    PushedBounds,
    after_time,
    canonical_id,
    narrow,
    text_bounds,
    upto_time,
)
from pyspark_atlasbus.batch_reader import AtlasbusFilteringBatchReader
from pyspark_atlasbus.partition import RangePartition, read_partition
from pyspark_atlasbus.pushed_filters import push

UTC = datetime.UTC
T0 = 1_700_000_000_000  # ms of the first entry in the Redis tests


def at_micros(micros: int, tz: datetime.tzinfo = UTC) -> datetime.datetime:
    """The aware datetime Spark passes for a timestamp literal of ``micros``."""
    epoch = datetime.datetime(1970, 1, 1, tzinfo=UTC)
    return (epoch + datetime.timedelta(microseconds=micros)).astimezone(tz)


def test_the_last_timestamp_is_the_decoders() -> None:
    assert LAST_TIMESTAMP_MS == decoder._MAX_ID_MS


@pytest.mark.parametrize("inclusive", [True, False])
def test_time_bounds_keep_exactly_the_ids_whose_timestamp_passes(inclusive: bool) -> None:
    """Every ID ms near each time, before 1970 included: the bound agrees with ``ms * 1000``."""
    times = [t for base in (-3000, -1, 0, 999, 1000, 1001, 5_000_500) for t in (base, base + 1)]
    for micros, ms in itertools.product(times, range(0, 5_010)):
        for seq in (0, 1, MAX_SEQ):
            entry = EntryId(ms, seq)
            if entry == ZERO:
                continue  # no entry has ID 0-0: Redis refuses it
            above = ms * 1000 >= micros if inclusive else ms * 1000 > micros
            below = ms * 1000 <= micros if inclusive else ms * 1000 < micros
            assert (entry > after_time(micros, inclusive=inclusive)) == above, (micros, ms)
            upto = upto_time(micros, inclusive=inclusive)
            assert (upto is not None and entry <= upto) == below, (micros, ms)


def test_canonical_ids_are_the_texts_redis_writes() -> None:
    assert canonical_id("1700000000000-5") == EntryId(1700000000000, 5)
    assert canonical_id("0-1") == EntryId(0, 1)
    for text in ("07-0", "7", "7-", "-7", " 7-0", "7-0 ", "7-00", "+7-0", "7-0-0", "٣-0", ""):
        assert canonical_id(text) is None, text
    assert canonical_id(f"{2**64}-0") is None
    assert canonical_id(f"5-{2**64}") is None  # Redis refuses it in XRANGE: no entry has it
    assert canonical_id(f"{2**64 - 1}-{2**64 - 1}") == EntryId(2**64 - 1, 2**64 - 1)


TEXT_OPS = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}


@pytest.mark.parametrize("op", sorted(TEXT_OPS))
def test_text_bounds_hold_every_id_whose_text_passes(op: str) -> None:
    """Every ID of 3-digit ms: an ``id`` text passing the comparison lies in the bounds."""
    texts = ["150", "150-3", "150-", "15", "1", "15a", "999-99", "100", "099-1", "abc", "", "-"]
    texts += ["500-10", "500-9", "5000", "٣٣٣", "1500-0"]
    narrowed = 0
    for text in texts:
        after, upto = text_bounds(((op, text),), 100, 999)
        narrowed += (after, upto) != (ZERO, MAX_ID)
        for ms, seq in itertools.product(range(100, 1000), (0, 9, 10)):
            if TEXT_OPS[op](f"{ms}-{seq}", text):
                assert after < EntryId(ms, seq) <= upto, (text, ms, seq)
    assert narrowed == 10  # the texts whose first 3 characters are ASCII digits
    # IDs whose ms have different numbers of digits: nothing is narrowed
    assert text_bounds(((op, "150-0"),), 99, 150) == (ZERO, MAX_ID)


def test_bounds_intersect_and_keep_streams() -> None:
    bounds = PushedBounds().with_ids(after=EntryId(5), upto=EntryId(9)).with_ids(upto=EntryId(7))
    assert (bounds.after, bounds.upto) == (EntryId(5), EntryId(7))
    assert bounds.with_ids(after=EntryId(8)).empty
    named = PushedBounds().with_topics(["a", "b"]).with_topics(["b", "c"])
    assert named.topics == {"b"}
    assert named.keeps("p:b", "b") and not named.keeps("p:a", "a")
    assert not named.with_streams(["p:a"]).keeps("p:b", "b")
    assert PushedBounds().with_topics([]).empty
    assert not PushedBounds().narrows and named.narrows


def test_narrow_intersects_the_offsets_and_drops_streams() -> None:
    bounds = PushedBounds(after=EntryId(20), upto=EntryId(30)).with_topics(["a", "b"])
    topic_of = {"p:a": "a", "p:b": "b", "p:c": "c"}
    start = {"p:a": EntryId(25)}
    end = {"p:a": EntryId(100), "p:b": EntryId(10), "p:c": EntryId(100)}
    new_start, new_end = narrow(bounds, start, end, topic_of)
    assert new_start == {"p:a": EntryId(25), "p:b": EntryId(20)}
    # p:b's intersection is empty: it ends where it starts; p:c is not kept at all
    assert new_end == {"p:a": EntryId(30), "p:b": EntryId(20)}


def test_push_applies_exact_filters_and_hands_back_the_rest() -> None:
    t = (T0 + 1000) * 1000
    window = [
        GreaterThanOrEqual(("timestamp",), at_micros(t)),
        LessThan(
            ("timestamp",), at_micros(t + 5_000_000, datetime.timezone(datetime.timedelta(hours=5)))
        ),
        IsNotNull(("timestamp",)),
        EqualTo(("topic",), "orders"),
        In(("stream",), ("p:orders", "p:payments")),
        IsNotNull(("id",)),
        EqualTo(("priority",), 3),
        GreaterThan(("id",), "1700000000000-0"),
        Not(EqualTo(("topic",), "payments")),
        StringStartsWith(("topic",), "ord"),
        In(("timestamp",), (at_micros(t), at_micros(t + 2000))),
    ]
    pushed = push(window)
    assert pushed.applied == window[:6]
    assert pushed.to_spark == window[6:]
    bounds = pushed.bounds
    assert bounds.after == EntryId(T0 + 1000).predecessor()
    assert bounds.upto == EntryId(T0 + 1002, MAX_SEQ)  # the IN's last value
    assert bounds.topics == {"orders"} and bounds.streams == {"p:orders", "p:payments"}


@pytest.mark.parametrize(
    ("one", "after", "upto", "exact"),
    [
        (
            GreaterThan(("timestamp",), at_micros(1_500)),
            EntryId(1, MAX_SEQ),
            EntryId(LAST_TIMESTAMP_MS, MAX_SEQ),
            True,
        ),
        (LessThanOrEqual(("timestamp",), at_micros(1_500)), ZERO, EntryId(1, MAX_SEQ), True),
        (LessThan(("timestamp",), at_micros(-1)), MAX_ID, ZERO, True),  # before 1970: nothing
        (EqualTo(("timestamp",), at_micros(2_000)), EntryId(1, MAX_SEQ), EntryId(2, MAX_SEQ), True),
        (EqualTo(("timestamp",), at_micros(2_001)), EntryId(2, MAX_SEQ), EntryId(2, MAX_SEQ), True),
        (
            EqualNullSafe(("timestamp",), at_micros(2_000)),
            EntryId(1, MAX_SEQ),
            EntryId(2, MAX_SEQ),
            True,
        ),
        (IsNull(("timestamp",)), EntryId(LAST_TIMESTAMP_MS, MAX_SEQ), MAX_ID, True),
        (EqualTo(("id",), "5-3"), EntryId(5, 2), EntryId(5, 3), True),
        (EqualTo(("id",), "05-3"), MAX_ID, ZERO, True),  # no entry's id reads so
        (In(("id",), ("9-0", "5-3", "x")), EntryId(5, 2), EntryId(9, 0), False),
        (EqualTo(("id",), 5), ZERO, MAX_ID, None),  # not text: Spark's
        (GreaterThanOrEqual(("id",), "5-0"), ZERO, MAX_ID, None),  # text order, not ID order
        (EqualTo(("timestamp",), datetime.datetime(2024, 1, 1)), ZERO, MAX_ID, None),  # naive
        (EqualNullSafe(("topic",), None), ZERO, MAX_ID, None),
        (In(("topic",), ("a", None)), ZERO, MAX_ID, None),
        (EqualTo(("fields", "x"), "y"), ZERO, MAX_ID, None),
    ],
)
def test_each_filter_narrows_exactly_or_goes_back_to_spark(
    one: object, after: EntryId, upto: EntryId, exact: bool | None
) -> None:
    pushed = push([one])  # type: ignore[list-item]
    assert (pushed.bounds.after, pushed.bounds.upto) == (after, upto)
    assert pushed.applied == ([one] if exact else [])
    assert pushed.to_spark == ([] if exact else [one])


def test_filter_pushdown_option_is_a_checked_boolean_for_batch_reads() -> None:
    base = {"url": "redis://localhost:1/0", "topics": "a"}
    assert parse_source_options(base).filter_pushdown is None  # not given: on
    assert parse_source_options({**base, "FILTERPUSHDOWN": " False "}).filter_pushdown is False
    given = parse_source_options({**base, "filterPushdown": "true"})
    assert given.filter_pushdown is True
    require_batch_compatible(given)
    with pytest.raises(
        ConfigurationError,
        match=re.escape("option 'filterPushdown' is for batch reads (spark.read) only"),
    ):
        require_streaming_compatible(given)
    with pytest.raises(
        ConfigurationError, match="option 'filterPushdown' must be 'true' or 'false', got 'no'"
    ):
        parse_source_options({**base, "filterPushdown": "no"})


# --- planning against Redis ------------------------------------------------------------------


def fill(r: redis.Redis, stream: str, count: int, *, step_ms: int = 10) -> list[str]:
    """``count`` entries ``T0 + i * step_ms``, two per ms for odd i; returns their IDs."""
    ids = []
    pipe = r.pipeline(transaction=False)
    for i in range(count):
        for seq in range(1 + i % 2):
            pipe.xadd(
                stream,
                {"topic": stream.split(":")[1], "payload": f'{{"n": {i}}}'},
                id=f"{T0 + i * step_ms}-{seq}",
            )
    ids = [i.decode() for i in pipe.execute()]
    return ids


def planned_reader(
    redis_url: str, prefix: str, filters: list[object], **options: str
) -> AtlasbusFilteringBatchReader:
    reader = AtlasbusFilteringBatchReader(
        parse_source_options(
            {"url": redis_url, "streamPrefix": prefix, "topics": "orders,payments", **options}
        )
    )
    assert reader.pushFilters(filters) == []  # type: ignore[arg-type]
    return reader


def window(first_ms: int, last_ms: int) -> list[object]:
    """``timestamp >= first_ms and timestamp <= last_ms``, as Spark pushes it."""
    return [
        GreaterThanOrEqual(("timestamp",), at_micros(first_ms * 1000)),
        LessThanOrEqual(("timestamp",), at_micros(last_ms * 1000)),
    ]


def read_ids(reader: AtlasbusFilteringBatchReader) -> list[str]:
    ids = []
    for partition in reader.partitions():
        for batch in read_partition(partition):
            ids.extend(batch.column("id").to_pylist())
    return ids


def test_a_window_plans_only_its_range_of_the_kept_streams(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    ids = fill(r, f"{prefix}:orders", 100)
    fill(r, f"{prefix}:payments", 100)
    reader = planned_reader(
        redis_url, prefix, [*window(T0 + 200, T0 + 290), EqualTo(("topic",), "orders")]
    )
    partitions = reader.partitions()
    assert all(isinstance(p, RangePartition) for p in partitions)
    ranges = {(p.read.stream, str(p.read.after), str(p.read.upto)) for p in partitions}  # type: ignore[attr-defined]
    # the start is the entry before the window, the end its last possible ID
    assert ranges == {(f"{prefix}:orders", f"{T0 + 190}-1", f"{T0 + 290}-{MAX_SEQ}")}
    expected = [i for i in ids if T0 + 200 <= int(i.split("-")[0]) <= T0 + 290]
    assert read_ids(reader) == expected and len(expected) == 15


def test_starting_and_ending_offsets_intersect_the_window(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    ids = fill(r, f"{prefix}:orders", 100)
    starting = f'{{"orders": "{T0 + 250}-0"}}'
    ending = f'{{"orders": "{T0 + 400}-0"}}'
    reader = planned_reader(
        redis_url,
        prefix,
        [*window(T0 + 200, T0 + 600), EqualTo(("topic",), "orders")],
        startingOffsets=starting,
        endingOffsets=ending,
    )
    expected = [i for i in ids if (T0 + 250, 0) < tuple(map(int, i.split("-"))) <= (T0 + 400, 0)]
    assert read_ids(reader) == expected and len(expected) == 23


def test_trimmed_history_before_the_window_is_no_loss(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """startingOffsets names an entry since trimmed, and the window starts before the stream's
    first entry: as the unpushed read, nothing is reported lost."""
    ids = fill(r, f"{prefix}:orders", 100)
    r.xtrim(f"{prefix}:orders", minid=f"{T0 + 500}-0", approximate=False)
    reader = planned_reader(
        redis_url,
        prefix,
        [*window(T0 + 100, T0 + 700), EqualTo(("topic",), "orders")],
        startingOffsets=f'{{"orders": "{T0 + 50}-0"}}',
    )
    assert read_ids(reader) == [i for i in ids if T0 + 500 <= int(i.split("-")[0]) <= T0 + 700]


def test_an_entry_deleted_in_the_window_after_planning_is_reported_lost(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    ids = fill(r, f"{prefix}:orders", 100)
    reader = planned_reader(
        redis_url, prefix, [*window(T0 + 200, T0 + 290), EqualTo(("topic",), "orders")]
    )
    partitions = reader.partitions()
    r.xdel(f"{prefix}:orders", f"{T0 + 250}-0")
    with pytest.raises(DataLossError, match=f"{prefix}:orders") as caught:
        for partition in partitions:
            list(read_partition(partition))
    # the window was counted at planning: the count is exact
    assert f"1 entry after {T0 + 190}-1 and before {T0 + 291}-0 was removed" in str(caught.value)
    assert len(ids) == 150


def test_a_trim_before_or_an_xdel_after_the_window_after_planning_is_no_loss(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """A window is counted at planning, so removals outside it are never taken for its own:
    a trim below it, a lone XDEL past it, or XDELs on both sides of it."""
    ids = fill(r, f"{prefix}:orders", 100)
    expected = [i for i in ids if T0 + 200 <= int(i.split("-")[0]) <= T0 + 290]
    filters = [*window(T0 + 200, T0 + 290), EqualTo(("topic",), "orders")]
    for remove in (
        lambda: r.xtrim(f"{prefix}:orders", minid=f"{T0 + 100}-0", approximate=False),
        lambda: r.xdel(f"{prefix}:orders", f"{T0 + 500}-0"),
        lambda: r.xdel(f"{prefix}:orders", f"{T0 + 120}-0", f"{T0 + 600}-0"),
    ):
        partitions = planned_reader(redis_url, prefix, filters).partitions()
        assert remove()
        rows = [
            i for p in partitions for b in read_partition(p) for i in b.column("id").to_pylist()
        ]
        assert rows == expected
