"""Unit tests of the sink's Spark-free parts: options, input columns, envelope encoding.

No Redis, no Spark: the encoder's output is RESP, parsed back here to check every field.
"""

from __future__ import annotations

import decimal
import re
from typing import Any

import orjson
import pyarrow as pa
import pytest

from atlasbus.errors import ConfigurationError
from atlasbus.options.sink import (
    DEFAULT_MAX_MESSAGE_BYTES,
    SinkOptions,
    check_input_schema,
    parse_sink_options,
)
from atlasbus.publishing.encoder import encode_batch

URL = "redis://127.0.0.1:1/0"
STRING_MAP = pa.map_(pa.string(), pa.string())


def options(**extra: str) -> SinkOptions:
    return parse_sink_options({"url": URL, **extra})


def parse_resp(data: bytes) -> list[list[bytes]]:
    """The commands in a RESP byte string, each as its list of arguments."""
    commands: list[list[bytes]] = []
    pos = 0
    while pos < len(data):
        assert data[pos : pos + 1] == b"*"
        end = data.index(b"\r\n", pos)
        argc = int(data[pos + 1 : end])
        pos = end + 2
        args = []
        for _ in range(argc):
            assert data[pos : pos + 1] == b"$"
            end = data.index(b"\r\n", pos)
            length = int(data[pos + 1 : end])
            args.append(data[end + 2 : end + 2 + length])
            assert data[end + 2 + length : end + 4 + length] == b"\r\n"
            pos = end + 4 + length
        commands.append(args)
    return commands


def entries(batch: pa.RecordBatch, opts: SinkOptions, **kw: Any) -> list[dict[str, str]]:
    """Encode and return, per row, the stream key and fields of its XADD."""
    encoded = encode_batch(batch, opts, enqueued_time=1700000000.25, **kw)
    assert not encoded.rejections, [r.message() for r in encoded.rejections]
    out = []
    for args in parse_resp(bytes(encoded.command_bytes(0, len(encoded)))):
        assert args[0] == b"XADD"
        tail = args[2:]
        fields: dict[str, str] = {"stream": args[1].decode()}
        if tail[0] == b"MAXLEN":
            fields["maxlen"] = " ".join(a.decode() for a in tail[:3])
            tail = tail[3:]
        assert tail[0] == b"*"
        pairs = tail[1:]
        fields.update(
            {k.decode(): v.decode() for k, v in zip(pairs[0::2], pairs[1::2], strict=True)}
        )
        out.append(fields)
    return out


def rejections(batch: pa.RecordBatch, opts: SinkOptions, **kw: Any) -> list[str]:
    encoded = encode_batch(batch, opts, enqueued_time=1700000000.25, **kw)
    return [r.message() for r in encoded.rejections]


# --- options -------------------------------------------------------------------------------------


def test_defaults() -> None:
    parsed = parse_sink_options({"url": URL, "TOPIC": "orders"})
    assert parsed.stream_prefix == "atlas_bus"
    assert parsed.topic == "orders"
    assert parsed.max_len is None
    assert parsed.max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES == 262144
    assert parsed.exactly_once is True
    assert parsed.stream_key("orders") == "atlas_bus:orders"


def test_all_options_parsed() -> None:
    parsed = parse_sink_options(
        {
            "url": URL,
            "streamPrefix": "bus",
            "maxLen": "1000",
            "maxMessageBytes": "512",
            "exactlyOnce": "FALSE",
            "checkpointLocation": "/tmp/ck",
            "path": "ignored",
        }
    )
    assert (parsed.stream_prefix, parsed.topic, parsed.max_len) == ("bus", None, 1000)
    assert (parsed.max_message_bytes, parsed.exactly_once) == (512, False)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"maxLen": "0"}, "option 'maxLen' must be a positive integer, got '0'"),
        ({"maxLen": "ten"}, "option 'maxLen' must be a positive integer, got 'ten'"),
        (
            {"maxMessageBytes": "-1"},
            "option 'maxMessageBytes' must be a positive integer, got '-1'",
        ),
        ({"exactlyOnce": "yes"}, "option 'exactlyOnce' must be 'true' or 'false', got 'yes'"),
        ({"topic": "  "}, "option 'topic' must not be empty"),
        (
            {"topic": "orders "},
            "option 'topic' ends with whitespace (' '), which the source's 'topics' option "
            "strips, so it could not be read back by name; a topic must be non-empty, contain "
            "no comma and not start or end with whitespace (inside it, spaces, control "
            "characters and any Unicode are fine)",
        ),
        (
            {"topic": "orders,payments"},
            "option 'topic' contains a comma, where the source's 'topics' option splits its "
            "list, so it could not be read back by name; a topic must be non-empty, contain no "
            "comma and not start or end with whitespace (inside it, spaces, control characters "
            "and any Unicode are fine)",
        ),
        ({"streamPrefix": ""}, "option 'streamPrefix' must not be empty"),
        (
            {"url": "http://x"},
            "option 'url' must be a Redis URL starting with redis://, rediss://, unix://, "
            "redis+sentinel:// or rediss+sentinel://, got http://...; accepted: "
            "redis://[user:password@]host[:port][/db], "
            "rediss://... (TLS), unix:///path/to.sock or redis+sentinel://[user:password@]sentinel[:port][,sentinel[:port]...]/master-name[/db]",
        ),
        (
            {"maxlength": "5"},
            "unknown option 'maxlength' (named in lower case, as Spark hands options over). Did you mean 'maxLen'? Accepted options: "
            "deadLetterTable, exactlyOnce, maxLen, maxMessageBytes, minReplicas, password, "
            "replicaTimeout, streamPrefix, "
            "topic, url, username",
        ),
        ({"deadLetterTable": ""}, "option 'deadLetterTable' must not be empty"),
    ],
)
def test_bad_options(given: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_sink_options({"url": URL, **given})
    assert str(caught.value) == message


def test_password_never_in_repr() -> None:
    parsed = parse_sink_options({"url": "redis://:s3cret@127.0.0.1:1/0", "password": "hunter2"})
    assert "s3cret" not in repr(parsed)
    assert "hunter2" not in repr(parsed)


# --- input columns -------------------------------------------------------------------------------


def schema(**types: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field(name, t) for name, t in types.items()])


def test_every_accepted_column_passes() -> None:
    check_input_schema(
        schema(
            payload=pa.string(),
            topic=pa.string(),
            priority=pa.int32(),
            correlation_id=pa.string(),
            tracing=STRING_MAP,
            metadata=pa.struct([("a", pa.int64())]),
            delivery_attempts=pa.int64(),
        ),
        options(),
    )
    check_input_schema(schema(payload=pa.struct([("a", pa.int64())])), options(topic="t"))


@pytest.mark.parametrize(
    ("columns", "opts", "message"),
    [
        (
            schema(payload=pa.string(), value=pa.string(), key=pa.binary()),
            {"topic": "t"},
            "the atlasbus sink does not accept column(s) 'value', 'key'. Accepted columns: "
            "topic, priority, payload, correlation_id, tracing, metadata, delivery_attempts "
            "(payload is required). Select or rename the columns to publish.",
        ),
        (
            schema(topic=pa.string()),
            {},
            "the atlasbus sink needs a 'payload' column (JSON text, a struct or a map). "
            "Accepted columns: topic, priority, payload, correlation_id, tracing, metadata, "
            "delivery_attempts",
        ),
        (
            schema(payload=pa.string()),
            {},
            "the atlasbus sink needs a topic: add a 'topic' column or set option 'topic'",
        ),
        (
            schema(payload=pa.string(), priority=pa.string()),
            {"topic": "t"},
            "column 'priority' must be an integer, got string",
        ),
        (
            schema(payload=pa.int64()),
            {"topic": "t"},
            "column 'payload' must be JSON text (string), a struct or a map, got int64",
        ),
        (
            schema(payload=pa.string(), metadata=pa.list_(pa.string())),
            {"topic": "t"},
            "column 'metadata' must be a map, a struct or JSON text (string), got list<item: "
            "string>",
        ),
    ],
)
def test_bad_columns(columns: pa.Schema, opts: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        check_input_schema(columns, options(**opts))
    assert str(caught.value) == message


# --- encoding ------------------------------------------------------------------------------------


def test_every_column_set() -> None:
    batch = pa.record_batch(
        {
            "topic": pa.array(["orders", "payments"]),
            "priority": pa.array([0, -3], pa.int32()),
            "payload": pa.array(['{"n": 1, "nested": {"é": [1, 2]}}', '{"n":2}']),
            "correlation_id": pa.array(["c1", "c2"]),
            "tracing": pa.array([[("trace_id", "t-1")], []], STRING_MAP),
            "metadata": pa.array(['{"k": "v"}', "{}"]),
            "delivery_attempts": pa.array([3, 0], pa.int64()),
        }
    )
    assert entries(batch, options(streamPrefix="bus")) == [
        {
            "stream": "bus:orders",
            "topic": "orders",
            "priority": "0",
            "payload": '{"n": 1, "nested": {"é": [1, 2]}}',
            "correlation_id": "c1",
            "tracing": '{"trace_id":"t-1"}',
            "metadata": '{"k": "v"}',
            "delivery_attempts": "3",
            "enqueued_time": "1700000000.250000",
        },
        {
            "stream": "bus:payments",
            "topic": "payments",
            "priority": "-3",
            "payload": '{"n":2}',
            "correlation_id": "c2",
            "tracing": "{}",
            "metadata": "{}",
            "delivery_attempts": "0",
            "enqueued_time": "1700000000.250000",
        },
    ]


def test_defaults_when_columns_absent_or_null() -> None:
    batch = pa.record_batch(
        {
            "payload": pa.array(['{"a":1}', '{"a":2}']),
            "priority": pa.array([None, 7], pa.int32()),
            "correlation_id": pa.array([None, "given"]),
            "metadata": pa.array([None, None], STRING_MAP),
        }
    )
    rows = entries(batch, options(topic="t", maxLen="100"))
    assert [row["stream"] for row in rows] == ["atlas_bus:t", "atlas_bus:t"]
    assert [row["maxlen"] for row in rows] == ["MAXLEN ~ 100"] * 2
    assert [row["priority"] for row in rows] == ["5", "7"]
    assert [(row["tracing"], row["metadata"]) for row in rows] == [("{}", "{}")] * 2
    assert [row["delivery_attempts"] for row in rows] == ["0", "0"]
    assert re.fullmatch(r"[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}", rows[0]["correlation_id"])
    assert rows[1]["correlation_id"] == "given"


def test_topic_option_fills_null_topics() -> None:
    batch = pa.record_batch({"payload": pa.array(["{}", "{}"]), "topic": pa.array([None, "x"])})
    rows = entries(batch, options(topic="fallback"))
    assert [row["stream"] for row in rows] == ["atlas_bus:fallback", "atlas_bus:x"]


TRICKY = ["plain", 'quo"te', "back\\slash", "new\nline", "tab\t\x01", "ünïcødé ✓ 🚀", ""]


def test_string_maps_match_orjson() -> None:
    maps = [
        [(k, v) for k, v in zip(TRICKY, reversed(TRICKY), strict=True)],
        [],
        None,
        [("only", "one")],
    ]
    column = pa.array(maps, STRING_MAP)
    for sliced in (column, column.slice(1, 3)):
        batch = pa.record_batch({"payload": pa.array(["{}"] * len(sliced)), "tracing": sliced})
        got = [row["tracing"] for row in entries(batch, options(topic="t"))]
        expected = [orjson.dumps(dict(m) if m else {}).decode() for m in sliced.to_pylist()]
        assert got == expected


def test_struct_and_map_payloads_are_serialised() -> None:
    payload = pa.array(
        [
            {"n": 1, "price": decimal.Decimal("1.50"), "tags": {"a": 1}, "text": 'é"'},
            {"n": 2, "price": None, "tags": {}, "text": ""},
        ],
        pa.struct(
            [
                ("n", pa.int64()),
                ("price", pa.decimal128(5, 2)),
                ("tags", pa.map_(pa.string(), pa.int64())),
                ("text", pa.string()),
            ]
        ),
    )
    batch = pa.record_batch({"payload": payload, "metadata": pa.array([{"x": [1, 2]}, None])})
    rows = entries(batch, options(topic="t"))
    assert [row["payload"] for row in rows] == [
        '{"n":1,"price":1.50,"tags":{"a":1},"text":"é\\""}',
        '{"n":2,"price":null,"tags":{},"text":""}',
    ]
    assert [row["metadata"] for row in rows] == ['{"x":[1,2]}', "{}"]


def test_rejections_name_row_topic_column_and_reason() -> None:
    batch = pa.record_batch(
        {
            "topic": pa.array(["a", "", None, "b", "c", "d", "e"]),
            "payload": pa.array(["{}", "{}", "{}", "[1, 2]", "{bad", None, "{}"]),
            "delivery_attempts": pa.array([0, 0, 0, 0, 0, 0, -1], pa.int32()),
        }
    )
    with pytest.raises(orjson.JSONDecodeError) as orjson_error:
        orjson.loads("{bad")
    assert rejections(batch, options(), row_base=100) == [
        "cannot publish row 101 (no topic): column 'topic' is empty",
        "cannot publish row 102 (no topic): column 'topic' is null and option 'topic' is not set",
        "cannot publish row 103 (topic 'b'): column 'payload' is not a JSON object (got a JSON "
        "array): '[1, 2]'",
        f"cannot publish row 104 (topic 'c'): column 'payload' is not valid JSON "
        f"({orjson_error.value}): '{{bad'",
        "cannot publish row 105 (topic 'd'): column 'payload' is null",
        "cannot publish row 106 (topic 'e'): column 'delivery_attempts' must be between 0 and "
        "2147483647, got -1",
    ]
    encoded = encode_batch(batch, options(), enqueued_time=1.0)
    assert encoded.count(0, 7) == 1
    assert [args[1] for args in parse_resp(bytes(encoded.command_bytes(0, 7)))] == [b"atlas_bus:a"]


RULE = (
    "a topic must be non-empty, contain no comma and not start or end with whitespace (inside "
    "it, spaces, control characters and any Unicode are fine)"
)
STRIPPED = "which the source's 'topics' option strips, so it could not be read back by name"


def test_topics_the_source_cannot_name_are_rejected_with_the_reason_and_the_rule() -> None:
    topics = ["ok", "a,b", "x\r\n", "\tx", " x ", "   ", "x\u00a0", "in side\n\x00ok", "ok"]
    batch = pa.record_batch({"topic": pa.array(topics), "payload": pa.array(["{}"] * 9)})
    encoded = encode_batch(batch, options(), enqueued_time=1.0, row_base=10)
    assert [(r.row, r.topic, r.column, r.code) for r in encoded.rejections] == [
        (11, "a,b", "topic", "invalid-topic"),
        (12, "x\r\n", "topic", "invalid-topic"),
        (13, "\tx", "topic", "invalid-topic"),
        (14, " x ", "topic", "invalid-topic"),
        (15, "   ", "topic", "empty-topic"),
        (16, "x\u00a0", "topic", "invalid-topic"),
    ]
    assert [r.message() for r in encoded.rejections] == [
        "cannot publish row 11 (topic 'a,b'): column 'topic' contains a comma, where the "
        f"source's 'topics' option splits its list, so it could not be read back by name; {RULE}",
        f"cannot publish row 12 (topic 'x\\r\\n'): column 'topic' ends with whitespace "
        f"('\\r\\n'), {STRIPPED}; {RULE}",
        f"cannot publish row 13 (topic '\\tx'): column 'topic' starts with whitespace ('\\t'), "
        f"{STRIPPED}; {RULE}",
        f"cannot publish row 14 (topic ' x '): column 'topic' starts and ends with whitespace "
        f"(' ', ' '), {STRIPPED}; {RULE}",
        f"cannot publish row 15 (topic '   '): column 'topic' is only whitespace ('   '); {RULE}",
        f"cannot publish row 16 (topic 'x\\xa0'): column 'topic' ends with whitespace "
        f"('\\xa0'), {STRIPPED}; {RULE}",
    ]
    streams = [args[1] for args in parse_resp(bytes(encoded.command_bytes(0, 9)))]
    assert streams == [b"atlas_bus:ok", b"atlas_bus:in side\n\x00ok", b"atlas_bus:ok"]


def test_a_topic_option_the_source_cannot_name_rejects_every_row() -> None:
    """parse_sink_options refuses it at start; options made another way are still checked."""
    opts = SinkOptions(options().endpoint, "atlas_bus", "t,u", None, 1000, True)
    batch = pa.record_batch({"payload": pa.array(["{}", "{}"])})
    encoded = encode_batch(batch, opts, enqueued_time=1.0)
    assert [(r.row, r.code) for r in encoded.rejections] == [
        (0, "invalid-topic"),
        (1, "invalid-topic"),
    ]
    assert encoded.count(0, 2) == 0


def test_oversized_message_is_rejected() -> None:
    small = '{"x": "' + "a" * 10 + '"}'
    big = '{"x": "' + "a" * 400 + '"}'
    batch = pa.record_batch(
        {"payload": pa.array([small, big]), "correlation_id": pa.array(["c", "c"])}
    )
    assert rejections(batch, options(topic="t", maxMessageBytes="300")) == [
        "cannot publish row 1 (topic 't'): column 'payload' is too big: the message would be "
        "513 bytes, over maxMessageBytes (300); this column holds 409 bytes"
    ]


def test_priority_out_of_int32_range_is_rejected() -> None:
    batch = pa.record_batch(
        {"payload": pa.array(["{}"]), "priority": pa.array([2**31], pa.int64())}
    )
    assert rejections(batch, options(topic="t")) == [
        "cannot publish row 0 (topic 't'): column 'priority' must be between -2147483648 and "
        "2147483647, got 2147483648"
    ]


def test_command_bytes_slices_rows() -> None:
    batch = pa.record_batch({"payload": pa.array([f'{{"n":{i}}}' for i in range(5)])})
    encoded = encode_batch(batch, options(topic="t"), enqueued_time=1.0)
    middle = parse_resp(bytes(encoded.command_bytes(1, 4)))
    assert [cmd[cmd.index(b"payload") + 1] for cmd in middle] == [
        b'{"n":1}',
        b'{"n":2}',
        b'{"n":3}',
    ]
    assert encoded.count(1, 4) == 3


def test_chunks_end_at_a_row_or_byte_limit() -> None:
    sizes = [10, 10, 5000, 10, 10, 10]
    batch = pa.record_batch({"payload": pa.array(['{"x":"' + "a" * n + '"}' for n in sizes])})
    encoded = encode_batch(batch, options(topic="t"), enqueued_time=1.0)
    row = len(bytes(encoded.command_bytes(0, 1)))
    assert encoded.chunk_end(0, 1000, 10**9) == 6
    assert encoded.chunk_end(0, 4, 10**9) == 4
    assert encoded.chunk_end(0, 1000, 2 * row) == 2  # the big row starts the next chunk
    assert encoded.chunk_end(2, 1000, 100) == 3  # a chunk holds at least one row
    assert encoded.chunk_end(3, 1000, 3 * row) == 6
    assert encoded.chunk_end(1, 1000, 10**9) == 6
