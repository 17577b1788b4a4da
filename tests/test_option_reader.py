"""The typed option accessors and the options the source and the sink share. No Redis, no Spark."""

from __future__ import annotations

import pytest

from atlasbus.errors import ConfigurationError
from atlasbus.options import keys
from atlasbus.options.reader import OptionReader, parse_shared_options
from atlasbus.options.sink import parse_sink_options
from atlasbus.options.source import parse_source_options


def test_positive_int_returns_the_default_when_absent_and_the_value_when_given() -> None:
    reader = OptionReader({"PAGESIZE": " 7 "})
    assert reader.positive_int("pageSize", default=1000) == 7
    assert reader.positive_int("maxLen", default=5) == 5
    assert reader.positive_int("maxLen") is None


@pytest.mark.parametrize("raw", ["0", "-3", "1.5", "ten", "", " "])
def test_positive_int_refuses_what_is_not_a_positive_integer(raw: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        OptionReader({"pageSize": raw}).positive_int("pageSize", default=1000)
    assert str(caught.value) == f"option 'pageSize' must be a positive integer, got {raw!r}"


def test_boolean_and_choice_ignore_case_and_name_what_is_accepted() -> None:
    reader = OptionReader({"flag": "TRUE", "format": "Raw"})
    assert reader.boolean("flag", False) is True
    assert reader.choice("format", ("envelope", "raw"), "envelope") == "raw"
    assert OptionReader({}).boolean("flag", True) is True
    with pytest.raises(ConfigurationError, match=r"^option 'flag' must be 'true' or 'false'"):
        OptionReader({"flag": "1"}).boolean("flag", False)


def test_non_empty_keeps_the_value_as_given_and_refuses_blank() -> None:
    assert OptionReader({"topic": " a "}).non_empty("topic") == " a "
    assert OptionReader({}).non_empty("topic") is None
    with pytest.raises(ConfigurationError) as caught:
        OptionReader({"Topic": "\t"}).non_empty("topic")
    assert str(caught.value) == "option 'topic' must not be empty"


def test_unknown_options_are_refused_with_the_closest_name_unless_read_or_ignored() -> None:
    reader = OptionReader({"pageSize": "5", "path": "/x", "pagesise": "6"})
    reader.positive_int("pageSize", default=1)
    with pytest.raises(ConfigurationError) as caught:
        reader.reject_unknown(("pageSize", "url"), ignored=("path",))
    assert str(caught.value) == (
        "unknown option 'pagesise' (named in lower case, as Spark hands options over). Did you mean 'pageSize'? Accepted options: pageSize, url"
    )


def test_shared_options_defaults() -> None:
    shared = parse_shared_options(OptionReader({"url": "redis://h:1/0"}))
    assert shared.stream_prefix == keys.DEFAULT_STREAM_PREFIX == "atlas_bus"
    assert shared.dead_letter_table is None
    assert shared.endpoint.description == "h:1"


def test_source_and_sink_parse_the_shared_options_alike() -> None:
    shared_given = {
        "URL": "redis://h:1/0",
        "Username": "u",
        "PASSWORD": "p",
        "streamprefix": "bus",
        "deadlettertable": " /lake/dlq ",
    }
    shared = parse_shared_options(OptionReader(shared_given))
    assert (shared.stream_prefix, shared.dead_letter_table) == ("bus", "/lake/dlq")
    assert (shared.endpoint.username, shared.endpoint.password) == ("u", "p")
    source = parse_source_options({**shared_given, "topics": "a"})
    sink = parse_sink_options({**shared_given, "topic": "a"})
    assert source.endpoint == sink.endpoint == shared.endpoint
    assert source.subscription.stream_prefix == sink.stream_prefix == shared.stream_prefix
    assert source.dead_letter_table == sink.dead_letter_table == shared.dead_letter_table


def test_every_shared_key_is_accepted_by_both() -> None:
    shared = {
        keys.URL,
        keys.USERNAME,
        keys.PASSWORD,
        keys.STREAM_PREFIX,
        keys.DEAD_LETTER_TABLE,
        keys.MIN_REPLICAS,
        keys.REPLICA_TIMEOUT,
    }
    assert shared <= set(keys.SOURCE_OPTIONS)
    assert shared <= set(keys.SINK_OPTIONS)
    assert set(keys.SOURCE_OPTIONS) & set(keys.SINK_OPTIONS) == shared
