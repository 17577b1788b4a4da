"""Fuzzing the decoder: pages of good and malformed entries, mixed in random order.

Every entry must decode exactly as it does alone, whatever its neighbours (so whichever path
the page takes); a malformed entry is an error row with the right reason code, a good one an
ordinary row with the values the wire format promises; ``fields`` restores the raw entry byte
for byte; and the batch always converts to Python and pandas (no timestamp out of range).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import orjson
import pyarrow as pa
import redis
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from atlasbus.decoding.cut_pages import ColumnPage, MixedPage, PairPage
from atlasbus.decoding.decoder import decode_envelope_page, decode_raw
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.options.source import parse_source_options
from atlasbus.planning.batch_plan import ReadRange
from atlasbus.reading.range_reader import read_range
from atlasbus.wire.raw_text import raw_bytes, raw_entry, raw_text
from helpers import WIRE, column_page_of, pair_page_of, raw_fields_of_pages

FIRST_SECOND = -62_135_424_000  # 0001-01-03T00:00:00Z
END_SECOND = 253_402_128_000  # 9999-12-30T00:00:00Z, excluded
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

FUZZ = settings(max_examples=200, deadline=None)
UTF8_TEXT = st.text(st.characters(codec="utf-8"), max_size=6)
# Bytes that make the escapes of ``fields`` work hard: backslashes, x, hex digits, invalid bytes.
TRICKY_BYTES = st.lists(
    st.sampled_from([b"\\", b"x", b"e", b"9", b"F", b"\xe9", b"\xff", b"\x80", b"\xc3\xa9", b"a"])
    | st.binary(max_size=2),
    max_size=8,
).map(b"".join)


# --- JSON fragments: the text we publish and the text the map column must show ---------------


@dataclass(frozen=True)
class Fragment:
    source: str  # as published (spacing and escapes vary)
    compact: str  # as the decoder writes a nested value: no spaces, numbers as written
    top: str | None  # as a map value: strings as they are, null as None, others compact


NUMBER_TEXTS = st.one_of(
    st.integers().map(str),
    st.integers(min_value=10**19, max_value=10**40).map(str),  # beyond 64 bits
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["1.50", "1E+2", "-0", "0.0", "-1.5e-7", "123456789012345678901234567890"]),
)


def _string_fragment(text: str, ascii_only: bool) -> Fragment:
    return Fragment(json.dumps(text, ensure_ascii=ascii_only), orjson.dumps(text).decode(), text)


BASE_FRAGMENTS = st.one_of(
    st.builds(
        _string_fragment, UTF8_TEXT | st.sampled_from(["\\", "\\xe9", "a\\\\b", ""]), st.booleans()
    ),
    NUMBER_TEXTS.map(lambda t: Fragment(t, t, t)),
    st.sampled_from(["true", "false"]).map(lambda t: Fragment(t, t, t)),
    st.just(Fragment("null", "null", None)),
)
SPACE = st.sampled_from(["", " ", "\n  "])


@st.composite
def _list_fragment(draw: st.DrawFn, children: st.SearchStrategy[Fragment]) -> Fragment:
    items = draw(st.lists(children, max_size=3))
    gap = draw(SPACE)
    compact = "[" + ",".join(i.compact for i in items) + "]"
    return Fragment("[" + f",{gap}".join(i.source for i in items) + "]", compact, compact)


@st.composite
def _object_fragment(draw: st.DrawFn, children: st.SearchStrategy[Fragment]) -> Fragment:
    pairs = draw(st.dictionaries(UTF8_TEXT, children, max_size=3))
    gap = draw(SPACE)
    compact = "{" + ",".join(orjson.dumps(k).decode() + ":" + v.compact for k, v in pairs.items())
    compact += "}"
    source = "{" + f",{gap}".join(f"{json.dumps(k)}:{gap}{v.source}" for k, v in pairs.items())
    return Fragment(source + "}", compact, compact)


FRAGMENTS = st.recursive(
    BASE_FRAGMENTS,
    lambda children: _list_fragment(children) | _object_fragment(children),
    max_leaves=4,
)


@st.composite
def json_objects(draw: st.DrawFn) -> tuple[bytes, dict[str, str | None]]:
    """A JSON object's text and the map the decoder must make of it."""
    pairs = draw(st.dictionaries(UTF8_TEXT, FRAGMENTS, max_size=3))
    gap = draw(SPACE)
    text = "{" + f",{gap}".join(f"{json.dumps(k)}: {v.source}" for k, v in pairs.items()) + "}"
    return text.encode(), {k: v.top for k, v in pairs.items()}


# --- entries ---------------------------------------------------------------------------------


@dataclass
class Case:
    """One entry as published, and what decoding it must give."""

    entry_id: bytes
    pairs: list[tuple[bytes, bytes]]
    reason: str | None = None  # None: well formed
    bad_field: str | None = None
    expected: dict[str, Any] = field(default_factory=dict)

    @property
    def raw(self) -> list[Any]:
        return [self.entry_id, [part for pair in self.pairs for part in pair]]


def _int_text(draw: st.DrawFn, value: int) -> bytes:
    shapes = [str(value), f" {value}\t", f"{'+' if value >= 0 else ''}{value}"]
    if value >= 0:
        shapes.append(f"{value:07d}")
    return draw(st.sampled_from(shapes)).encode()


def _micros_of(text: bytes) -> datetime:
    micros = int(float(text) * 1_000_000)  # Arrow's cast truncates toward zero, as int() does
    return EPOCH + timedelta(microseconds=micros)


@st.composite
def good_cases(draw: st.DrawFn) -> Case:
    expected: dict[str, Any] = {"error": None}
    fields: dict[bytes, bytes] = {}
    if draw(st.booleans()):
        fields[b"topic"] = draw(UTF8_TEXT).encode()
    priority = draw(st.integers(-(2**31), 2**31 - 1))
    fields[b"priority"] = _int_text(draw, priority)
    expected["priority"] = priority
    payload, _ = draw(json_objects())
    fields[b"payload"] = payload
    expected["payload"] = payload.decode()
    expected["correlation_id"] = None
    if draw(st.booleans()):
        correlation_id = draw(UTF8_TEXT | st.sampled_from(["\\xe9", "\\\\", ""]))
        fields[b"correlation_id"] = correlation_id.encode()
        expected["correlation_id"] = correlation_id
    for name in ("tracing", "metadata"):
        expected[name] = []
        if draw(st.booleans()):
            text, items = draw(json_objects() | st.just((b"{}", {})))
            fields[name.encode()] = text
            expected[name] = list(items.items())
    expected["delivery_attempts"] = 0
    if draw(st.booleans()):
        attempts = draw(st.integers(0, 2**31 - 1))
        fields[b"delivery_attempts"] = _int_text(draw, attempts)
        expected["delivery_attempts"] = attempts
    expected["enqueued_time"] = None
    if draw(st.booleans()):
        seconds = draw(st.floats(FIRST_SECOND + 1, END_SECOND - 1) | st.just(1700000000.25))
        shape = draw(st.sampled_from(["{:.6f}", "{!r}", "{:e}", " {} "]))
        text = shape.format(seconds).encode()
        fields[b"enqueued_time"] = text
        expected["enqueued_time"] = _micros_of(text)
    extras = draw(
        st.dictionaries(
            (TRICKY_BYTES | st.binary(max_size=6)).filter(lambda n: n not in WIRE),
            TRICKY_BYTES | st.binary(max_size=6),
            max_size=3,
        )
    )
    pairs = list(fields.items()) + list(extras.items())
    if draw(st.integers(0, 3)) == 0:
        pairs = draw(st.permutations(pairs))
    return Case(b"", pairs, expected=expected)


def _with(pairs: list[tuple[bytes, bytes]], name: bytes, value: bytes) -> list[tuple[bytes, bytes]]:
    if any(n == name for n, _ in pairs):
        return [(n, value if n == name else v) for n, v in pairs]
    return [*pairs, (name, value)]


def _not_utf8(draw: st.DrawFn, value: bytes) -> bytes:
    at = draw(st.integers(0, len(value)))
    spoiled = (
        value[:at] + draw(st.sampled_from([b"\xff", b"\xe9", b"\x80", b"\xc0\x80"])) + value[at:]
    )
    try:
        spoiled.decode("utf-8")
    except UnicodeDecodeError:
        return spoiled
    return spoiled + b"\xff"


_INTEGER = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+[ \t\n\v\f\r]*")
BAD_INTEGERS = st.sampled_from(
    [
        "high",
        "",
        " ",
        "0x10",
        "0X1F",
        "1e3",
        "2.5",
        "1_0",
        "+-1",
        "5 5",
        "٣",
        "2147483648",
        "-2147483649",
        "99999999999",
        "123456789012345678901234567890",
    ]
) | UTF8_TEXT.filter(lambda t: _INTEGER.fullmatch(t) is None)
BAD_TIMES = (
    st.sampled_from(
        [
            "1e13",
            "-1e13",
            "1e300",
            "-1e300",
            "1e400",
            "inf",
            "-inf",
            "+inf",
            "nan",
            "NaN",
            "nan(1)",
            "Infinity",
            "",
            "noon",
            "2023-11-14T22:13:20Z",
            "0x10",
            "1_0",
            "253402128000",
            "-62135424000.5",
            "9.3e12",
            "1700000000,5",
        ]
    )
    | st.floats(END_SECOND, 1e308).map(repr)
    | st.floats(-1e308, FIRST_SECOND - 1).map(repr)
)
NOT_JSON = st.sampled_from(
    [
        "{not json",
        "trace=1",
        "",
        "{'a': 1}",
        '{"a": NaN}',
        '{"a":1',
        "\ufeff{}",
        '{"a": "\\ud800"}',
        "[" * 2000,
        '{"a":' * 1100 + "1" + "}" * 1100,
        '{"a": 1} x',
        "{,}",
    ]
)
NOT_OBJECTS = st.sampled_from(
    ["[]", "[1, 2]", '"hi"', "1", "null", "true", " [ ] ", "123456789012345678901234567890"]
) | FRAGMENTS.filter(lambda f: not f.source.startswith("{")).map(lambda f: f.source)


@st.composite
def bad_cases(draw: st.DrawFn) -> Case:
    """A good entry spoiled in one way, with the reason code that way must give."""
    case = draw(good_cases())
    pairs = case.pairs
    kind = draw(
        st.sampled_from(["missing", "renamed", "utf8", "integer", "timestamp", "json", "object"])
    )
    if kind in ("missing", "renamed"):
        name = draw(st.sampled_from([b"payload", b"priority"]))
        spoiled = name[:2] + b"\xff" + name[2:]
        pairs = [(n, v) for n, v in pairs if n != name]
        if kind == "renamed":
            pairs.append((spoiled, draw(TRICKY_BYTES)))
        reason = "missing-field"
    elif kind == "utf8":
        name = draw(st.sampled_from(WIRE[1:]))
        current = dict(pairs).get(name, b"{}" if name in (b"tracing", b"metadata") else b"1")
        pairs, reason = _with(pairs, name, _not_utf8(draw, current)), "invalid-utf8"
    elif kind == "integer":
        name = draw(st.sampled_from([b"priority", b"delivery_attempts"]))
        pairs, reason = _with(pairs, name, draw(BAD_INTEGERS).encode()), "invalid-integer"
    elif kind == "timestamp":
        name = b"enqueued_time"
        pairs, reason = _with(pairs, name, draw(BAD_TIMES).encode()), "invalid-timestamp"
    else:
        name = draw(st.sampled_from([b"payload", b"tracing", b"metadata"]))
        value = draw(NOT_JSON if kind == "json" else NOT_OBJECTS).encode()
        reason = "invalid-json" if kind == "json" else "not-json-object"
        pairs = _with(pairs, name, value)
    return Case(b"", pairs, reason=reason, bad_field=name.decode())


ID_MS = st.sampled_from([0, 1_700_000_000_000, 253_402_127_999_999, 253_402_128_000_000, 2**64 - 1])


@st.composite
def pages(draw: st.DrawFn) -> list[Case]:
    cases = draw(st.lists(good_cases() | bad_cases(), min_size=1, max_size=8))
    ms = draw(ID_MS)
    for seq, case in enumerate(cases):
        case.entry_id = f"{ms}-{seq}".encode()
    return cases


@st.composite
def uniform_pages(draw: st.DrawFn) -> list[Case]:
    """Pages whose entries share one field layout, as a publisher writes them: the column path."""
    cases = draw(st.lists(good_cases() | bad_cases(), min_size=2, max_size=30))
    layouts: dict[frozenset[bytes], list[Case]] = {}
    for case in cases:
        names = [name for name, _ in case.pairs]
        if len(set(names)) == len(names):
            layouts.setdefault(frozenset(names), []).append(case)
    assume(layouts)
    chosen = max(layouts.values(), key=len)
    order = [name for name, _ in chosen[0].pairs]
    for case in chosen:  # the first entry's order: a publisher writes its fields in one order
        case.pairs.sort(key=lambda pair: order.index(pair[0]))
    ms = draw(ID_MS)
    for seq, case in enumerate(chosen):
        case.entry_id = f"{ms}-{seq}".encode()
    return chosen


# --- checks ----------------------------------------------------------------------------------


def decode(
    entries: list[Any] | ColumnPage | PairPage | MixedPage,
    include_raw_fields: bool,
    *,
    convert: bool = False,
) -> tuple[list[dict[str, Any]], Any]:
    page = decode_envelope_page(
        entries, topic="t", stream="s:t", include_raw_fields=include_raw_fields
    )
    if convert:
        page.batch.validate(full=True)
        page.batch.to_pandas()  # never raises: no timestamp out of range
    return page.batch.to_pylist(), page.reasons


ENVELOPE = ("priority", "correlation_id", "payload", "tracing", "metadata", "delivery_attempts")


def check_row(case: Case, row: dict[str, Any], reason: str | None) -> None:
    if case.reason is None:
        assert reason is None
        for column, value in case.expected.items():
            assert row[column] == value, column
    else:
        assert reason == case.reason, row["error"]
        assert row["error"] is not None and f"'{case.bad_field}'" in row["error"]
        assert all(row[column] is None for column in (*ENVELOPE, "enqueued_time"))
        assert row["fields"] is not None
    ms = int(case.entry_id.split(b"-")[0])
    expected_time = EPOCH + timedelta(milliseconds=ms) if ms < END_SECOND * 1000 else None
    assert row["timestamp"] == expected_time
    assert (row["topic"], row["stream"], row["id"]) == ("t", "s:t", case.entry_id.decode())


@FUZZ
@given(pages())
def test_every_entry_decodes_as_it_does_alone(cases: list[Case]) -> None:
    entries = [case.raw for case in cases]
    columns = column_page_of(entries)
    for include_raw_fields in (False, True):
        rows, reasons = decode(entries, include_raw_fields, convert=True)
        if columns is not None:  # cut into columns, the page decodes the same
            assert decode(columns, include_raw_fields) == (rows, reasons)
        # cut into names and values, whatever its layouts, too
        assert decode(pair_page_of(entries), include_raw_fields, convert=True) == (rows, reasons)
        assert len(rows) == len(cases)
        for index, case in enumerate(cases):
            alone, alone_reasons = decode([case.raw], include_raw_fields)
            assert rows[index] == alone[0]
            reason = reasons[index] if reasons is not None else None
            assert reason == (alone_reasons[0] if alone_reasons is not None else None)
            check_row(case, rows[index], reason)
            if include_raw_fields or case.reason is not None:
                assert raw_entry(rows[index]["fields"]) == case.pairs
            else:
                assert rows[index]["fields"] is None


@FUZZ
@given(uniform_pages())
def test_a_page_cut_into_columns_decodes_as_its_entries_do(cases: list[Case]) -> None:
    entries = [case.raw for case in cases]
    columns = column_page_of(entries)
    assert columns is not None
    maps = raw_fields_of_pages(entries)
    assert [raw_entry(fields) for fields in maps] == [case.pairs for case in cases]
    for include_raw_fields in (False, True):
        rows, reasons = decode(entries, include_raw_fields, convert=True)
        assert decode(columns, include_raw_fields, convert=True) == (rows, reasons)
        for index, case in enumerate(cases):
            reason = reasons[index] if reasons is not None else None
            check_row(case, rows[index], reason)


@FUZZ
@given(pages() | uniform_pages(), st.data())
def test_pages_cut_apart_and_decoded_as_one_decode_as_their_entries_do(
    cases: list[Case], data: st.DataObject
) -> None:
    """A hand-over's runs (a page of columns where the entries share a layout, else of names
    and values) decoded as one ``MixedPage``: each field's columns joined, whole in some
    parts, partial or absent in others."""
    entries = [case.raw for case in cases]
    cuts: set[int] = set()
    if len(entries) > 1:
        cuts = data.draw(st.sets(st.integers(1, len(entries) - 1), max_size=5), label="cuts")
    bounds = [0, *sorted(cuts), len(entries)]
    chunks = [entries[start:end] for start, end in pairwise(bounds)]
    mixed = MixedPage(tuple(column_page_of(chunk) or pair_page_of(chunk) for chunk in chunks))
    assert mixed.ids.to_pylist() == [entry_id for entry_id, _ in entries]
    for include_raw_fields in (False, True):
        assert decode(mixed, include_raw_fields, convert=True) == decode(
            entries, include_raw_fields
        )
    as_raw = decode_raw(mixed, topic="t", stream="s:t")
    as_raw.validate(full=True)
    assert as_raw.to_pylist() == decode_raw(entries, topic="t", stream="s:t").to_pylist()


@settings(max_examples=500, deadline=None)
@given(TRICKY_BYTES | st.binary())
def test_raw_text_round_trips_and_keeps_plain_text(value: bytes) -> None:
    text = raw_text(value)
    pa.array([text], pa.string()).validate(full=True)  # a valid Arrow (UTF-8) string
    assert raw_bytes(text) == value
    plain = value.decode("utf-8", "replace")
    if "\\x" not in plain and "\ufffd" not in plain:
        assert text == plain


@FUZZ
@given(TRICKY_BYTES, TRICKY_BYTES)
def test_raw_text_is_injective(a: bytes, b: bytes) -> None:
    assert (raw_text(a) == raw_text(b)) == (a == b)


def test_latin1_byte_and_its_escape_text_differ() -> None:
    assert raw_text(b"caf\xe9") == "caf\\xe9"
    assert raw_text(b"caf\\xe9") == "caf\\\\xe9"
    assert raw_text(b"\\\xe9") == "\\\\\\xe9"
    assert raw_text(b'{"a": "\\u00e9\\n"}') == '{"a": "\\u00e9\\n"}'
    assert raw_bytes("caf\\xe9") == b"caf\xe9" and raw_bytes("caf\\\\xe9") == b"caf\\xe9"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pages())
def test_through_redis_and_the_source_reader(redis_url: str, cases: list[Case]) -> None:
    """Published to a real redis-server and read by the source's reader, pages of 3."""
    prefix = f"f{uuid.uuid4().hex[:10]}"
    stream = f"{prefix}:t"
    client = redis.Redis.from_url(redis_url)
    try:
        for case in cases:
            case.entry_id = client.execute_command(
                "XADD", stream, "*", *[part for pair in case.pairs for part in pair]
            )
        options = parse_source_options(
            {
                "url": redis_url,
                "streamPrefix": prefix,
                "topics": "t",
                "pageSize": "3",
                "includeRawFields": "true",
            }
        )
        whole = ReadRange(stream, "t", ZERO, EntryId(2**63, 0))
        rows = [row for batch in read_range(options, whole) for row in batch.to_pylist()]
        raw_options = parse_source_options(
            {"url": redis_url, "streams": stream, "format": "raw", "pageSize": "3"}
        )
        raw_rows = [row for batch in read_range(raw_options, whole) for row in batch.to_pylist()]
    finally:
        client.delete(stream)
        client.close()
    assert len(rows) == len(cases)
    for case, row in zip(cases, rows, strict=True):
        alone = decode_envelope_page(
            [case.raw], topic="t", stream=stream, include_raw_fields=True
        ).batch.to_pylist()[0]
        assert row == alone
        assert (row["error"] is None) == (case.reason is None)
        assert raw_entry(row["fields"]) == case.pairs
    assert [(row["id"], raw_entry(row["fields"])) for row in raw_rows] == [
        (row["id"], case.pairs) for row, case in zip(rows, cases, strict=True)
    ]
