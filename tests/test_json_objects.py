"""The fast JSON-object checks say yes only where orjson, the contract's parser, says yes.

``all_json_objects`` (simdjson, on a list of values) and ``json_object_texts`` (compiled, on
a column page's Arrow column) decide whether a page's payloads skip the per-value check. If it ever
took a value orjson refuses, that entry would read as good on a page of good entries and as an
error row alone, and the sink would publish what the source then dead-letters. So: on edge
cases and on mutated documents, a yes must always be orjson's yes; and on ordinary documents
it must be yes, or the decoder silently loses its fast path.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atlasbus.decoding.decoder import decode_envelopes
from atlasbus.decoding.kernels.json_objects import json_object_texts
from atlasbus.wire.json_object_check import all_json_objects

BOM = b"\xef\xbb\xbf"


def compiled_check(values: list[bytes | None]) -> bool:
    """``json_object_texts`` as a yes or no; a yes must also give the values as text."""
    column = pa.array(values, pa.binary())
    texts = json_object_texts(column)
    if texts is not None:
        assert texts.to_pylist() == [value.decode() for value in values if value is not None]
    return texts is not None


CHECKS = pytest.mark.parametrize(
    "check",
    [pytest.param(all_json_objects, id="simdjson"), pytest.param(compiled_check, id="compiled")],
)


def orjson_object(value: bytes) -> bool:
    try:
        return type(orjson.loads(value)) is dict
    except orjson.JSONDecodeError:
        return False


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


# Values where parsers commonly disagree: each with orjson's verdict (is it a JSON object?).
EDGE_CASES = [
    (b'{"a":1}', True),
    (b' \t{"a":[]}\r\n', True),
    (b'{"a":"\\ud834\\udd1e","b":"\xc3\xa9"}', True),
    (b'{"a":1,"a":2}', True),
    (b'{"a":-0,"b":1E+2,"c":1e-400,"d":5e-324}', True),
    (BOM + b'{"a":1}', False),  # simdjson skips a leading byte order mark; orjson refuses it
    (BOM + b" {}", False),
    (b'{"a":"\\ud800"}', False),  # a lone surrogate escape
    (b'{"a":"\xff"}', False),  # not UTF-8
    (b'{"a":"\xed\xa0\x80"}', False),  # a surrogate encoded in UTF-8
    (b'{"\xc0\xaf":1}', False),  # an overlong encoding
    (b'{"a":NaN}', False),
    (b'{"a":1e999}', False),
    (b'{"a":01}', False),
    (b'{"a":1.}', False),
    (b'{"a":"tab\there"}', False),
    (b'{"a":1,}', False),
    (b'{"a":1} x', False),
    (b'{"a":1}\x00', False),
    (b"", False),
    (b"[1]", False),
    (b"1", False),
    (b'"text"', False),
    (nested(1100), False),
]
# orjson accepts these, simdjson does not: the check must say "not sure", never yes or a crash.
ORJSON_ONLY = [
    b'{"a":18446744073709551616}',  # beyond 64 bits
    b'{"a":-9223372036854775809}',
    nested(1024),
]


@CHECKS
@pytest.mark.parametrize(("value", "is_object"), EDGE_CASES)
def test_edge_cases_agree_with_orjson(check: Any, value: bytes, is_object: bool) -> None:
    assert orjson_object(value) is is_object
    assert check([value]) is is_object
    assert check([b"{}", value, b'{"b":2}']) is is_object


@pytest.mark.parametrize("value", ORJSON_ONLY)
def test_what_only_orjson_takes_is_left_to_orjson(value: bytes) -> None:
    assert orjson_object(value)
    assert all_json_objects([value]) is False


# orjson's verdicts where the compiled check's margins lie: nesting, surrogates, number sizes.
COMPILED_MARGINS = [
    (b'{"a":18446744073709551616}', True),  # a double to orjson, like any long integer
    (b'{"a":1.7976931348623157e308,"b":-17976931348623157e292}', True),  # the largest double
    (b'{"a":1' + b"0" * 308 + b"}", True),
    (b'{"a":0.5e308,"b":1e-999}', True),
    (b'{"a":"\\x"}', False),  # no such escape
    (b'{"a":"\\ud800"}', False),  # a lone surrogate
    (b'{"a":1.8e308}', False),  # infinite as a double
    (b'{"a":"\\u00e9\\n\\/"}', True),
    (b'{"a":"\\ud834\\udd1e"}', True),  # a surrogate pair
    (b'{"a":"\\udd1e\\ud834"}', False),  # low before high
    (nested(64), True),
]
# orjson takes these; the compiled check leaves them to it (a yes would be just as right).
COMPILED_NOT_SURE = [
    b'{"a":1.7976931348623158e308}',  # rounds down to the largest double
    nested(65),
    nested(1024),
    b'{"a":1e0001}',  # four exponent digits
]


@pytest.mark.parametrize(("value", "is_object"), COMPILED_MARGINS)
def test_the_compiled_check_at_its_margins(value: bytes, is_object: bool) -> None:
    assert orjson_object(value) is is_object
    assert compiled_check([value]) is is_object


@pytest.mark.parametrize("value", COMPILED_NOT_SURE)
def test_what_the_compiled_check_is_not_sure_of_is_left_to_orjson(value: bytes) -> None:
    assert orjson_object(value)
    assert compiled_check([value]) is False


@CHECKS
def test_absent_values_and_empty_pages(check: Any) -> None:
    assert check([]) is True
    assert check([b"{}", None]) is False


@pytest.mark.parametrize("payload", [BOM + b'{"n":1}', b'{"n":18446744073709551616}', nested(1024)])
def test_an_entry_decodes_the_same_alone_and_among_good_ones(payload: bytes) -> None:
    def entry(index: int, value: bytes) -> list[Any]:
        return [f"{index + 1}-0".encode(), [b"topic", b"t", b"priority", b"1", b"payload", value]]

    alone = decode_envelopes([entry(0, payload)], topic="t", stream="s", include_raw_fields=False)
    page = [entry(i, b'{"n":%d}' % i) for i in range(5)]
    page.insert(2, entry(2, payload))
    mixed = decode_envelopes(page, topic="t", stream="s", include_raw_fields=False)
    assert mixed.slice(2, 1).column("error").to_pylist() == alone.column("error").to_pylist()
    assert mixed.slice(2, 1).column("payload").to_pylist() == alone.column("payload").to_pylist()
    if payload.startswith(BOM):
        assert alone.column("error").to_pylist() == [
            f"field 'payload' is not valid JSON: {payload.decode()!r}"
        ]
    else:
        assert alone.column("error").to_pylist() == [None]
        assert alone.column("payload").to_pylist() == [payload.decode()]


# Bytes that break JSON in the ways parsers differ on: structure, numbers, escapes, encodings.
JSON_BYTES = [
    *b'{}[]",:0123456789.eE+-\\u tfnrl/ \t\n\r\x00\x7f',
    0x80, 0xBF, 0xC0, 0xC3, 0xA9, 0xED, 0xA0, 0xEF, 0xBB, 0xF0, 0x9F, 0xF4, 0x90,
]  # fmt: skip
SEEDS = [
    b'{"order_id":12,"items":[{"sku":"A","qty":2}],"note":"x\\n\\u00e9\\ud834\\udd1e"}',
    b'{"a":[true,false,null,-0.0e+1,"\\"",{}]}',
    '{"é":"ü€𝄞"}'.encode(),
    b'{"n":18446744073709551615,"m":-9223372036854775808,"f":1.7976931348623157e308}',
    BOM + b"{}",
    b'{"note":"' + b"x" * 21 + b'\\"' + b"y" * 13 + b'","n":[' + b"1" * 12 + b"]}",  # long runs
]


@st.composite
def mutated_documents(draw: st.DrawFn) -> bytes:
    value = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(value)))
        byte = draw(st.sampled_from(JSON_BYTES))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        if action == "insert" or not value:
            value[at:at] = bytes([byte])
        elif action == "delete":
            del value[min(at, len(value) - 1)]
        else:
            value[min(at, len(value) - 1)] = byte
    return bytes(value)


@settings(max_examples=3000, deadline=None)
@given(mutated_documents())
def test_a_yes_is_always_orjsons_yes(value: bytes) -> None:
    if all_json_objects([value]):
        assert orjson_object(value), value
    if compiled_check([value]):
        assert orjson_object(value), value


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(), JSON_VALUES, max_size=6), st.booleans())
def test_ordinary_objects_take_the_fast_path(document: dict[str, Any], ascii_only: bool) -> None:
    text = json.dumps(document, ensure_ascii=ascii_only).encode()
    assert all_json_objects([text, orjson.dumps(document)])
    assert compiled_check([text, orjson.dumps(document)])


@pytest.mark.parametrize("at", range(20))
def test_a_special_byte_is_seen_wherever_it_lies_in_a_long_string(at: int) -> None:
    """The compiled check scans strings 8 bytes at a time."""
    for special, is_object in ((b"\x01", False), (b"\x1f", False), (b'\\"', True), (b"\\q", False)):
        value = b'{"a":"' + b"x" * at + special + b"y" * (19 - at) + b'"}'
        assert orjson_object(value) is is_object
        assert compiled_check([value]) is is_object, value
    value = b'{"a":"' + b"x" * at + b'"' + b"y" * (19 - at) + b'"}'  # a string ended early
    assert orjson_object(value) is compiled_check([value]) is False


@pytest.mark.parametrize("length", range(18))
def test_strings_of_every_length_end_where_their_quote_is(length: int) -> None:
    """A word holding the closing quote goes straight to it: strings shorter than a word, a
    quote in each of a word's bytes, escapes and UTF-8 in the same word as the quote."""
    for text in ("x" * length, "é" * (length // 2) + "x" * (length % 2), "\\n" * (length // 2)):
        for following in (b"", b' ,"b":"\\"q\\""', b',"c":1'):
            value = b'{"' + b"k" * length + b'":"' + text.encode() + b'"' + following + b"}"
            assert orjson_object(value), value
            assert compiled_check([value]), value
    for at in range(length):  # the quote that ends the string early
        value = b'{"a":"' + b"x" * at + b'"' + b"y" * (length - at) + b'"}'
        assert compiled_check([value]) is orjson_object(value) is False, value
