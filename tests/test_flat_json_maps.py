"""The compiled parser of flat JSON maps against orjson's path, value by value.

``tracing`` and ``metadata`` of a column page go through ``atlasbus.decoding.kernels.flat_json_maps`` when all
are flat objects of strings, else through orjson. Both must give every entry the same map (or
the same error): pages of plain flat objects must take the compiled path and give the maps
written; pages with one value spoiled in any way must decode as the hiredis entry lists do.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from atlasbus.decoding.decoder import decode_envelope_page
from atlasbus.decoding.kernels.flat_json_maps import flat_string_maps
from helpers import column_page_of

FUZZ = settings(max_examples=300, deadline=None)
# What a string may hold on the compiled path: no quote, backslash or control character.
PLAIN_TEXT = st.text(
    st.characters(codec="utf-8", exclude_characters='"\\', min_codepoint=0x20), max_size=20
)
ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=8)
JSON_SPACE = st.sampled_from(["", " ", "\t", "\n", "\r\n  "])
Pairs = list[tuple[str, str | None]]


@st.composite
def flat_objects(draw: st.DrawFn) -> tuple[bytes, Pairs]:
    """A flat JSON object of plain strings (or nulls), spaced in any JSON way, and its pairs."""
    keys = draw(st.lists(PLAIN_TEXT, unique=True, max_size=5))
    pairs: Pairs = [(key, draw(st.none() | PLAIN_TEXT)) for key in keys]

    def space() -> str:
        return draw(JSON_SPACE)

    members = [
        f'"{key}"{space()}:{space()}' + ("null" if value is None else f'"{value}"')
        for key, value in pairs
    ]
    text = space() + "{" + space() + f"{space()},{space()}".join(members) + space() + "}" + space()
    return text.encode(), pairs


def spoiled(draw: st.DrawFn, text: bytes) -> bytes:
    """``text`` changed in one of the ways the compiled path must leave to orjson."""
    kind = draw(
        st.sampled_from(
            [
                "escape",
                "control",
                "number",
                "nested",
                "repeated key",
                "bad utf-8",
                "cut",
                "trailing",
                "byte order mark",
                "not json space",
                "not an object",
                "literal",
            ]
        )
    )
    if kind == "escape":
        value = json.dumps(draw(ANY_TEXT) + draw(st.sampled_from(['"', "\\", "\n", "é"])))
        return f'{{"k": {value}}}'.encode()
    if kind == "control":
        return b'{"k": "a' + bytes([draw(st.integers(0, 31))]) + b'"}'
    if kind == "number":
        return f'{{"k": {draw(st.sampled_from(["1", "1.50", "-0", "1e400", "12345678901234567890123"]))}}}'.encode()
    if kind == "nested":
        return draw(st.sampled_from([b'{"k": {"a": "b"}}', b'{"k": []}', b'{"k": ["x", null]}']))
    if kind == "repeated key":
        return draw(st.sampled_from([b'{"k": "1", "k": "2"}', b'{"a": "1", "b": null, "a": null}']))
    if kind == "bad utf-8":
        bad = draw(
            st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"])
        )
        return b'{"k' + bad + b'": "v"}' if draw(st.booleans()) else b'{"k": "v' + bad + b'"}'
    if kind == "cut":
        return text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    if kind == "trailing":
        return text + draw(st.sampled_from([b"x", b"}", b",", b"{}", b"\x00"]))
    if kind == "byte order mark":
        return b"\xef\xbb\xbf" + text
    if kind == "not json space":
        return draw(st.sampled_from([b'{\x0b"k": "v"}', b'{"k":\x0c"v"}', b'\xc2\xa0{"k": "v"}']))
    if kind == "not an object":
        return draw(st.sampled_from([b'"k"', b"null", b'["k"]', b"1", b""]))
    return draw(st.sampled_from([b'{"k": true}', b'{"k": nul}', b'{"k": NULL}', b'{"k": false}']))


def entries_of(texts: list[bytes]) -> list[Any]:
    return [
        (f"1-{seq}".encode(), [b"payload", b"{}", b"priority", b"1", b"tracing", text])
        for seq, text in enumerate(texts)
    ]


def decoded(page: Any) -> tuple[list[dict[str, Any]], Any]:
    result = decode_envelope_page(page, topic="t", stream="s:t", include_raw_fields=False)
    return result.batch.to_pylist(), result.reasons


@FUZZ
@given(st.lists(flat_objects(), min_size=1, max_size=12))
def test_a_page_of_flat_objects_takes_the_compiled_path_and_gives_their_maps(
    objects: list[tuple[bytes, Pairs]],
) -> None:
    texts = [text for text, _ in objects]
    maps = flat_string_maps(pa.array(texts, pa.binary()))

    assert maps is not None
    assert maps.type == pa.map_(pa.string(), pa.string())
    assert maps.to_pylist() == [pairs for _, pairs in objects]
    entries = entries_of(texts)
    assert decoded(column_page_of(entries)) == decoded(entries)


@FUZZ
@given(st.lists(flat_objects(), min_size=1, max_size=12), st.data())
def test_a_page_with_a_spoiled_value_decodes_as_orjson_decodes_it(
    objects: list[tuple[bytes, Pairs]], data: st.DataObject
) -> None:
    texts = [text for text, _ in objects]
    row = data.draw(st.integers(0, len(texts) - 1))
    texts[row] = data.draw(st.composite(lambda draw: spoiled(draw, texts[row]))())
    entries = entries_of(texts)

    rows, reasons = decoded(entries)
    assert decoded(column_page_of(entries)) == (rows, reasons)
    maps = flat_string_maps(pa.array(texts, pa.binary()))
    if maps is not None:  # the spoiling left a flat object of strings (a cut at its end, say)
        assert reasons is None
        assert maps.to_pylist() == [r["tracing"] for r in rows]


def test_values_are_taken_where_they_lie_in_a_sliced_array() -> None:
    texts = [b'{"skipped": "x"}', b'{"a": "1"}', b' {"b" : null} ']
    maps = flat_string_maps(pa.array(texts, pa.binary()).slice(1))

    assert maps is not None
    assert maps.to_pylist() == [[("a", "1")], [("b", None)]]


def test_a_repeated_key_is_left_to_orjson_which_keeps_the_last_value() -> None:
    texts = [b'{"a": "1", "b": "2", "a": "3"}']
    entries = entries_of(texts)

    assert flat_string_maps(pa.array(texts, pa.binary())) is None
    rows, _ = decoded(column_page_of(entries))
    assert rows[0]["tracing"] == [("a", "3"), ("b", "2")]


def test_a_value_that_is_not_utf8_is_an_error_row_naming_the_field() -> None:
    texts = [b'{"a": "1"}', b'{"a": "\xff"}']
    entries = entries_of(texts)

    assert flat_string_maps(pa.array(texts, pa.binary())) is None
    rows, reasons = decoded(column_page_of(entries))
    assert reasons == [None, "invalid-utf8"]
    assert rows[0]["tracing"] == [("a", "1")]
    assert rows[1]["error"] == "field 'tracing' is not valid UTF-8 (byte 7)"


def test_a_quote_backslash_or_control_byte_is_seen_wherever_it_lies_in_a_word() -> None:
    """Strings are scanned 8 bytes at a time: a special byte at any offset ends the fast scan."""
    for at in range(20):
        for special in (b'\\"', b"\\\\", b"\x01", b"\x1f", b'"'):
            text = b"a" * at + special + b"b" * (19 - at)
            value = b'{"k": "' + text + b'"}'
            entries = entries_of([value, b'{"plain": "' + b"c" * 30 + b'"}'])
            assert decoded(column_page_of(entries)) == decoded(entries), value
            maps = flat_string_maps(pa.array([value], pa.binary()))
            assert maps is None  # an escape, a control byte or a broken string: orjson's path


def test_a_byte_past_ascii_is_seen_wherever_it_lies_in_a_key_or_a_value() -> None:
    """Keys and values copied as they lie are taken as UTF-8 when all their bytes are ASCII,
    read 8 at a time and the last few one by one; others are checked. An invalid byte at any
    offset of a key or a value must be an error row naming the field, and valid UTF-8 there
    must be taken as it is."""
    for length in (1, 7, 8, 9, 16, 17):
        for at in range(length):
            for where in ("key", "value"):
                for odd, is_valid in ((b"\xff", False), (b"\xc3\xa9", True)):
                    text = b"a" * at + odd + b"b" * (length - at - 1)
                    pair = (text, b"v") if where == "key" else (b"k", text)
                    value = b'{"' + pair[0] + b'": "' + pair[1] + b'"}'
                    texts = [b'{"plain": "' + b"c" * 30 + b'"}', value]
                    maps = flat_string_maps(pa.array(texts, pa.binary()))
                    rows, reasons = decoded(column_page_of(entries_of(texts)))
                    if is_valid:
                        expected = [(pair[0].decode(), pair[1].decode())]
                        assert maps is not None and maps.to_pylist()[1] == expected, value
                        assert reasons is None and rows[1]["tracing"] == expected
                    else:
                        assert maps is None, value
                        assert reasons == [None, "invalid-utf8"], value
                        assert rows[1]["error"].startswith("field 'tracing' is not valid UTF-8")


def test_the_tightest_objects_fit_the_buffers_sized_from_the_column() -> None:
    """Keys and values are copied in one pass into buffers sized for the most pairs a
    column's bytes can hold: objects of nothing but the shortest pairs fill them."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    objects = [[(letter, "") for letter in letters[:n]] for n in range(27)]
    objects += [[(letter, None) for letter in letters[:n]] for n in (1, 26)]
    texts = [
        ("{" + ",".join(f'"{key}":{json.dumps(value)}' for key, value in pairs) + "}").encode()
        for pairs in objects
    ]
    maps = flat_string_maps(pa.array(texts, pa.binary()))

    assert maps is not None
    assert maps.to_pylist() == objects
    assert flat_string_maps(pa.array([b'{"":""}'] * 5, pa.binary())).to_pylist() == [[("", "")]] * 5
