"""Filter pushdown through Spark: each query's rows equal the same query's with
``filterPushdown=false``, and Redis's MONITOR shows the pushed one read only its window.

Spark hands a Python data source filters only with ``spark.sql.python.filterPushdown.enabled``
(pyspark 4.2+); the fixture below turns it on for this file and back off after it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from atlasbus.sandbox.redis_monitor import CommandMonitor

T0 = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC
PAGE = 97  # the reads' XRANGE COUNT, told apart from planning's by it
DAY = "2023-11-14 22:13:"


def entries_read(monitor: CommandMonitor, r: redis.Redis, *, reads_only: bool) -> int:
    """Entries Redis returned to the XRANGE/XREVRANGE commands seen (run again: the streams
    have not changed); ``reads_only``: only the tasks' reads (COUNT ``PAGE``)."""
    total = 0
    for parts in monitor.split("XRANGE", "XREVRANGE"):
        if reads_only and parts[-2:] != ["COUNT", str(PAGE)]:
            continue
        total += len(r.execute_command(*parts))
    return total


@pytest.fixture(scope="module")
def pushdown_on(spark: Any) -> Iterator[Any]:
    conf = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(conf)
    spark.conf.set(conf, "true")
    yield spark
    spark.conf.set(conf, before)


@pytest.fixture(scope="module")
def bus(redis_url: str) -> Iterator[tuple[str, list[tuple[str, int, int]]]]:
    """Two streams: orders, an entry every 10 ms over 3 s (two in odd ones), its entries of
    21.100-21.400 XDEL'd; payments, one every 30 ms. Yields the prefix and every entry left,
    as (topic, ms, seq)."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    client = redis.Redis.from_url(redis_url)
    entries: list[tuple[str, int, int]] = []
    pipe = client.pipeline(transaction=False)
    for topic, count, step, offset in (("orders", 300, 10, 0), ("payments", 100, 30, 5)):
        for i in range(count):
            ms = T0 + offset + i * step
            for seq in range(1 + (i % 2 if topic == "orders" else 0)):
                fields = {"topic": topic, "priority": str(i % 10), "payload": f'{{"n": {i}}}'}
                pipe.xadd(f"{prefix}:{topic}", fields, id=f"{ms}-{seq}")
                entries.append((topic, ms, seq))
    pipe.execute()
    gap = [e for e in entries if e[0] == "orders" and T0 + 1100 <= e[1] <= T0 + 1400]
    client.xdel(f"{prefix}:orders", *(f"{ms}-{seq}" for _, ms, seq in gap))
    client.close()
    yield prefix, [e for e in entries if e not in gap]


def load(spark: Any, url: str, prefix: str, **options: str) -> Any:
    reader = (
        spark.read.format("atlasbus")
        .option("url", url)
        .option("streamPrefix", prefix)
        .option("topics", "orders,payments")
        .option("pageSize", str(PAGE))
    )
    for key, value in {"filterPushdown": "true", **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def rows_of(frame: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in frame.drop("fields", "tracing", "metadata").collect())


def ms_in(first: int, last: int) -> Callable[[tuple[str, int, int]], bool]:
    return lambda e: T0 + first <= e[1] <= T0 + last


Entry = tuple[str, int, int]
CASES: list[tuple[str, str, Callable[[Entry], bool]]] = [
    # (name, the WHERE clause, the entries the pushed read must read: a superset of the rows)
    (
        "time window",
        f"timestamp >= '{DAY}20.500' and timestamp < '{DAY}21'",
        ms_in(500, 999),
    ),
    (
        "open lower, closed upper bound on entries' own ms",
        f"timestamp > '{DAY}20.500' and timestamp <= '{DAY}20.800'",
        ms_in(501, 800),
    ),
    (
        "bounds between two milliseconds",
        f"timestamp > '{DAY}20.5005' and timestamp < '{DAY}20.6405'",
        ms_in(501, 640),
    ),
    ("timestamp equality", f"timestamp = '{DAY}20.510'", ms_in(510, 510)),
    ("timestamp equality between milliseconds", f"timestamp = '{DAY}20.5105'", lambda e: False),
    ("id equality", f"id = '{T0 + 510}-1'", lambda e: (e[1], e[2]) == (T0 + 510, 1)),
    (
        "id IN with text no id has",
        f"id in ('{T0 + 510}-1', '{T0 + 2000}-0', 'junk', '0{T0 + 700}-0')",
        lambda e: (T0 + 510, 1) <= (e[1], e[2]) <= (T0 + 2000, 0),
    ),
    ("id text comparison", f"id > '{T0 + 2500}-1'", lambda e: e[1] >= T0 + 2500),
    ("id text comparisons both ways", f"id >= '{T0 + 20}' and id <= '{T0 + 50}-1'", ms_in(20, 50)),
    ("id text comparison too short to narrow", "id >= '17'", lambda e: True),
    ("topic IN", "topic in ('payments', 'nosuch')", lambda e: e[0] == "payments"),
    ("stream equality", "stream = '{prefix}:orders'", lambda e: e[0] == "orders"),
    ("no such topic", "topic = 'nosuch'", lambda e: False),
    (
        "conjunction with a column not pushed",
        f"topic = 'orders' and timestamp between '{DAY}20.100' and '{DAY}20.300' and priority = 3",
        lambda e: e[0] == "orders" and T0 + 100 <= e[1] <= T0 + 300,
    ),
    ("window before the first entry", f"timestamp < '{DAY}19.500'", lambda e: False),
    ("window after the last entry", f"timestamp >= '{DAY}30'", lambda e: False),
    (
        "window inside the XDEL'd gap",
        f"topic = 'orders' and timestamp between '{DAY}21.150' and '{DAY}21.350'",
        lambda e: False,
    ),
    ("only a column not pushed", "priority = 3 and payload like '%1%'", lambda e: True),
    ("NOT is Spark's", "not (topic = 'orders')", lambda e: True),
    ("OR is Spark's", f"topic = 'orders' or timestamp < '{DAY}20.100'", lambda e: True),
    ("timestamp IS NULL", "timestamp is null", lambda e: False),
    (
        "IN on timestamps narrows to its ends",
        f"timestamp in ('{DAY}20.400', '{DAY}20.420')",
        ms_in(400, 420),
    ),
]


@pytest.fixture(scope="module")
def unpushed(pushdown_on: Any, redis_url: str, bus: tuple[str, list[Entry]]) -> Iterator[Any]:
    """The bus read once with ``filterPushdown=false`` and kept: each case's unpushed query is
    its filter applied by Spark to these rows (the read takes every entry, as MONITOR shows)."""
    prefix, entries = bus
    frame = load(pushdown_on, redis_url, prefix, filterPushdown="false").cache()
    with CommandMonitor(redis_url) as commands:
        assert frame.count() == len(entries)
    with redis.Redis.from_url(redis_url) as r:
        assert entries_read(commands, r, reads_only=True) == len(entries)
    yield frame
    frame.unpersist()


@pytest.mark.parametrize(("name", "where", "window"), CASES, ids=[c[0] for c in CASES])
def test_pushed_rows_equal_unpushed_rows_and_only_the_window_is_read(
    pushdown_on: Any,
    r: redis.Redis,
    redis_url: str,
    bus: tuple[str, list[Entry]],
    unpushed: Any,
    name: str,
    where: str,
    window: Callable[[Entry], bool],
) -> None:
    prefix, entries = bus
    where = where.replace("{prefix}", prefix)
    with CommandMonitor(redis_url) as pushed_commands:
        pushed = rows_of(load(pushdown_on, redis_url, prefix).where(where))
    plain = rows_of(unpushed.where(where))
    assert pushed == plain, pushed_commands.commands
    in_window = sum(1 for e in entries if window(e))
    assert len(pushed) <= in_window
    assert entries_read(pushed_commands, r, reads_only=True) == in_window
    # planning counts the window once (so a loss in it is told exactly, and none outside it
    # is taken for one) and reads an entry or two per stream (the one before the window, the
    # first in it); the tasks read the window
    assert entries_read(pushed_commands, r, reads_only=False) <= 2 * in_window + 4


def test_a_window_by_starting_and_ending_timestamps_reads_only_the_window(
    spark: Any, r: redis.Redis, redis_url: str, bus: tuple[str, list[Entry]], unpushed: Any
) -> None:
    """The options window (no pushdown, no Spark setting: every pyspark line) gives the rows
    of the same window filtered by Spark, and the tasks read only the window."""
    prefix, entries = bus
    options = {"startingTimestamp": str(T0 + 500), "endingTimestamp": str(T0 + 1000)}
    with CommandMonitor(redis_url) as commands:
        frame = load(spark, redis_url, prefix, filterPushdown="false", **options)
        rows = rows_of(frame)
    where = f"timestamp >= '{DAY}20.500' and timestamp < '{DAY}21'"
    assert rows == rows_of(unpushed.where(where))
    in_window = [e for e in entries if T0 + 500 <= e[1] < T0 + 1000]
    assert len(rows) == len(in_window) == 75 + 17
    assert entries_read(commands, r, reads_only=True) == len(in_window)


def test_a_window_reads_the_same_as_starting_and_ending_offsets_intersected(
    pushdown_on: Any, redis_url: str, bus: tuple[str, list[Entry]]
) -> None:
    prefix, entries = bus
    options = {
        "startingOffsets": f'{{"orders": "{T0 + 600}-0"}}',
        "endingOffsets": f'{{"orders": "{T0 + 900}-1", "payments": "{T0 + 695}-0"}}',
    }
    where = f"timestamp >= '{DAY}20.500' and timestamp <= '{DAY}20.700'"
    pushed = rows_of(load(pushdown_on, redis_url, prefix, **options).where(where))
    plain = load(pushdown_on, redis_url, prefix, filterPushdown="false", **options)
    assert pushed == rows_of(plain.where(where))
    orders = [e for e in entries if e[0] == "orders" and (T0 + 600, 0) < e[1:] <= (T0 + 700, 1)]
    payments = [e for e in entries if e[0] == "payments" and T0 + 500 <= e[1] <= T0 + 695]
    assert len(pushed) == len(orders) + len(payments) == 15 + 7


def test_explain_shows_the_filters_pushed_and_spark_keeps_the_rest(
    pushdown_on: Any, redis_url: str, bus: tuple[str, list[Entry]], capsys: Any
) -> None:
    prefix, _ = bus
    frame = load(pushdown_on, redis_url, prefix).where(
        f"topic = 'orders' and timestamp > '{DAY}21' and priority = 3"
    )
    frame.explain("formatted")
    plan = capsys.readouterr().out
    pushed = next(line for line in plan.splitlines() if line.startswith("PushedFilters:"))
    assert pushed == (
        "PushedFilters: [IsNotNull(topic), IsNotNull(timestamp), EqualTo(topic,orders), "
        "GreaterThan(timestamp,2023-11-14 22:13:21.0)]"
    )
    condition = next(line for line in plan.splitlines() if line.startswith("Condition"))
    assert "priority" in condition and "topic" not in condition and "timestamp" not in condition


def test_without_spark_s_pushdown_setting_a_filtered_read_reads_everything_as_before(
    spark: Any, r: redis.Redis, redis_url: str, bus: tuple[str, list[Entry]]
) -> None:
    """pyspark's default: Spark passes no filter; the read works and reads every entry."""
    prefix, entries = bus
    conf = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(conf)
    spark.conf.set(conf, "false")
    try:
        where = f"topic = 'orders' and timestamp < '{DAY}20.050'"
        with CommandMonitor(redis_url) as commands:
            rows = rows_of(load(spark, redis_url, prefix).where(where))
    finally:
        spark.conf.set(conf, before)
    expected = [f"{ms}-{seq}" for t, ms, seq in entries if t == "orders" and ms < T0 + 50]
    assert [row[2] for row in rows] == sorted(expected) and len(expected) == 7
    assert entries_read(commands, r, reads_only=True) == len(entries)


@pytest.fixture(scope="module")
def pending_bus(bus: tuple[str, list[Entry]], redis_url: str) -> str:
    """Group ``billing`` on both streams: 200 orders and 40 payments delivered, none
    acknowledged, and a pending order of 20.600 deleted (its row keeps its ID's time)."""
    prefix, _ = bus
    client = redis.Redis.from_url(redis_url)
    for topic, count in (("orders", 200), ("payments", 40)):
        client.xgroup_create(f"{prefix}:{topic}", "billing", id="0")
        client.xreadgroup("billing", "w1", {f"{prefix}:{topic}": ">"}, count=count)
    client.xdel(f"{prefix}:orders", f"{T0 + 600}-0")
    client.close()
    return prefix


PENDING_CASES = [
    ("time window", "timestamp >= '{DAY}20.500' and timestamp < '{DAY}20.800'", 500, 799),
    ("orders only", "topic = 'orders' and timestamp < '{DAY}20.300'", 0, 299),
    ("an id", f"id = '{T0 + 610}-1'", 610, 610),
]


@pytest.mark.parametrize(("name", "where", "first", "last"), PENDING_CASES)
def test_pending_entries_pushed_equal_unpushed_and_list_only_the_window(
    pushdown_on: Any,
    r: redis.Redis,
    redis_url: str,
    pending_bus: str,
    name: str,
    where: str,
    first: int,
    last: int,
) -> None:
    prefix = pending_bus
    where = where.replace("{DAY}", DAY)

    def pending(**options: str) -> list[tuple[Any, ...]]:
        frame = load(pushdown_on, redis_url, prefix, pendingOf="billing", **options)
        return rows_of(frame.where(where).drop("idle_ms"))

    with CommandMonitor(redis_url) as pushed_commands:
        pushed = pending()
    plain = pending(filterPushdown="false")
    assert pushed == plain and len(pushed) > 0
    listed = [c.split(" ") for c in pushed_commands.commands if c.startswith("XPENDING")]
    fetched = [c for c in pushed_commands.commands if c.startswith("XRANGE")]
    # every list is read from the window's start to its end, and only its entries fetched
    ranged = [c for c in listed if len(c) > 3]
    assert ranged and all(c[4].startswith(str(T0 + last)) for c in ranged)
    assert all(c[3] == "-" or int(c[3].strip("(").split("-")[0]) >= T0 + first - 10 for c in ranged)
    assert len(fetched) == len(pushed)  # one XRANGE per pending entry listed
