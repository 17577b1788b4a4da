"""The sink: batch and streaming writes, read back by the source, on a real Redis and Spark."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis
from chispa import assert_df_equality

from atlasbus.errors import PublishError
from atlasbus.options.sink import parse_sink_options
from atlasbus.publishing.publisher import Publisher, marker_key
from helpers import publish, redis_major

pytestmark = pytest.mark.spark

ENVELOPE_COLUMNS = [
    "topic",
    "priority",
    "payload",
    "correlation_id",
    "tracing",
    "metadata",
    "delivery_attempts",
]
INPUT_SCHEMA = (
    "topic string, priority int, payload string, correlation_id string, "
    "tracing map<string,string>, metadata map<string,string>, delivery_attempts int"
)


def write(df: Any, redis_url: str, prefix: str, **options: str) -> None:
    writer = df.write.format("atlasbus").mode("append")
    writer = writer.option("url", redis_url).option("streamPrefix", prefix)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def read(spark: Any, redis_url: str, prefix: str, topics: str) -> Any:
    return (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", topics)
        .load()
    )


def markers(r: redis.Redis, prefix: str) -> list[str]:
    return sorted(k.decode() for k in r.scan_iter(match=f"{prefix}:__atlasbus_sink__:*"))


def every_column_rows(count: int) -> list[tuple[Any, ...]]:
    topics = ["orders", "payments", "événements"]
    rows = []
    for i in range(count):
        payload = {
            "n": i,
            "nested": {"list": [i, {"deep": "✓", "none": None}], "flag": i % 2 == 0},
            "text": 'événement 🚀 "quoted" \\ back',
        }
        tracing = {} if i % 3 == 0 else {"trace_id": f"trace-{i}", "span": "ü\n"}
        metadata = {} if i % 4 == 0 else {"k": 'v"q', "ключ": "значение", "empty": ""}
        rows.append(
            (
                topics[i % 3],
                i % 10,
                json.dumps(payload, ensure_ascii=False),
                f"corr-{i:05d}",
                tracing,
                metadata,
                i % 7,
            )
        )
    return rows


def test_round_trip_of_every_column_is_field_for_field(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    written = spark.createDataFrame(every_column_rows(10_000), INPUT_SCHEMA)
    before = time.time()
    write(written, redis_url, prefix)
    after = time.time()

    back = read(spark, redis_url, prefix, "orders,payments,événements")
    assert back.filter("error is not null").count() == 0
    assert_df_equality(
        back.select(*ENVELOPE_COLUMNS).orderBy("correlation_id"),
        written.orderBy("correlation_id"),
        ignore_nullable=True,
    )
    times = back.selectExpr(
        "min(unix_micros(enqueued_time)) / 1e6 as first",
        "max(unix_micros(enqueued_time)) / 1e6 as last",
    ).first()
    assert before - 0.001 <= times["first"] <= times["last"] <= after + 0.001
    assert {row["topic"]: row["count"] for row in back.groupBy("topic").count().collect()} == {
        "orders": 3334,
        "payments": 3333,
        "événements": 3333,
    }
    assert markers(r, prefix) == []  # a finished batch write leaves no markers behind


def test_struct_payload_and_defaults(spark: Any, redis_url: str, prefix: str) -> None:
    written = spark.range(50).selectExpr(
        "named_struct('n', id, 'tags', map('a', id), 'price', cast(id / 4 as decimal(6, 2))) "
        "as payload"
    )
    write(written, redis_url, prefix, topic="structs")
    back = read(spark, redis_url, prefix, "structs").collect()
    assert sorted((json.loads(row["payload"]) for row in back), key=lambda p: p["n"]) == [
        {"n": n, "tags": {"a": n}, "price": round(n / 4, 2)} for n in range(50)
    ]
    assert {(row["priority"], row["delivery_attempts"]) for row in back} == {(5, 0)}
    assert {(len(row["tracing"]), len(row["metadata"])) for row in back} == {(0, 0)}
    ids = [row["correlation_id"] for row in back]
    assert len(set(ids)) == 50
    assert all(len(i) == 32 and i[12] == "4" for i in ids)
    assert {row["error"] for row in back} == {None}


def test_topic_routing_by_column_with_option_for_nulls(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    written = spark.range(300).selectExpr(
        "to_json(named_struct('n', id)) as payload",
        "case when id % 3 = 0 then 'zero' when id % 3 = 1 then 'one' end as topic",
    )
    write(written, redis_url, prefix, topic="fallback")
    assert [r.xlen(f"{prefix}:{t}") for t in ("zero", "one", "fallback")] == [100, 100, 100]
    fallback = read(spark, redis_url, prefix, "fallback").collect()
    assert sorted(json.loads(row["payload"])["n"] % 3 for row in fallback) == [2] * 100
    assert {row["topic"] for row in fallback} == {"fallback"}


def test_topic_option_when_there_is_no_topic_column(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    write(
        spark.range(120).selectExpr("to_json(named_struct('n', id)) as payload"),
        redis_url,
        prefix,
        topic="only",
    )
    assert r.xlen(f"{prefix}:only") == 120
    assert sorted(
        json.loads(row["payload"])["n"] for row in read(spark, redis_url, prefix, "only").collect()
    ) == list(range(120))


def test_streaming_sink_routes_by_topic_and_retires_old_markers(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    publish(r, prefix, "in", 900)
    source = (
        spark.readStream.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "in")
        .option("maxEntriesPerTrigger", "300")
        .load()
        .selectExpr(
            "payload",
            "concat('out', cast(get_json_object(payload, '$.n') % 2 as string)) as topic",
            "priority",
            "correlation_id",
        )
    )
    query = (
        source.writeStream.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert (r.xlen(f"{prefix}:out0"), r.xlen(f"{prefix}:out1")) == (450, 450)
    numbers = [
        json.loads(fields[b"payload"])["n"]
        for topic in ("out0", "out1")
        for _, fields in r.xrange(f"{prefix}:{topic}")
    ]
    assert sorted(numbers) == list(range(900))
    # three micro-batches: only the last one's markers (and the registry) remain
    last = [m for m in markers(r, prefix) if not m.endswith(":markers")]
    assert last and {m.split(":")[-2] for m in last} == {"2"}
    assert len([m for m in markers(r, prefix) if m.endswith(":markers")]) == 1


def test_max_len_keeps_each_stream_near_its_cap(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    written = spark.range(6000).selectExpr(
        "to_json(named_struct('n', id)) as payload", "if(id % 2 = 0, 'even', 'odd') as topic"
    )
    write(written, redis_url, prefix, maxLen="500")
    for topic in ("even", "odd"):
        length = r.xlen(f"{prefix}:{topic}")
        # MAXLEN ~ trims whole macro nodes (stream-node-max-entries, 100 by default)
        assert 500 <= length <= 600, (topic, length)
    if redis_major(r) >= 7:  # 6.2 keeps no count of entries added
        assert r.xinfo_stream(f"{prefix}:even")["entries-added"] == 3000


def test_oversized_row_fails_the_batch_naming_topic_column_and_reason(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    written = (
        spark.range(10)
        .coalesce(1)
        .selectExpr("if(id = 3, to_json(named_struct('big', repeat('x', 400))), '{}') as payload")
    )
    with pytest.raises(Exception) as caught:
        write(written, redis_url, prefix, topic="sized", maxMessageBytes="400")
    assert (
        "atlasbus.errors.PublishError: cannot publish row 3 (topic 'sized'): column 'payload' is "
        "too big: the message would be 549 bytes, over maxMessageBytes (400); this column holds "
        "410 bytes"
    ) in str(caught.value)
    assert r.xlen(f"{prefix}:sized") == 0


def test_payload_that_is_not_a_json_object_fails_the_batch(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    written = spark.createDataFrame([("{}",), ('["a"]',)], "payload string").coalesce(1)
    with pytest.raises(Exception) as caught:
        write(written, redis_url, prefix, topic="bad")
    assert (
        "cannot publish row 1 (topic 'bad'): column 'payload' is not a JSON object (got a JSON "
        "array): '[\"a\"]'"
    ) in str(caught.value)
    assert r.xlen(f"{prefix}:bad") == 0


@pytest.mark.parametrize(
    ("columns", "options", "message"),
    [
        (
            ["'{}' as payload", "'x' as key"],
            {"topic": "t"},
            "the atlasbus sink does not accept column(s) 'key'. Accepted columns: topic, "
            "priority, payload, correlation_id, tracing, metadata, delivery_attempts (payload "
            "is required). Select or rename the columns to publish.",
        ),
        (
            ["'t' as topic"],
            {},
            "the atlasbus sink needs a 'payload' column (JSON text, a struct or a map).",
        ),
        (  # a Spark type Arrow cannot hold is named as Spark calls it, not as "null"
            ["'{}' as payload", "'t' as topic", "make_ym_interval(1, 2) as priority"],
            {},
            "column 'priority' must be an integer, got Spark type interval year to month",
        ),
        (
            ["'{}' as payload"],
            {},
            "the atlasbus sink needs a topic: add a 'topic' column or set option 'topic'",
        ),
    ],
)
def test_bad_input_columns_fail_when_the_write_starts(
    spark: Any,
    r: redis.Redis,
    redis_url: str,
    prefix: str,
    columns: list[str],
    options: dict[str, str],
    message: str,
) -> None:
    with pytest.raises(Exception) as caught:
        write(spark.range(3).selectExpr(*columns), redis_url, prefix, **options)
    assert message in str(caught.value)
    assert list(r.scan_iter(match=f"{prefix}:*")) == []


def test_bad_input_columns_fail_when_the_query_starts(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """Spark builds a streaming sink's writer when the query's thread starts, not in start():
    the query ends with the error before its first micro-batch."""
    stream = spark.readStream.format("rate").load().selectExpr("'{}' as payload", "value")
    query = (
        stream.writeStream.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topic", "t")
        .option("checkpointLocation", str(tmp_path))
        .start()
    )
    with pytest.raises(Exception) as caught:
        query.awaitTermination(120)
    assert "the atlasbus sink does not accept column(s) 'value'. Accepted columns:" in str(
        caught.value
    )
    assert query.lastProgress is None
    assert list(r.scan_iter(match=f"{prefix}:*")) == []


# --- exactly once at the task level: the publisher with a marker, on the real server ----------


def numbered(start: int, stop: int, bad: int | None = None) -> pa.RecordBatch:
    payloads = ['"not an object"' if n == bad else json.dumps({"n": n}) for n in range(start, stop)]
    return pa.record_batch({"payload": pa.array(payloads)})


def published_numbers(r: redis.Redis, stream: str) -> Counter[int]:
    return Counter(json.loads(f[b"payload"])["n"] for _, f in r.xrange(stream))


def test_a_retry_whose_input_lost_rows_publishes_each_remaining_row_once(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    """Entries deleted between two attempts (failOnDataLoss=false): rows shift, none is lost."""
    options = parse_sink_options({"url": redis_url, "streamPrefix": prefix, "topic": "t"})
    marker = marker_key(options, "wvanish", 0)
    with pytest.raises(PublishError), Publisher(options, marker=marker) as attempt:
        attempt.publish(numbered(0, 2500))
        attempt.publish(numbered(2500, 5000, bad=4000))
    assert r.xlen(f"{prefix}:t") == 2500
    gone = {*range(100, 110), *range(2480, 2497), *range(3000, 3005)}
    remaining = [n for n in range(5000) if n not in gone]
    rows = pa.record_batch({"payload": pa.array([json.dumps({"n": n}) for n in remaining])})
    with Publisher(options, marker=marker) as retry:
        retry.publish(rows.slice(0, 1000))
        retry.publish(rows.slice(1000))
        retry.finish()
    assert published_numbers(r, f"{prefix}:t") == Counter(
        [*range(2500), *(n for n in remaining if n >= 2500)]
    )
    assert (retry.skipped, retry.published) == (2500 - 27, 5000 - 2500 - 5)


def test_retried_task_skips_what_the_failed_attempt_published(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = parse_sink_options({"url": redis_url, "streamPrefix": prefix, "topic": "t"})
    marker = marker_key(options, "wtest", 0)
    # attempt 1 dies after 2500 rows (a crash, or a failing row in the next batch)
    with pytest.raises(PublishError) as caught, Publisher(options, marker=marker) as attempt:
        attempt.publish(numbered(0, 2500))
        attempt.publish(numbered(2500, 5000, bad=4000))
    assert str(caught.value).startswith(
        "cannot publish row 4000 (topic 't'): column 'payload' is not a JSON object"
    )
    assert r.xlen(f"{prefix}:t") == 2500
    assert (r.get(marker) or b"").split(b":")[0] == b"2500"
    # attempt 2 sees the same rows and fails the same way, adding nothing
    with pytest.raises(PublishError), Publisher(options, marker=marker) as attempt:
        attempt.publish(numbered(0, 2500))
        attempt.publish(numbered(2500, 5000, bad=4000))
    assert r.xlen(f"{prefix}:t") == 2500
    # attempt 3, with batches cut differently, publishes exactly the rest
    with Publisher(options, marker=marker) as attempt:
        attempt.publish(numbered(0, 1000))
        attempt.publish(numbered(1000, 5000))
    assert (attempt.skipped, attempt.published) == (2500, 2500)
    assert published_numbers(r, f"{prefix}:t") == Counter(range(5000))
    assert 0 < (r.ttl(marker) or 0) <= 7 * 24 * 3600


def test_concurrent_attempts_of_one_task_add_each_row_once(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = parse_sink_options({"url": redis_url, "streamPrefix": prefix, "topic": "t"})
    marker = marker_key(options, "wspec", 3)
    first = Publisher(options, marker=marker)
    second = Publisher(options, marker=marker)
    with first, second:
        first.publish(numbered(0, 1000))
        second.publish(numbered(0, 1000))  # finds the marker at 1000: skips it all
        second.publish(numbered(1000, 2000))
        first.publish(numbered(1000, 2000))  # aborts in turn
    assert (first.published, first.skipped) == (1000, 1000)
    assert (second.published, second.skipped) == (1000, 1000)
    assert published_numbers(r, f"{prefix}:t") == Counter(range(2000))


def test_without_exactly_once_a_retry_publishes_again(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = parse_sink_options(
        {"url": redis_url, "streamPrefix": prefix, "topic": "t", "exactlyOnce": "false"}
    )
    for _ in range(2):
        with Publisher(options, marker=None) as attempt:
            attempt.publish(numbered(0, 1500))
    assert published_numbers(r, f"{prefix}:t") == Counter({n: 2 for n in range(1500)})


def test_big_messages_go_out_in_several_transactions(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = parse_sink_options({"url": redis_url, "streamPrefix": prefix, "topic": "big"})
    marker = marker_key(options, "wbig", 0)
    payloads = [json.dumps({"n": n, "blob": "x" * 100_000}) for n in range(100)]
    execs_before = r.info("commandstats").get("cmdstat_exec", {}).get("calls", 0)
    with Publisher(options, marker=marker) as attempt:
        attempt.publish(pa.record_batch({"payload": pa.array(payloads)}))
    # 10 MB of commands in chunks of at most 4 MB: three transactions
    assert r.info("commandstats")["cmdstat_exec"]["calls"] - execs_before == 3
    assert (attempt.published, (r.get(marker) or b"").split(b":")[0]) == (100, b"100")
    with Publisher(options, marker=marker) as retry:
        retry.publish(pa.record_batch({"payload": pa.array(payloads)}))
    assert (retry.published, retry.skipped) == (0, 100)
    assert published_numbers(r, f"{prefix}:big") == Counter(range(100))
