"""Bad source options fail when the DataFrame is defined, with an error naming option and fix."""

from __future__ import annotations

import json
from typing import Any

import pytest

from atlasbus.errors import ConfigurationError
from atlasbus.model.entry_id import EntryId
from atlasbus.options.source import SweepPolicy, TriggerPacing, parse_source_options

BAD_OPTIONS = [
    ({}, "exactly one of options 'topics', 'topicPattern', 'streams' must be set (got none)"),
    (
        {"topics": "a", "streams": "x"},
        "exactly one of options 'topics', 'topicPattern', 'streams' must be set (got topics, streams)",
    ),
    (
        {"topics": "a,,b"},
        "option 'topics' must be a comma-separated list of non-empty names, got 'a,,b'",
    ),
    ({"topics": "a,b,a"}, "option 'topics' lists a more than once"),
    ({"topicPattern": " "}, "option 'topicPattern' must not be empty"),
    (
        {"topics": "a", "url": "http://h:1"},
        "option 'url' must be a Redis URL starting with redis://",
    ),
    ({"topics": "a", "url": "redis://h:notaport"}, "option 'url' has an invalid port"),
    (
        {"topics": "a", "startingOffsets": "first"},
        "option 'startingOffsets' must be earliest, latest, group, or a JSON object",
    ),
    (
        {"topics": "a", "startingOffsets": "group"},
        "option 'startingOffsets' is 'group' but option 'group' is not set",
    ),
    (
        {"topics": "a", "startingOffsets": '{"a": 5}'},
        "option 'startingOffsets': the position of 'a' must be an entry ID string",
    ),
    (
        {"topics": "a", "startingOffsets": '{"zzz": "1-0"}'},
        "option 'startingOffsets' names 'zzz', which is not in the subscription (topics a)",
    ),
    (
        {"topics": "a", "startingOffsets": '{"a": "x-1"}'},
        "option 'startingOffsets' for 'a' 'x-1' is not a Redis stream entry ID",
    ),
    ({"topics": "a", "startingOffsets": "{bad json"}, "option 'startingOffsets' is not valid JSON"),
    (
        {"topics": "a", "startingOffsets": "earliest", "startingTimestamp": "5"},
        "options 'startingOffsets' and 'startingTimestamp' cannot both be set",
    ),
    (
        {"topics": "a", "startingTimestamp": "yesterday"},
        "option 'startingTimestamp' must be epoch milliseconds (a non-negative integer), got 'yesterday'",
    ),
    (
        {"topics": "a", "endingOffsets": "soon"},
        "option 'endingOffsets' must be latest or a JSON object",
    ),
    (
        {"topics": "a", "maxEntriesPerTrigger": "0"},
        "option 'maxEntriesPerTrigger' must be a positive integer, got '0'",
    ),
    (
        {"topics": "a", "maxEntriesPerPartition": "lots"},
        "option 'maxEntriesPerPartition' must be a positive integer, got 'lots'",
    ),
    ({"topics": "a", "pageSize": "-5"}, "option 'pageSize' must be a positive integer, got '-5'"),
    (
        {"topics": "a", "failOnDataLoss": "maybe"},
        "option 'failOnDataLoss' must be 'true' or 'false', got 'maybe'",
    ),
    (
        {"topics": "a", "includeRawFields": "yes"},
        "option 'includeRawFields' must be 'true' or 'false', got 'yes'",
    ),
    ({"topics": "a", "format": "avro"}, "option 'format' must be one of envelope, raw, got 'avro'"),
    ({"topics": "a", "group": ""}, "option 'group' must not be empty"),
    ({"topics": "a", "streamPrefix": ""}, "option 'streamPrefix' must not be empty"),
    (
        {"topics": "a", "maxEntriesPerTriger": "5"},
        "unknown option 'maxEntriesPerTriger'. Did you mean 'maxEntriesPerTrigger'?",
    ),
    ({"topics": "a", "deadLetterTable": "  "}, "option 'deadLetterTable' must not be empty"),
    (
        {"topics": "a", "deadLetterTable": "/tmp/x", "format": "raw"},
        "option 'deadLetterTable' needs format=envelope: format=raw does not decode entries, so "
        "none is malformed; remove one of the two options",
    ),
    (
        {"topics": "a", "trimConsumed": "yes"},
        "option 'trimConsumed' must be 'true' or 'false', got 'yes'",
    ),
    (
        {"topics": "a", "minEntriesPerTrigger": "0"},
        "option 'minEntriesPerTrigger' must be a positive integer, got '0'",
    ),
    (
        {"topics": "a", "minEntriesPerTrigger": "10", "maxTriggerDelay": "soon"},
        "option 'maxTriggerDelay' must be a duration like 500ms, 2s, 15m, 1h or 1d (a bare "
        "number is milliseconds), got 'soon'",
    ),
    (
        {"topics": "a", "maxTriggerDelay": "2s"},
        "option 'maxTriggerDelay' needs option 'minEntriesPerTrigger': the delay bounds how long "
        "a trigger waits for that many entries",
    ),
    (
        {"topics": "a", "minEntriesPerTrigger": "100", "maxEntriesPerTrigger": "10"},
        "option 'minEntriesPerTrigger' (100) must not exceed option 'maxEntriesPerTrigger' (10)",
    ),
    (
        {"topics": "a", "sweepMaxDeliveries": "3"},
        "option 'sweepMaxDeliveries' needs option 'sweepGroup': name the consumer group whose "
        "retry-exhausted entries the source should dead-letter",
    ),
    (
        {"topics": "a", "sweepGroup": "g", "deadLetterTable": "/tmp/x"},
        "option 'sweepGroup' needs option 'sweepMaxDeliveries': how many deliveries make an "
        "entry retry-exhausted (the bus's own retry limit, e.g. 3)",
    ),
    (
        {"topics": "a", "sweepGroup": "g", "sweepMaxDeliveries": "3"},
        "option 'sweepGroup' needs option 'deadLetterTable': retry-exhausted entries are "
        "acknowledged only once their dead letter is written",
    ),
    (
        {
            "topics": "a",
            "sweepGroup": "g",
            "sweepMaxDeliveries": "3",
            "deadLetterTable": "/t",
            "sweepMinIdle": "-1s",
        },
        "option 'sweepMinIdle' must be a duration like 500ms, 2s, 15m, 1h or 1d (a bare number "
        "is milliseconds), got '-1s'",
    ),
    ({"topics": "a", "pendingOf": " "}, "option 'pendingOf' must not be empty"),
    ({"topics": ""}, "option 'topics' must be a comma-separated list of non-empty names, got ''"),
    (
        {"streams": "x,,y"},
        "option 'streams' must be a comma-separated list of non-empty names, got 'x,,y'",
    ),
    ({"streams": "x,x"}, "option 'streams' lists x more than once"),
    (
        {"topics": "a", "startingOffsets": '{"a": "latest"}'},
        "option 'startingOffsets': 'latest' per topic is not supported (topic 'a'); use "
        "startingOffsets=latest for all topics, or give an entry ID",
    ),
    (
        {"topics": "a", "startingOffsets": '{"a": "Latest"}'},
        "option 'startingOffsets': 'latest' per topic is not supported (topic 'a'); use "
        "startingOffsets=latest for all topics, or give an entry ID",
    ),
    (
        {"topics": "a", "startingOffsets": "{}"},
        'option \'startingOffsets\' must be a non-empty JSON object like {"topic": "1700000000000-0"}',
    ),
    (
        {"topics": "a", "startingTimestamp": "-1"},
        "option 'startingTimestamp' must be epoch milliseconds (a non-negative integer), got '-1'",
    ),
    (
        {"topics": "a", "endingOffsets": '{"a": "latest"}'},
        "option 'endingOffsets' for 'a' 'latest' is not a Redis stream entry ID",
    ),
    (
        {"topics": "a", "endingTimestamp": "1700000000000", "endingOffsets": '{"a": "1-0"}'},
        "options 'endingOffsets' and 'endingTimestamp' cannot both be set",
    ),
    (
        {"topics": "a", "endingTimestamp": "10:05"},
        "option 'endingTimestamp' must be epoch milliseconds (a non-negative integer), got '10:05'",
    ),
    (
        {"topics": "a", "startingTimestamp": "2000", "endingTimestamp": "1000"},
        "option 'endingTimestamp' (1000) is before option 'startingTimestamp' (2000)",
    ),
    (
        {"topics": "a", "endingTimestamp": "1000", "pendingOf": "workers"},
        "option 'endingTimestamp' does not apply with option 'pendingOf'",
    ),
    (
        {"topics": "a", "maxEntriesPerTrigger": "1e3"},
        "option 'maxEntriesPerTrigger' must be a positive integer, got '1e3'",
    ),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS, ids=[m[:50] for _, m in BAD_OPTIONS])
def test_bad_option_is_refused_with_its_name_and_fix(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_source_options(options)
    assert message in str(info.value)


def test_keys_are_case_insensitive_and_values_typed() -> None:
    parsed = parse_source_options(
        {
            "TOPICS": "orders, payments",
            "maxentriespertrigger": "1000",
            "StartingOffsets": '{"orders": "5-1"}',
            "streamprefix": "bus",
            "FORMAT": "RAW",
        }
    )
    assert parsed.subscription.fixed_streams() == ("bus:orders", "bus:payments")
    assert parsed.max_entries_per_trigger == 1000
    assert parsed.starting.kind == "offsets"
    assert dict(parsed.starting.offsets) == {"bus:orders": EntryId(5, 1)}
    assert parsed.format == "raw"


def test_dead_letter_table_is_parsed_and_off_by_default() -> None:
    assert parse_source_options({"topics": "a"}).dead_letter_table is None
    parsed = parse_source_options({"topics": "a", "DeadLetterTable": " /lake/dlq "})
    assert parsed.dead_letter_table == "/lake/dlq"


def test_operations_options_are_parsed_into_policies() -> None:
    plain = parse_source_options({"topics": "a"})
    assert (plain.pacing, plain.trim_consumed, plain.pending_of, plain.sweep) == (
        None,
        False,
        None,
        None,
    )
    parsed = parse_source_options(
        {
            "topics": "a",
            "minEntriesPerTrigger": "1000",
            "maxtriggerdelay": "2s",
            "trimConsumed": "TRUE",
            "sweepGroup": "workers",
            "sweepMaxDeliveries": "3",
            "sweepMinIdle": "1m",
            "sweepDelete": "true",
            "deadLetterTable": "/lake/dlq",
        }
    )
    assert parsed.pacing == TriggerPacing(min_entries=1000, max_delay_ms=2000)
    assert parsed.trim_consumed is True
    assert parse_source_options({"topics": "a", "pendingOf": " workers "}).pending_of == "workers"
    assert parsed.sweep == SweepPolicy("workers", 3, 60_000, delete=True)
    defaults = parse_source_options({"topics": "a", "minEntriesPerTrigger": "5"})
    assert defaults.pacing == TriggerPacing(5, 15 * 60 * 1000)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250", 250),
        ("250ms", 250),
        ("2s", 2000),
        ("2 s", 2000),
        ("15m", 900_000),
        ("15min", 900_000),
        ("1h", 3_600_000),
        ("1D", 86_400_000),
        ("0", 0),
    ],
)
def test_durations_read_as_spark_writes_them(text: str, ms: int) -> None:
    parsed = parse_source_options(
        {"topics": "a", "minEntriesPerTrigger": "1", "maxTriggerDelay": text}
    )
    assert parsed.pacing is not None and parsed.pacing.max_delay_ms == ms


def test_password_never_appears_in_the_options_repr() -> None:
    parsed = parse_source_options(
        {
            "topics": "a",
            "url": "redis://user:s3cretpw@db.example:6380/0",
            "password": "other-secret",
        }
    )
    shown = repr(parsed)
    assert "s3cretpw" not in shown and "other-secret" not in shown
    assert "db.example:6380" in shown


def test_a_bad_option_fails_at_load_in_spark(spark: Any) -> None:
    reader = spark.readStream.format("atlasbus").option("topics", "a").option("pageSize", "0")
    with pytest.raises(Exception, match="option 'pageSize' must be a positive integer, got '0'"):
        reader.load()
    batch = spark.read.format("atlasbus").option("topics", "a").option("startingOffsets", "latest")
    with pytest.raises(Exception, match="cannot be 'latest' for a batch read"):
        batch.load().collect()
    stream = (
        spark.readStream.format("atlasbus")
        .option("topics", "a")
        .option("endingOffsets", '{"a": "1-0"}')
    )
    with pytest.raises(Exception, match="'endingOffsets' is for batch reads"):
        stream.load().writeStream.format("noop").start().awaitTermination(30)


# startingOffsets / endingOffsets keys: with topics or topicPattern a key is a topic or the full
# stream key of a subscribed stream (as checkpoints and progress reports show them); with
# streams it is a stream key. Each row: subscription options, key, the stream it names.
OFFSET_KEYS = [
    ({"topics": "orders,payments"}, "orders", "atlas_bus:orders"),
    ({"topics": "orders,payments"}, "atlas_bus:payments", "atlas_bus:payments"),
    ({"topics": "orders", "streamPrefix": "bus"}, "bus:orders", "bus:orders"),
    ({"topicPattern": "orders-*"}, "orders-eu", "atlas_bus:orders-eu"),
    ({"topicPattern": "orders-*"}, "atlas_bus:orders-eu", "atlas_bus:orders-eu"),
    ({"topicPattern": "*", "streamPrefix": "p"}, "a", "p:a"),
    ({"topicPattern": "*", "streamPrefix": "p"}, "p:a", "p:a"),  # the key of topic a's stream
    ({"topicPattern": "*", "streamPrefix": "p"}, "p:p:a", "p:p:a"),  # topic 'p:a'
    ({"streams": "raw:x,y"}, "raw:x", "raw:x"),
    ({"streams": "raw:x,y"}, "y", "y"),
    ({"topics": "a,p:a", "streamPrefix": "p"}, "p:a", "p:a"),  # a stream key wins over a topic
    ({"topics": "a,p:a", "streamPrefix": "p"}, "p:p:a", "p:p:a"),
]


@pytest.mark.parametrize(("subscription", "key", "stream"), OFFSET_KEYS)
@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
def test_offsets_are_keyed_by_topic_or_stream_key(
    option: str, subscription: dict[str, str], key: str, stream: str
) -> None:
    parsed = parse_source_options({**subscription, option: json.dumps({key: "5-1"})})
    offsets = parsed.starting.offsets if option == "startingOffsets" else parsed.ending
    assert dict(offsets or {}) == {stream: EntryId(5, 1)}


BAD_OFFSET_KEYS = [
    (
        {"topics": "a,b"},
        {"zzz": "1-0"},
        "option 'OPTION' names 'zzz', which is not in the subscription (topics a, b); accepted "
        "keys: the topics a, b, or their stream keys atlas_bus:a, atlas_bus:b",
    ),
    (
        {"topics": "a", "streamPrefix": "bus"},
        {"atlas_bus:a": "1-0"},
        "option 'OPTION' names 'atlas_bus:a', which is not in the subscription (topics a); "
        "accepted keys: the topics a, or their stream keys bus:a",
    ),
    (
        {"topicPattern": "orders-*"},
        {"payments": "1-0"},
        "option 'OPTION' names 'payments', which is not in the subscription (topicPattern "
        "'orders-*'); accepted keys: topics matching 'orders-*', or stream keys matching "
        "'atlas_bus:orders-*'",
    ),
    (
        {"streams": "x,y"},
        {"atlas_bus:x": "1-0"},
        "option 'OPTION' names 'atlas_bus:x', which is not in the subscription (streams x, y); "
        "accepted keys: the stream keys x, y",
    ),
    (
        {"topics": "a"},
        {"a": "1-0", "atlas_bus:a": "2-0"},
        "option 'OPTION' names stream 'atlas_bus:a' twice, as 'a' and as 'atlas_bus:a'; keep one",
    ),
    (
        {"topics": "a,b"},
        '{"a": "1-0", "b": "1-0", "a": "2-0"}',
        "option 'OPTION' lists 'a' more than once",
    ),
]


@pytest.mark.parametrize(("subscription", "offsets", "message"), BAD_OFFSET_KEYS)
@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
def test_an_offsets_key_that_names_no_subscribed_stream_is_refused_with_what_is_accepted(
    option: str, subscription: dict[str, str], offsets: dict[str, str] | str, message: str
) -> None:
    text = offsets if isinstance(offsets, str) else json.dumps(offsets)
    with pytest.raises(ConfigurationError) as info:
        parse_source_options({**subscription, option: text})
    assert str(info.value) == message.replace("OPTION", option)
