"""What the sink publishes, the source reads back by name: topics the source's ``topics`` option
cannot name are refused by the sink, and every topic it accepts is read back field for field.

The source splits ``topics`` (and ``streams``) at commas and strips each name with ``str.strip``;
so the sink refuses exactly the topics that are empty or only whitespace, contain a comma, or
start or end with whitespace (``str.isspace``), and accepts everything else, control characters
and any Unicode included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis
from chispa import assert_df_equality
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from atlasbus.dead_letters import SINK_PUBLISH, DeadLetterTable
from atlasbus.errors import ConfigurationError, PublishError
from atlasbus.model.reason_codes import EMPTY_TOPIC, INVALID_TOPIC
from atlasbus.options.sink import TOPIC_RULE, parse_sink_options, topic_problem
from atlasbus.options.source import parse_source_options
from atlasbus.publishing.encoder import encode_batch
from atlasbus.publishing.publisher import Publisher
from helpers import BatchCollector, publish, stream_reader

URL = "redis://127.0.0.1:1/0"

# Accepted, though odd: whitespace and control characters inside, characters at either end
# that str.isspace does not count (zero-width space, BOM, DEL, NUL), globs, colons, quotes.
ACCEPTED = [
    "orders",
    "in side",
    "tab\tinside",
    "cr\r\nlf inside",
    "nul\x00inside",
    "\x00nul at both ends\x00",
    "unit\x1fseparator",
    "del at end\x7f",
    "nel\x85inside",
    "no-break\xa0space inside",
    "zero width space at end\u200b",
    "\ufeffbom at start",
    "ünïcødé ✓ 🚀 événements",
    "glob*?[chars]",
    "colon:inside:",
    "quote'\"back\\slash",
    "{braces}",
    "x" * 300,
]

# (kind, topic, reason code) the sink refuses: the source could not name them.
REFUSED = [
    ("trailing space", "orders ", INVALID_TOPIC),
    ("leading space", " orders", INVALID_TOPIC),
    ("trailing LF", "orders\n", INVALID_TOPIC),
    ("trailing CR LF", "orders\r\n", INVALID_TOPIC),
    ("leading tab", "\torders", INVALID_TOPIC),
    ("trailing vertical tab", "orders\x0b", INVALID_TOPIC),
    ("trailing file separator", "orders\x1c", INVALID_TOPIC),
    ("trailing NEL", "orders\x85", INVALID_TOPIC),
    ("trailing no-break space", "orders\xa0", INVALID_TOPIC),
    ("leading ideographic space", "\u3000orders", INVALID_TOPIC),
    ("trailing line separator", "orders\u2028", INVALID_TOPIC),
    ("comma", "orders,payments", INVALID_TOPIC),
    ("only a comma", ",", INVALID_TOPIC),
    ("comma at the end", "orders,", INVALID_TOPIC),
    ("only whitespace", " \t\r\n", EMPTY_TOPIC),
    ("empty", "", EMPTY_TOPIC),
]

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


def source_names(topics: str) -> tuple[str, ...] | None:
    """The topics the source reads for option ``topics``; None if it refuses the option."""
    try:
        options = parse_source_options({"url": URL, "streamPrefix": "p", "topics": topics})
    except ConfigurationError:
        return None
    return options.subscription.names


def sink_streams(topics: list[str]) -> tuple[list[str], list[str]]:
    """(stream keys written, reason codes refused) when the sink encodes one row per topic."""
    options = parse_sink_options({"url": URL, "streamPrefix": "p"})
    batch = pa.record_batch(
        {"topic": pa.array(topics, pa.string()), "payload": pa.array(["{}"] * len(topics))}
    )
    encoded = encode_batch(batch, options, enqueued_time=1.0)
    refused = {rejection.row for rejection in encoded.rejections}
    streams = [encoded.stream_of(row) for row in range(len(topics)) if row not in refused]
    return streams, [rejection.code for rejection in encoded.rejections]


# --- the property, on the core functions (no Spark, no Redis) ---------------------------------

TRICKY_CHARS = (
    " \t\n\r\x0b\x0c\x00\x1c\x1d\x1e\x1f\x7f\x85\xa0\u1680\u2000\u2009\u200a\u200b\u2028"
    "\u2029\u202f\u205f\u3000\ufeff,,,:*?[]\\'\"é✓🚀"
)
topic_names = st.text(
    alphabet=st.one_of(st.sampled_from(TRICKY_CHARS), st.characters(codec="utf-8")), max_size=12
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topic=topic_names)
@example(topic="orders ")
@example(topic="a,b")
@example(topic="\x1c")
@example(topic="x\u200b")
@example(topic="")
def test_the_sink_accepts_exactly_the_topics_the_source_can_name(topic: str) -> None:
    streams, codes = sink_streams([topic])
    accepted = not codes
    assert accepted == (topic_problem(topic) is None)
    # whatever way the source's option is given, an item comes out split at commas and stripped,
    # so a topic is addressable if and only if option topics=<the topic> names exactly it
    addressable = source_names(topic) == (topic,)
    assert accepted == addressable, (topic, codes)
    if accepted:
        (stream,) = streams
        source = parse_source_options({"url": URL, "streamPrefix": "p", "topics": topic})
        assert source.subscription.fixed_streams() == (stream,)  # the stream the sink wrote
        assert source.subscription.topic_of(stream) == topic  # the topic column read back
        raw = parse_source_options({"url": URL, "streamPrefix": "p", "streams": stream})
        assert raw.subscription.fixed_streams() == (stream,)
        if topic not in ("a", "b"):  # in a list too, with spaces around the commas
            assert source_names(f"a , {topic},b") == ("a", topic, "b")
    else:
        assert codes in ([INVALID_TOPIC], [EMPTY_TOPIC])
        for listed in (topic, f"a,{topic}", f"{topic},b", f"a , {topic} , b"):
            assert topic not in (source_names(listed) or ())


def test_the_tables_of_this_file_agree_with_the_rule() -> None:
    assert sink_streams(ACCEPTED) == ([f"p:{topic}" for topic in ACCEPTED], [])
    for _, topic, code in REFUSED:
        assert sink_streams([topic]) == ([], [code]), repr(topic)
        assert source_names(topic) != (topic,)


def test_option_topic_the_source_cannot_name_fails_at_start() -> None:
    for _, topic, _ in REFUSED:
        with pytest.raises(ConfigurationError) as caught:
            parse_sink_options({"url": URL, "topic": topic})
        message = str(caught.value)
        assert message.startswith("option 'topic' "), message
        if topic.strip():
            assert message.endswith(TOPIC_RULE), message


@pytest.mark.parametrize(("kind", "topic", "code"), REFUSED, ids=[k for k, _, _ in REFUSED])
def test_publisher_fails_naming_the_row_its_topic_and_the_reason(
    redis_url: str, r: redis.Redis, prefix: str, kind: str, topic: str, code: str
) -> None:
    options = parse_sink_options({"url": redis_url, "streamPrefix": prefix})
    batch = pa.record_batch(
        {"topic": pa.array(["fine", topic, "fine"]), "payload": pa.array(['{"n": 0}'] * 3)}
    )
    with pytest.raises(PublishError) as caught, Publisher(options, marker=None) as publisher:
        publisher.publish(batch)
    where = f"topic {topic!r}" if topic else "no topic"
    assert str(caught.value).startswith(f"cannot publish row 1 ({where}): column 'topic' ")
    assert topic_problem(topic) in str(caught.value)
    assert list(r.scan_iter(match=f"{prefix}:*")) == []  # the batch is refused whole


# --- on Spark ------------------------------------------------------------------------------------


def write(df: Any, redis_url: str, prefix: str, **options: str) -> None:
    writer = df.write.format("atlasbus").mode("append")
    writer = writer.option("url", redis_url).option("streamPrefix", prefix)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def read(spark: Any, redis_url: str, prefix: str, **options: str) -> Any:
    reader = spark.read.format("atlasbus").option("url", redis_url).option("streamPrefix", prefix)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def rows_for(topics: list[str], per_topic: int) -> list[tuple[Any, ...]]:
    rows = []
    for t, topic in enumerate(topics):
        for i in range(per_topic):
            rows.append(
                (
                    topic,
                    i % 10,
                    json.dumps({"t": t, "i": i, "topic": topic}, ensure_ascii=False),
                    f"corr-{t:02d}-{i:03d}",
                    {"trace_id": f"trace-{t}-{i}", "topic": topic},
                    {} if i % 2 else {"k": "v\r\n"},
                    i % 3,
                )
            )
    return rows


@pytest.mark.spark
def test_every_accepted_topic_is_read_back_field_for_field_by_name(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    written = spark.createDataFrame(rows_for(ACCEPTED, 5), INPUT_SCHEMA)
    write(written, redis_url, prefix)
    assert sorted(r.xlen(f"{prefix}:{topic}") for topic in ACCEPTED) == [5] * len(ACCEPTED)

    # all of them in one 'topics' list, and the same through 'streams'
    for back in (
        read(spark, redis_url, prefix, topics=",".join(ACCEPTED)),
        read(spark, redis_url, prefix, streams=",".join(f"{prefix}:{t}" for t in ACCEPTED)),
    ):
        assert back.filter("error is not null").count() == 0
        assert_df_equality(
            back.select(*ENVELOPE_COLUMNS).orderBy("correlation_id"),
            written.orderBy("correlation_id"),
            ignore_nullable=True,
        )
    # each by itself, as a user would name it
    for topic in ACCEPTED[1:6]:
        back = read(spark, redis_url, prefix, topics=topic).select(*ENVELOPE_COLUMNS).collect()
        assert sorted(tuple(row) for row in back) == sorted(
            tuple(row) for row in written.filter(written.topic == topic).collect()
        )

    # and by a streaming query (its offsets, keyed by these streams, go through the offset log)
    collector = BatchCollector(("topic", "correlation_id", "error"))
    query = (
        stream_reader(spark, redis_url, prefix, topics=",".join(ACCEPTED))
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    assert sorted((row["topic"], row["correlation_id"]) for row in collector.rows) == sorted(
        (row[0], row[3]) for row in rows_for(ACCEPTED, 5)
    )
    assert {row["error"] for row in collector.rows} == {None}


@pytest.mark.spark
def test_streaming_sink_publishes_accepted_topics_that_are_read_back_by_name(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    publish(r, prefix, "in", 60)
    names = ACCEPTED[:12]
    topic_of = "element_at(array({}), cast(get_json_object(payload, '$.n') % {} + 1 as int))"
    literals = ", ".join("'" + t.replace("\\", "\\\\").replace("'", "\\'") + "'" for t in names)
    query = (
        stream_reader(spark, redis_url, prefix, topics="in")
        .selectExpr(
            "payload", "correlation_id", topic_of.format(literals, len(names)) + " as topic"
        )
        .writeStream.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    source = {f[b"correlation_id"].decode(): f for _, f in r.xrange(f"{prefix}:in")}
    back = read(spark, redis_url, prefix, topics=",".join(names)).collect()
    assert sorted(row["correlation_id"] for row in back) == sorted(source)
    for row in back:
        n = json.loads(row["payload"])["n"]
        assert row["topic"] == names[n % len(names)]
        assert row["payload"] == source[row["correlation_id"]][b"payload"].decode()


@pytest.mark.spark
@pytest.mark.parametrize(
    ("kind", "topic"),
    [(kind, topic) for kind, topic, _ in REFUSED if kind in ("trailing CR LF", "comma")],
)
def test_batch_write_with_a_refused_topic_fails_naming_the_row(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, kind: str, topic: str
) -> None:
    written = spark.createDataFrame(
        [("ok", '{"n": 0}'), (topic, '{"n": 1}')], "topic string, payload string"
    ).coalesce(1)
    with pytest.raises(Exception) as caught:
        write(written, redis_url, prefix)
    message = str(caught.value)
    assert f"PublishError: cannot publish row 1 (topic {topic!r}): column 'topic' " in message
    assert TOPIC_RULE in message
    assert list(r.scan_iter(match=f"{prefix}:*")) == []


@pytest.mark.spark
def test_option_topic_the_source_cannot_name_fails_the_write_and_the_query_at_start(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    frame = spark.range(3).selectExpr("to_json(named_struct('n', id)) as payload")
    with pytest.raises(Exception) as caught:
        write(frame, redis_url, prefix, topic="orders\n")
    assert "option 'topic' ends with whitespace ('\\n')" in str(caught.value)
    stream = spark.readStream.format("rate").load().selectExpr("'{}' as payload")
    query = (
        stream.writeStream.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topic", "orders,payments")
        .option("checkpointLocation", str(tmp_path))
        .start()
    )
    with pytest.raises(Exception) as caught:
        query.awaitTermination(120)
    assert "option 'topic' contains a comma" in str(caught.value)
    assert query.lastProgress is None
    assert list(r.scan_iter(match=f"{prefix}:*")) == []


@pytest.mark.spark
def test_refused_topics_become_dead_letters_and_the_rest_is_published(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    dlq = tmp_path / "dlq"
    rows = [("orders", '{"n": 0}', "c0")]
    rows += [
        (topic, json.dumps({"n": i + 1}), f"c{i + 1}") for i, (_, topic, _) in enumerate(REFUSED)
    ]
    rows += [("payments", '{"n": 99}', "c99")]
    write(
        spark.createDataFrame(rows, "topic string, payload string, correlation_id string").coalesce(
            1
        ),
        redis_url,
        prefix,
        deadLetterTable=str(dlq),
    )
    back = read(spark, redis_url, prefix, topics="orders,payments").collect()
    assert sorted((row["topic"], row["correlation_id"]) for row in back) == [
        ("orders", "c0"),
        ("payments", "c99"),
    ]
    assert sorted(k.decode() for k in r.scan_iter(match=f"{prefix}:*", _type="stream")) == [
        f"{prefix}:orders",
        f"{prefix}:payments",
    ]
    letters = sorted(DeadLetterTable(dlq).to_arrow().to_pylist(), key=lambda x: x["error"])
    letters = sorted(letters, key=lambda x: int(x["correlation_id"][1:]))
    assert [(x["stage"], x["reason"], x["correlation_id"]) for x in letters] == [
        (SINK_PUBLISH, code, f"c{i + 1}") for i, (_, _, code) in enumerate(REFUSED)
    ]
    for i, ((_, topic, _), letter) in enumerate(zip(REFUSED, letters, strict=True)):
        where = f"topic {topic!r}" if topic else "no topic"
        assert letter["error"] == (
            f"cannot publish row {i + 1} ({where}): column 'topic' {topic_problem(topic)}"
        )
        assert letter["payload"] == json.dumps({"n": i + 1})
        assert letter["topic"] in (topic, None)  # an empty topic is recorded as none
