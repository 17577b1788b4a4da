"""A malformed entry never fails the query: it becomes an error row carrying its raw fields."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
import redis

from atlasbus.wire.raw_text import raw_entry
from cases import GOOD, MALFORMED, as_bytes, raw_map
from helpers import envelope


def raw_xrange(r: redis.Redis, stream: str) -> list[Any]:
    """The stream's entries as the source reads them: XRANGE's reply as it is, all bytes."""
    pool = r.connection_pool
    connection = pool.get_connection()
    try:
        connection.send_command("XRANGE", stream, "-", "+")
        reply: list[Any] = connection.read_response()
        return reply
    finally:
        pool.release(connection)


def test_each_malformed_kind_becomes_an_error_row_with_raw_fields(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    stream = f"{prefix}:t"
    ids = {}
    r.xadd(stream, GOOD)
    for name, fields, _ in MALFORMED:
        ids[name] = r.xadd(stream, fields).decode()
        r.xadd(stream, envelope("t", 2))  # a good neighbour after each bad one
    rows = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "t")
        .load()
        .orderBy("timestamp", "id")
        .collect()
    )
    by_id = {row["id"]: row for row in rows}
    assert len(rows) == 1 + 2 * len(MALFORMED)
    good = [row for row in rows if row["error"] is None]
    assert len(good) == 1 + len(MALFORMED)
    assert all(row["fields"] is None and json.loads(row["payload"])["topic"] == "t" for row in good)
    for name, fields, message in MALFORMED:
        row = by_id[ids[name]]
        assert message in row["error"], name
        assert row["fields"] == raw_map(fields), name
        restored = dict(raw_entry(row["fields"]))
        assert restored == {as_bytes(k): as_bytes(v) for k, v in fields.items()}, name
        assert row["payload"] is None and row["priority"] is None, name
        assert (row["topic"], row["stream"]) == ("t", stream)


def test_include_raw_fields_fills_fields_for_good_rows_too(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    entry_id = r.xadd(f"{prefix}:t", GOOD).decode()
    row = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "t")
        .option("includeRawFields", "true")
        .load()
        .collect()[0]
    )
    assert row["id"] == entry_id and row["error"] is None
    assert row["fields"] == GOOD
    assert (
        row["priority"] == 1 and row["tracing"] == {"trace_id": "trace-1"} and row["metadata"] == {}
    )


def test_optional_fields_take_their_defaults(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    r.xadd(
        f"{prefix}:t",
        {"payload": '{"a": {"b": [1, 2]}}', "priority": "3", "tracing": '{"n": 1, "s": "x"}'},
    )
    row = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "t")
        .load()
        .collect()[0]
    )
    assert row["error"] is None
    assert (row["priority"], row["delivery_attempts"], row["correlation_id"]) == (3, 0, None)
    assert row["tracing"] == {"n": "1", "s": "x"} and row["metadata"] == {}
    assert row["enqueued_time"] is None


def test_raw_format_reads_any_stream(spark: Any, r: redis.Redis, redis_url: str) -> None:
    key = f"sensor-{id(r)}"
    first = r.xadd(key, {"temp": "21.5", "bytes": b"\xff"}).decode()
    rows = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streams", key)
        .option("format", "raw")
        .load()
        .collect()
    )
    assert [(row["topic"], row["stream"], row["id"]) for row in rows] == [(key, key, first)]
    assert rows[0]["fields"] == {"temp": "21.5", "bytes": "\\xff"}
    assert rows[0].asDict().keys() == {"topic", "stream", "id", "timestamp", "fields"}


@pytest.mark.parametrize("mixed_order", [False, True])
def test_core_decoder_handles_mixed_field_orders(mixed_order: bool) -> None:
    from atlasbus.decoding.decoder import decode_envelopes

    a = [b"payload", b'{"x": 1}', b"priority", b"1"]
    b = (
        [b"priority", b"2", b"payload", b'{"x": 2}']
        if mixed_order
        else [b"payload", b'{"x": 2}', b"priority", b"2"]
    )
    batch = decode_envelopes(
        [[b"1-0", a], [b"1-1", b]], topic="t", stream="s:t", include_raw_fields=False
    )
    assert batch.column("priority").to_pylist() == [1, 2]
    assert batch.column("payload").to_pylist() == ['{"x": 1}', '{"x": 2}']
    assert batch.column("error").to_pylist() == [None, None]


TIME_RANGE = "at least -62135424000 and below 253402128000 (0001-01-03 to 9999-12-29 UTC)"


@pytest.mark.spark
def test_enqueued_time_outside_years_1_to_9999_is_an_error_row_not_a_failed_query(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """Such a value once decoded to year -290308: collect() failed and so did the JVM."""
    stream = f"{prefix}:t"
    bad_times = ["1e13", "-1e13", "1e300", "inf", "nan"]
    ids = {value: r.xadd(stream, {**GOOD, "enqueued_time": value}).decode() for value in bad_times}
    good_id = r.xadd(stream, envelope("t", 7, enqueued_time="1700000000.123456")).decode()
    first_id = r.xadd(stream, {**GOOD, "enqueued_time": "-62135424000"}).decode()
    frame = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "t")
        .load()
    )
    rows = {row["id"]: row for row in frame.collect()}
    assert len(rows) == len(bad_times) + 2
    for value, entry_id in ids.items():
        row = rows[entry_id]
        assert row["error"] == (
            f"field 'enqueued_time' must be seconds since the epoch, {TIME_RANGE}, got '{value}'"
        )
        assert row["enqueued_time"] is None and row["payload"] is None
        assert row["fields"]["enqueued_time"] == value
    good = rows[good_id]
    assert good["error"] is None and good["fields"] is None
    # collect() gives naive datetimes in the driver's local time zone (UTC on CI)
    assert good["enqueued_time"] == datetime.fromtimestamp(1700000000).replace(microsecond=123456)
    assert (good["priority"], good["delivery_attempts"]) == (7, 0)
    assert json.loads(good["payload"])["n"] == 7
    assert rows[first_id]["error"] is None
    assert rows[first_id]["enqueued_time"] == datetime.fromtimestamp(-62135424000)

    # The reason codes, as the dead-letter table records them.
    from atlasbus.decoding.decoder import decode_envelope_page

    page = decode_envelope_page(
        raw_xrange(r, stream), topic="t", stream=stream, include_raw_fields=False
    )
    assert page.reasons == ["invalid-timestamp"] * len(bad_times) + [None, None]
    assert frame.where("error IS NOT NULL").count() == len(bad_times)
