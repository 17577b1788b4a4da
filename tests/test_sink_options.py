"""Bad sink options fail when the write starts, with an error naming option, value and fix.

One table holds every bad option and the exact error it must give. No Redis, no Spark.
"""

from __future__ import annotations

import pytest

from atlasbus.errors import ConfigurationError
from atlasbus.options import keys
from atlasbus.options.sink import DEFAULT_MAX_MESSAGE_BYTES, TOPIC_RULE, parse_sink_options

URL = "redis://127.0.0.1:1/0"
URL_FORM = (
    "redis://[user:password@]host[:port][/db], rediss://... (TLS), unix:///path/to.sock or "
    "redis+sentinel://[user:password@]sentinel[:port][,sentinel[:port]...]/master-name[/db]"
)
ACCEPTED = (
    "deadLetterTable, exactlyOnce, maxLen, maxMessageBytes, minReplicas, password, "
    "replicaTimeout, streamPrefix, topic, url, username"
)

BAD_OPTIONS = [
    ({"maxLen": "0"}, "option 'maxLen' must be a positive integer, got '0'"),
    ({"maxLen": "ten"}, "option 'maxLen' must be a positive integer, got 'ten'"),
    ({"maxLen": "1.5"}, "option 'maxLen' must be a positive integer, got '1.5'"),
    (
        {"maxLen": str(2**63)},
        f"option 'maxLen' must be a positive integer at most {2**63 - 1}, got '{2**63}'",
    ),
    ({"maxMessageBytes": "-1"}, "option 'maxMessageBytes' must be a positive integer, got '-1'"),
    ({"maxMessageBytes": "big"}, "option 'maxMessageBytes' must be a positive integer, got 'big'"),
    ({"exactlyOnce": "yes"}, "option 'exactlyOnce' must be 'true' or 'false', got 'yes'"),
    ({"topic": ""}, "option 'topic' must not be empty"),
    ({"topic": "  "}, "option 'topic' must not be empty"),
    (
        {"topic": "orders "},
        "option 'topic' ends with whitespace (' '), which the source's 'topics' option strips, "
        f"so it could not be read back by name; {TOPIC_RULE}",
    ),
    (
        {"topic": " orders"},
        "option 'topic' starts with whitespace (' '), which the source's 'topics' option "
        f"strips, so it could not be read back by name; {TOPIC_RULE}",
    ),
    (
        {"topic": "orders,payments"},
        "option 'topic' contains a comma, where the source's 'topics' option splits its list, "
        f"so it could not be read back by name; {TOPIC_RULE}",
    ),
    ({"streamPrefix": ""}, "option 'streamPrefix' must not be empty"),
    ({"StreamPrefix": " "}, "option 'streamPrefix' must not be empty"),
    (
        {"url": "http://x"},
        "option 'url' must be a Redis URL starting with redis://, rediss://, unix://, "
        f"redis+sentinel:// or rediss+sentinel://, got http://...; accepted: {URL_FORM}",
    ),
    (
        {"url": "redis://h:port/0"},
        "option 'url' has an invalid port (host 'h'), got 'redis://h:port/0': a port is an "
        "integer from 1 to 65535 (or leave it out for 6379)",
    ),
    ({"deadLetterTable": ""}, "option 'deadLetterTable' must not be empty"),
    (
        {"maxlength": "5"},
        "unknown option 'maxlength' (named in lower case, as Spark hands options over). Did you mean 'maxLen'? Accepted options: "
        + ACCEPTED,
    ),
    (
        {"topics": "a"},
        "unknown option 'topics'. Did you mean 'topic'? Accepted options: " + ACCEPTED,
    ),
    (
        {"startingOffsets": "earliest"},
        "unknown option 'startingOffsets'. Accepted options: " + ACCEPTED,
    ),
]


@pytest.mark.parametrize(("given", "message"), BAD_OPTIONS, ids=[m[:50] for _, m in BAD_OPTIONS])
def test_bad_option_is_refused_with_its_name_and_fix(given: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_sink_options({"url": URL, **given})
    assert str(caught.value) == message


def test_defaults() -> None:
    parsed = parse_sink_options({"url": URL})
    assert parsed.stream_prefix == keys.DEFAULT_STREAM_PREFIX == "atlas_bus"
    assert parsed.topic is None
    assert parsed.max_len is None
    assert parsed.max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES == 262_144
    assert parsed.exactly_once is True
    assert parsed.dead_letter_table is None


def test_keys_are_case_insensitive_and_values_typed() -> None:
    parsed = parse_sink_options(
        {
            "URL": URL,
            "STREAMPREFIX": "bus",
            "Topic": "orders",
            "maxlen": " 1000 ",
            "MaxMessageBytes": "512",
            "EXACTLYONCE": "False",
            "deadlettertable": " /lake/dlq ",
        }
    )
    assert (parsed.stream_prefix, parsed.topic, parsed.max_len) == ("bus", "orders", 1000)
    assert (parsed.max_message_bytes, parsed.exactly_once) == (512, False)
    assert parsed.dead_letter_table == "/lake/dlq"
    assert parsed.stream_key("orders") == "bus:orders"


def test_options_spark_adds_to_a_write_are_not_refused() -> None:
    given = {name: "x" for name in keys.SPARK_WRITE_OPTIONS}
    assert parse_sink_options({"url": URL, "topic": "t", **given}).topic == "t"


def test_password_never_appears_in_the_options_repr() -> None:
    parsed = parse_sink_options({"url": "redis://:s3cret@db.example:6380/0", "password": "hunter2"})
    shown = repr(parsed)
    assert "s3cret" not in shown and "hunter2" not in shown
    assert "db.example:6380" in shown
