"""A consumer group's pending entries as a DataFrame (option ``pendingOf``).

The fixture builds a known pending entries list: two streams, a group read by two consumers,
some entries acknowledged, each pending entry claimed with a chosen consumer, idle time and
delivery count (XCLAIM IDLE/RETRYCOUNT), one of them then deleted (XDEL) and one malformed.
``idle_ms`` grows with the clock, so it is checked against the idle time set (at least that,
and less than a minute more); every other column is checked exactly.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pyarrow as pa
import pytest
import redis

from atlasbus.errors import ConfigurationError
from atlasbus.model.read_schema import pending_schema, spark_ddl
from atlasbus.operations.pending import (
    ENTRY_DELETED,
    PendingRead,
    plan_pending,
    read_pending,
)
from atlasbus.options.source import SourceOptions, parse_source_options
from helpers import envelope

GROUP = "workers"
ENQUEUED = "1700000000.5"
# The idle time a row may have gained beyond the one set while the test runs (a clock bound,
# not a speed assertion).
IDLE_SLACK_MS = 60_000

# (topic, entry ID, consumer, idle ms, delivery count) set with XCLAIM on every pending entry.
CLAIMS = [
    ("a", "1000-0", "alice", 60_000, 3),
    ("a", "1002-0", "bob", 120_000, 5),  # delivered to alice, claimed by bob
    ("a", "1003-0", "alice", 1_000, 1),  # deleted afterwards
    ("a", "1004-0", "bob", 30_000, 2),  # malformed payload
    ("b", "2000-0", "alice", 10_000, 4),
    ("b", "2001-0", "alice", 20_000, 1),
]
DELETED = "1003-0"
MALFORMED = "1004-0"


def bus_entry(topic: str, n: int) -> dict[str, str]:
    made = envelope(topic, n, correlation_id=f"{topic}-{n}", enqueued_time=ENQUEUED)
    fields = {name: str(value) for name, value in made.items()}
    if f"{1000 + n}-0" == MALFORMED and topic == "a":
        fields["payload"] = "not json"
    return fields


def build_pending(r: redis.Redis, prefix: str) -> None:
    """Streams a (1000-0..1005-0) and b (2000-0, 2001-0); group ``workers`` pending as CLAIMS."""
    a, b = f"{prefix}:a", f"{prefix}:b"
    for n in range(6):
        r.xadd(a, bus_entry("a", n), id=f"{1000 + n}-0")
    for n in range(2):
        r.xadd(b, bus_entry("b", n), id=f"{2000 + n}-0")
    for stream in (a, b):
        r.xgroup_create(stream, GROUP, id="0")
    r.xreadgroup(GROUP, "alice", {a: ">"}, count=4)
    r.xreadgroup(GROUP, "bob", {a: ">"})
    r.xreadgroup(GROUP, "alice", {b: ">"})
    r.xack(a, GROUP, "1001-0", "1005-0")
    for topic, entry_id, consumer, idle, count in CLAIMS:
        stream = f"{prefix}:{topic}"
        claimed = r.xclaim(
            stream, GROUP, consumer, 0, [entry_id], idle=idle, retrycount=count, justid=True
        )
        assert claimed == [entry_id.encode()]
    r.xdel(a, DELETED)


def expected(prefix: str, read_format: str = "envelope") -> list[dict[str, Any]]:
    """The exact rows of ``pendingOf=workers`` over topics a, b (idle_ms: the one set)."""
    rows = []
    for topic, entry_id, consumer, idle, count in CLAIMS:
        n = int(entry_id.split("-")[0]) % 1000
        fields = bus_entry(topic, n)
        deleted = topic == "a" and entry_id == DELETED
        row: dict[str, Any] = {
            "topic": topic,
            "stream": f"{prefix}:{topic}",
            "id": entry_id,
            "consumer": consumer,
            "idle_ms": idle,
            "delivery_count": count,
            "entry_deleted": deleted,
            "timestamp": int(entry_id.split("-")[0]) / 1000,
        }
        if read_format == "raw":
            row["fields"] = None if deleted else fields
        elif deleted:
            row.update(dict.fromkeys(ENVELOPE_TAIL, None), error=ENTRY_DELETED)
        elif entry_id == MALFORMED and topic == "a":
            row.update(dict.fromkeys(ENVELOPE_TAIL, None))
            row.update(error="field 'payload' is not valid JSON: 'not json'", fields=fields)
        else:
            row.update(
                priority=n,
                correlation_id=f"{topic}-{n}",
                payload=fields["payload"],
                tracing={"trace_id": f"trace-{n}"},
                metadata={},
                delivery_attempts=0,
                enqueued_time=float(ENQUEUED),
                error=None,
                fields=None,
            )
        rows.append(row)
    return rows


ENVELOPE_TAIL = (
    "priority",
    "correlation_id",
    "payload",
    "tracing",
    "metadata",
    "delivery_attempts",
    "enqueued_time",
    "error",
    "fields",
)


def normal(row: dict[str, Any]) -> dict[str, Any]:
    """A row from Arrow or from Spark in one form: maps as dicts, times as epoch seconds."""
    out = {}
    for key, value in row.items():
        if isinstance(value, list):  # an Arrow map
            value = dict(value)
        elif isinstance(value, datetime):  # aware from Arrow, local naive from Spark
            value = value.timestamp()
        out[key] = value
    return out


def check_rows(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Exact rows, sorted by stream and ID; idle_ms at least the idle set, within the slack."""
    got = sorted(map(normal, got), key=lambda row: (row["stream"], row["id"]))
    assert [row["id"] for row in got] == [row["id"] for row in want]
    for row, wanted in zip(got, want, strict=True):
        assert wanted["idle_ms"] <= row["idle_ms"] < wanted["idle_ms"] + IDLE_SLACK_MS, row
        assert {**row, "idle_ms": wanted["idle_ms"]} == wanted


def options(
    redis_url: str, prefix: str, subscription: dict[str, str] | None = None, /, **extra: str
) -> SourceOptions:
    given = {"url": redis_url, "streamPrefix": prefix, "pendingOf": GROUP}
    return parse_source_options({**given, **(subscription or {"topics": "a,b"}), **extra})


def read_all(chosen: SourceOptions) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for read in plan_pending(chosen):
        for batch in read_pending(chosen, read):
            assert batch.schema == pending_schema(chosen.format)
            rows.extend(batch.to_pylist())
    return rows


def pending_frame(spark: Any, redis_url: str, prefix: str, **extra: str) -> Any:
    reader = spark.read.format("atlasbus")
    for key, value in {
        "url": redis_url,
        "streamPrefix": prefix,
        "topics": "a,b",
        "pendingOf": GROUP,
        **extra,
    }.items():
        reader = reader.option(key, value)
    return reader.load()


def no_group_message(prefix: str, group: str) -> str:
    return (
        f"option 'pendingOf': consumer group {group!r} does not exist on any stream of the "
        f"subscription (topics a, b; streams checked: {prefix}:a, {prefix}:b). Check the group "
        "name (XINFO GROUPS <stream> lists a stream's groups) and options "
        "'topics'/'topicPattern'/'streams' and 'streamPrefix'"
    )


# --- the core, without Spark -----------------------------------------------------------------


def test_plan_is_one_read_per_stream_with_its_pending_count(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    build_pending(r, prefix)
    assert plan_pending(options(redis_url, prefix)) == [
        PendingRead(f"{prefix}:a", "a", GROUP, 4),
        PendingRead(f"{prefix}:b", "b", GROUP, 2),
    ]


@pytest.mark.parametrize("page_size", ["1", "2", "1000"])
def test_rows_are_exact_whatever_the_page_size(
    r: redis.Redis, redis_url: str, prefix: str, page_size: str
) -> None:
    build_pending(r, prefix)
    check_rows(read_all(options(redis_url, prefix, pageSize=page_size)), expected(prefix))


def test_raw_format_and_raw_fields(r: redis.Redis, redis_url: str, prefix: str) -> None:
    build_pending(r, prefix)
    check_rows(read_all(options(redis_url, prefix, format="raw")), expected(prefix, "raw"))
    with_fields = read_all(options(redis_url, prefix, includeRawFields="true"))
    by_id = {row["id"]: dict(row["fields"] or []) for row in with_fields}
    assert by_id["2001-0"] == bus_entry("b", 1)
    assert by_id[DELETED] == {}


def test_a_group_on_some_streams_lists_those_and_a_pattern_skips_the_rest(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    build_pending(r, prefix)
    r.xgroup_create(f"{prefix}:b", "audit", id="0")
    r.xreadgroup("audit", "carol", {f"{prefix}:b": ">"}, count=1)
    for subscription in ({"topics": "a,b,absent"}, {"topicPattern": "*"}):
        chosen = options(redis_url, prefix, subscription, pendingOf="audit")
        rows = read_all(chosen)
        facts = [(row["stream"], row["id"], row["consumer"], row["delivery_count"]) for row in rows]
        assert facts == [(f"{prefix}:b", "2000-0", "carol", 1)]


def test_a_group_on_no_stream_is_an_error_naming_it_and_the_streams(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    build_pending(r, prefix)
    with pytest.raises(ConfigurationError) as info:
        plan_pending(options(redis_url, prefix, pendingOf="wokers"))
    assert str(info.value) == no_group_message(prefix, "wokers")
    # A pattern that matches no stream has nothing to list: an empty result, as a read gives.
    assert plan_pending(options(redis_url, prefix, {"topicPattern": "zz*"})) == []


def test_a_group_destroyed_after_planning_gives_the_rows_read_so_far(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    build_pending(r, prefix)
    chosen = options(redis_url, prefix)
    reads = plan_pending(chosen)
    r.xgroup_destroy(f"{prefix}:a", GROUP)
    rows = {read.stream: sum(b.num_rows for b in read_pending(chosen, read)) for read in reads}
    assert rows == {f"{prefix}:a": 0, f"{prefix}:b": 2}


def test_a_key_that_is_not_a_stream_is_named(r: redis.Redis, redis_url: str, prefix: str) -> None:
    r.set(f"{prefix}:a", "x")
    with pytest.raises(ConfigurationError, match=f"key '{prefix}:a' on Redis at .* is not a"):
        plan_pending(options(redis_url, prefix))


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"startingOffsets": '{"a": "1-0"}'}, "startingOffsets"),
        ({"startingTimestamp": "5"}, "startingTimestamp"),
        ({"endingOffsets": '{"a": "1-0"}'}, "endingOffsets"),
        ({"group": "workers"}, "group"),
        ({"deadLetterTable": "/tmp/never-written"}, "deadLetterTable"),
    ],
)
def test_options_a_pending_read_would_ignore_are_refused(
    redis_url: str, extra: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        options(redis_url, "p", **extra)
    assert str(info.value) == (
        f"option '{named}' does not apply with option 'pendingOf': a pending read lists the "
        "whole pending entries list of the group named by pendingOf, with malformed entries as "
        f"rows whose 'error' says why; remove '{named}'"
    )


# --- through Spark ---------------------------------------------------------------------------


def test_pending_dataframe_has_exact_rows(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    build_pending(r, prefix)
    frame = pending_frame(spark, redis_url, prefix)
    ddl = spark_ddl(pending_schema("envelope")).replace("`", "")
    assert frame.dtypes == [tuple(column.split(" ")) for column in ddl.split(", ")]
    check_rows([row.asDict() for row in frame.collect()], expected(prefix))
    raw = pending_frame(spark, redis_url, prefix, format="raw")
    check_rows([row.asDict() for row in raw.collect()], expected(prefix, "raw"))


def test_pending_dataframe_errors(spark: Any, r: redis.Redis, redis_url: str, prefix: str) -> None:
    build_pending(r, prefix)
    with pytest.raises(Exception) as info:
        pending_frame(spark, redis_url, prefix, pendingOf="wokers").collect()
    assert no_group_message(prefix, "wokers") in str(info.value)
    with pytest.raises(Exception) as info:
        pending_frame(spark, redis_url, prefix, group="workers")
    assert "option 'group' does not apply with option 'pendingOf'" in str(info.value)
    stream = (
        spark.readStream.format("atlasbus")
        .option("url", redis_url)
        .option("topics", "a")
        .option("pendingOf", GROUP)
    )
    frame = stream.load()  # a Python source's schema() cannot tell a stream from a batch
    with pytest.raises(Exception) as info:
        frame.writeStream.format("noop").start().awaitTermination(30)
    assert (
        "option 'pendingOf' is for batch reads (spark.read) only: it lists a group's pending "
        "entries as they are now; read it with spark.read"
    ) in str(info.value)


def test_pending_schema_columns() -> None:
    assert pending_schema("raw").names == [
        "topic",
        "stream",
        "id",
        "consumer",
        "idle_ms",
        "delivery_count",
        "entry_deleted",
        "timestamp",
        "fields",
    ]
    assert pending_schema("envelope").field("idle_ms").type == pa.int64()
