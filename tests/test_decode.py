"""The core decoder without Spark: a page decodes the same whichever path it takes.

A page whose values are all well formed is decoded column-wise in C; a page holding one bad
value is decoded row by row so the bad row can be named. These tests pin that the two paths
agree, so a malformed neighbour never changes how a good entry reads.
"""

from __future__ import annotations

import gc
import json
from datetime import UTC, datetime

import pytest
import redis

from atlasbus.decoding.cut_pages import PartialColumn
from atlasbus.decoding.decoder import decode_envelope_page, decode_envelopes, decode_raw
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.options.source import parse_source_options
from atlasbus.planning.batch_plan import ReadRange
from atlasbus.reading.range_reader import read_range
from atlasbus.wire.raw_text import raw_entry
from helpers import column_page_of, pair_page_of, publish, raw_fields_of_pages

TRACINGS = [
    {"trace_id": "a"},
    {},
    {"trace_id": "b", "span": "c"},
    {"n": 1, "ok": True, "nested": {"x": [1, 2]}, "none": None},
    {"ü": "✓"},
]


def entry(index: int, **overrides: bytes) -> list[object]:
    fields = {
        b"topic": b"t",
        b"priority": str(index % 10).encode(),
        b"payload": json.dumps({"n": index}).encode(),
        b"correlation_id": f"c{index}".encode(),
        b"tracing": json.dumps(TRACINGS[index % len(TRACINGS)]).encode(),
        b"metadata": b"{}" if index % 2 else json.dumps({"k": f"v{index}"}).encode(),
        b"delivery_attempts": b"0",
        b"enqueued_time": b"1700000000.25",
    }
    fields.update({name.encode(): value for name, value in overrides.items()})
    flat = [part for pair in fields.items() for part in pair]
    return [f"1700000000000-{index}".encode(), flat]


def rows(entries: list[list[object]]) -> list[dict[str, object]]:
    """The page decoded; cut into columns (when its layout allows), it must decode the same."""
    decoded = decode_envelopes(entries, topic="t", stream="s:t", include_raw_fields=False)
    columns = column_page_of(entries)
    if columns is not None:
        assert decode_envelopes(columns, topic="t", stream="s:t", include_raw_fields=False).equals(
            decoded
        )
    return list(decoded.to_pylist())


def test_map_values_that_are_not_strings_keep_their_json_text() -> None:
    row = rows([entry(3)])[0]
    assert row["error"] is None
    assert dict(row["tracing"]) == {
        "n": "1",
        "ok": "true",
        "nested": '{"x":[1,2]}',
        "none": None,
    }


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "true"), (1.5, "1.5"), (7, "7"), ([1, "a"], '[1,"a"]'), ({"x": None}, '{"x":null}')],
)
def test_each_kind_of_non_string_value_becomes_json_text(value: object, text: str) -> None:
    tracing = json.dumps({"trace_id": "a", "v": value}).encode()
    decoded = rows([entry(0, tracing=tracing), entry(1)])
    assert dict(decoded[0]["tracing"]) == {"trace_id": "a", "v": text}
    assert dict(decoded[1]["tracing"]) == TRACINGS[1]


def test_good_page_reads_every_column() -> None:
    decoded = rows([entry(i) for i in range(5)])
    assert [r["priority"] for r in decoded] == [0, 1, 2, 3, 4]
    assert [dict(r["tracing"]) for r in decoded[:3]] == [
        {"trace_id": "a"},
        {},
        {"trace_id": "b", "span": "c"},
    ]
    assert [dict(r["metadata"]) for r in decoded[:3]] == [{"k": "v0"}, {}, {"k": "v2"}]
    assert [r["payload"] for r in decoded] == [json.dumps({"n": i}) for i in range(5)]
    assert all(r["error"] is None and r["fields"] is None for r in decoded)


def test_topic_and_stream_columns_fit_each_page_whatever_came_before() -> None:
    """They are slices of columns kept from earlier pages: longer, shorter, other streams."""
    streams = [f"s:{n}" for n in range(40)]
    for size, stream in [
        (3, "s:t"),
        (7, "s:t"),
        (2, "s:t"),
        *((n % 5 + 1, s) for n, s in enumerate(streams)),
        (6, "s:t"),
    ]:
        batch = decode_envelopes(
            [entry(i) for i in range(size)],
            topic=stream[2:],
            stream=stream,
            include_raw_fields=False,
        )
        assert batch.column("topic").to_pylist() == [stream[2:]] * size
        assert batch.column("stream").to_pylist() == [stream] * size


def test_metadata_all_empty_objects_gives_empty_maps() -> None:
    decoded = rows([entry(i, metadata=b"{}") for i in range(4)])
    assert [r["metadata"] for r in decoded] == [[], [], [], []]


@pytest.mark.parametrize(
    ("field", "bad", "error"),
    [
        ("payload", b"{not json", "field 'payload' is not valid JSON: '{not json'"),
        ("payload", b"[1]", "field 'payload' is not a JSON object: '[1]'"),
        ("tracing", b"trace=1", "field 'tracing' is not valid JSON: 'trace=1'"),
        ("tracing", b'"x"', "field 'tracing' is not a JSON object: '\"x\"'"),
        ("metadata", b"[]", "field 'metadata' is not a JSON object: '[]'"),
        ("priority", b"high", "field 'priority' must be a decimal integer, got 'high'"),
    ],
)
def test_one_bad_value_does_not_change_its_neighbours(field: str, bad: bytes, error: str) -> None:
    good_page = [entry(i) for i in range(6)]
    mixed_page = [*good_page[:3], entry(99, **{field: bad}), *good_page[3:]]
    expected, decoded = rows(good_page), rows(mixed_page)
    assert decoded[:3] + decoded[4:] == expected
    assert decoded[3]["error"] == error
    assert decoded[3]["payload"] is None and decoded[3]["fields"] is not None


def test_reason_codes_are_given_only_for_bad_rows() -> None:
    page = decode_envelope_page(
        [entry(0), entry(1, tracing=b"[]"), entry(2)],
        topic="t",
        stream="s:t",
        include_raw_fields=False,
    )
    assert page.reasons == [None, "not-json-object", None]
    assert (
        decode_envelope_page([entry(0)], topic="t", stream="s:t", include_raw_fields=False).reasons
        is None
    )


def test_reading_a_range_pauses_the_cycle_collector_and_restores_it(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    stream = f"{prefix}:t"
    publish(r, prefix, "t", 25)
    options = parse_source_options(
        {"url": redis_url, "streamPrefix": prefix, "topics": "t", "pageSize": "10"}
    )
    whole = ReadRange(stream, "t", ZERO, EntryId(2**63, 0))
    assert gc.isenabled()
    seen = 0
    for batch in read_range(options, whole):
        assert not gc.isenabled()
        seen += batch.num_rows
    assert seen == 25 and gc.isenabled()

    batches = read_range(options, whole)
    next(batches)
    batches.close()  # a consumer that stops early (a limit) must not leave it off
    assert gc.isenabled()


# --- each value is judged alone --------------------------------------------------------------

# A neighbour that sends each column down its per-row path.
SPOILERS = {
    "priority": b"high",
    "delivery_attempts": b"x",
    "enqueued_time": b"noon",
    "payload": b"[",
    "tracing": b"[",
    "metadata": b"[",
    "correlation_id": b"\xff",
}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("priority", b"0x10"),
        ("priority", b"0X1F"),
        ("priority", b"05"),
        ("priority", b"+5"),
        ("priority", b" 5\t"),
        ("priority", b"-0"),
        ("priority", b"2147483648"),
        ("priority", b"-2147483648"),
        ("priority", b"1e3"),
        ("delivery_attempts", b"0x2"),
        ("delivery_attempts", b"00000000000000000000001"),
        ("enqueued_time", b"1e13"),
        ("enqueued_time", b"inf"),
        ("enqueued_time", b"nan(1)"),
        ("enqueued_time", b"Infinity"),
        ("enqueued_time", b"+.5"),
        ("enqueued_time", b" 1700000000 "),
        ("enqueued_time", b"1_0"),
        ("enqueued_time", b"1.7e9"),
        ("enqueued_time", b"-62135424000"),
        ("enqueued_time", b"253402127999.999"),
        ("enqueued_time", b"253402128000"),
        ("tracing", b'{"big": 123456789012345678901234567890, "f": 1.50}'),
        ("tracing", b'{"a": "\xe9"}'),
        ("metadata", b'{"n": {"deep": [1E+2, -0, 18446744073709551616]}}'),
        ("payload", b'{"a": "\\u00e9"}'),
        ("correlation_id", b"\\xe9"),
    ],
)
def test_a_value_decodes_the_same_alone_and_beside_any_neighbour(field: str, value: bytes) -> None:
    subject = entry(7, **{field: value})
    alone = rows([subject])[0]
    on_good_page = rows([entry(1), subject, entry(2)])[1]
    spoiled = SPOILERS[field] if field != "correlation_id" else b"\xfe"
    on_bad_page = rows([entry(1, **{field: spoiled}), subject, entry(2)])[1]
    assert on_good_page == alone
    assert on_bad_page == alone


def test_missing_delivery_attempts_reads_0_beside_a_malformed_neighbour() -> None:
    subject = entry(0)
    flat = subject[1]
    assert isinstance(flat, list)
    at = flat.index(b"delivery_attempts")
    subject[1] = flat[:at] + flat[at + 2 :]
    assert rows([subject])[0]["delivery_attempts"] == 0
    beside_bad = rows([subject, entry(1, priority=b"high")])
    assert beside_bad[0]["delivery_attempts"] == 0 and beside_bad[0]["error"] is None


def test_numbers_in_maps_keep_their_exact_text() -> None:
    tracing = b'{"big": 123456789012345678901234567890, "f": 1.50, "z": -0, "n": {"a": [1E+2]}}'
    for decoded in (rows([entry(0, tracing=tracing)]), rows([entry(0, tracing=tracing), entry(1)])):
        assert dict(decoded[0]["tracing"]) == {
            "big": "123456789012345678901234567890",
            "f": "1.50",
            "z": "-0",
            "n": '{"a":[1E+2]}',
        }


@pytest.mark.parametrize("field", ["tracing", "metadata"])
def test_non_utf8_map_text_is_invalid_utf8_not_invalid_json(field: str) -> None:
    page = decode_envelope_page(
        [entry(0), entry(1, **{field: b'{"a": "caf\xe9"}'})],
        topic="t",
        stream="s:t",
        include_raw_fields=False,
    )
    assert page.reasons == [None, "invalid-utf8"]
    assert page.batch.column("error")[1].as_py() == f"field '{field}' is not valid UTF-8 (byte 10)"


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (b"-62135424000", datetime(1, 1, 3, tzinfo=UTC)),
        (b"-62135424000.5", None),
        (b"253402127999.5", datetime(9999, 12, 29, 23, 59, 59, 500000, tzinfo=UTC)),
        (b"253402128000", None),
        (b"1e13", None),
        (b"-1e13", None),
        (b"1e300", None),
        (b"inf", None),
        (b"nan", None),
    ],
)
def test_enqueued_time_range_is_checked_for_the_whole_column(
    seconds: bytes, expected: datetime | None
) -> None:
    page = decode_envelope_page(
        [entry(0), entry(1, enqueued_time=seconds)],
        topic="t",
        stream="s:t",
        include_raw_fields=False,
    )
    decoded = page.batch.to_pylist()  # once failed: year -290308 is out of range
    page.batch.to_pandas()
    assert decoded[1]["enqueued_time"] == expected
    if expected is None:
        assert page.reasons == [None, "invalid-timestamp"]
        assert decoded[1]["error"] == (
            "field 'enqueued_time' must be seconds since the epoch, at least -62135424000 and "
            f"below 253402128000 (0001-01-03 to 9999-12-29 UTC), got '{seconds.decode()}'"
        )
    else:
        assert page.reasons is None


def test_entry_ids_past_9999_read_with_a_null_timestamp() -> None:
    entries = [entry(0), entry(1), entry(2)]
    entries[1][0] = b"253402128000000-0"
    entries[2][0] = b"18446744073709551615-18446744073709551615"
    for batch in (
        decode_envelopes(entries, topic="t", stream="s:t", include_raw_fields=False),
        decode_raw(entries, topic="t", stream="s:t"),
    ):
        stamps = batch.column("timestamp").to_pylist()
        assert stamps == [datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC), None, None]


def test_fields_tell_a_latin1_byte_from_the_text_of_its_escape() -> None:
    latin1 = entry(0, payload=b'{"a": "caf\xe9"}', extra=b"\xe9")
    text = entry(1, payload=b'{"a": "caf\\xe9"}', extra=b"\\xe9")
    decoded = decode_envelopes([latin1, text], topic="t", stream="s:t", include_raw_fields=True)
    fields = decoded.column("fields").to_pylist()
    assert dict(fields[0])["extra"] == "\\xe9" and dict(fields[1])["extra"] == "\\\\xe9"
    for restored, original in zip(fields, [latin1, text], strict=True):
        flat = original[1]
        assert isinstance(flat, list)
        assert raw_entry(restored) == list(zip(flat[0::2], flat[1::2], strict=True))


def test_original_text_restores_what_fields_escaped() -> None:
    from atlasbus.wire.raw_text import original_text, raw_text

    for value in [b'{"k": "\\\\x41"}', b"plain", b"\\x41 and \\\\", "é".encode()]:
        assert original_text(raw_text(value)) == value.decode()
    assert original_text(raw_text(b"\xe9")) == "\\xe9"  # not UTF-8: stays escaped
    assert original_text(None) is None


def test_envelopes_of_any_layouts_decode_from_names_and_values_as_from_their_lists() -> None:
    """A reply whose layout changes is cut into names and values; each field is picked by
    name, absent from some entries, in any order, repeated (the last value counts)."""
    good = [
        (b"priority", b"3"),
        (b"payload", b'{"n": 1}'),
        (b"correlation_id", b"c-1"),
        (b"enqueued_time", b"1.5"),
    ]

    def entry(seq: int, pairs: list[tuple[bytes, bytes]]) -> list[object]:
        return [f"1-{seq}".encode(), [x for pair in pairs for x in pair]]

    entries = [
        entry(0, good),
        entry(1, good[::-1]),
        entry(2, [good[0], (b"payload", b'{"n": 2}'), good[3]]),  # no correlation_id
        entry(3, [(b"payload", b"[]"), *good[:1], (b"payload", b'{"n": 3}'), good[3]]),
        entry(4, [good[0], good[2], good[3]]),  # no payload: an error row
        entry(5, [(b"tracing", b'{"t": "1"}'), *good, (b"extra", b"x")]),
    ]
    pairs = pair_page_of(entries)
    for include_raw_fields in (False, True):
        decoded = decode_envelope_page(
            pairs, topic="t", stream="s:t", include_raw_fields=include_raw_fields
        )
        from_lists = decode_envelope_page(
            entries, topic="t", stream="s:t", include_raw_fields=include_raw_fields
        )
        decoded.batch.validate(full=True)
        assert decoded.batch.to_pylist() == from_lists.batch.to_pylist()
        assert decoded.reasons == from_lists.reasons
    rows = decoded.batch.to_pylist()
    assert [row["payload"] for row in rows] == [
        '{"n": 1}',
        '{"n": 1}',
        '{"n": 2}',
        '{"n": 3}',
        None,
        '{"n": 1}',
    ]
    assert [row["correlation_id"] for row in rows] == ["c-1", "c-1", None, None, None, "c-1"]
    assert [row["error"] for row in rows] == [None] * 4 + ["missing field 'payload'", None]
    assert rows[5]["tracing"] == [("t", "1")]


def test_a_field_some_entries_lack_is_decoded_for_those_that_have_it() -> None:
    """Such a field is decoded on its own for the entries that have it (on a uniform page's
    paths) and spread back: its errors on their rows, the absent value where it is missing."""
    from atlasbus.decoding.kernels.pick_fields import field_columns

    def entry(seq: int, **extra: bytes) -> list[object]:
        fields = {b"priority": b"3", b"payload": b'{"n": %d}' % seq, b"enqueued_time": b"1.5"}
        fields.update((name.encode(), value) for name, value in extra.items())
        return [f"1-{seq}".encode(), [x for pair in fields.items() for x in pair]]

    entries = [
        entry(0, tracing=b'{"t": "0"}'),
        entry(1, delivery_attempts=b"2"),
        entry(2, tracing=b"{oops"),
        entry(3, delivery_attempts=b"x"),
        entry(4),
        entry(5, tracing=b'{"t": "5"}'),
    ]
    del entries[4][1][:2]  # no priority, a required field
    pairs = pair_page_of(entries)
    tracing = field_columns(pairs, [b"tracing"])[b"tracing"]
    assert isinstance(tracing, PartialColumn)
    assert tracing.values.to_pylist() == [b'{"t": "0"}', b"{oops", b'{"t": "5"}']
    assert tracing.positions.to_pylist() == [0, None, 1, None, None, 2]
    assert tracing.rows(present=False) == [1, 3, 4]

    decoded = decode_envelope_page(pairs, topic="t", stream="s:t", include_raw_fields=False)
    from_lists = decode_envelope_page(entries, topic="t", stream="s:t", include_raw_fields=False)
    decoded.batch.validate(full=True)
    assert decoded.batch.to_pylist() == from_lists.batch.to_pylist()
    assert decoded.reasons == from_lists.reasons
    rows = decoded.batch.to_pylist()
    assert [row["error"] for row in rows] == [
        None,
        None,
        "field 'tracing' is not valid JSON: '{oops'",
        "field 'delivery_attempts' must be a decimal integer, got 'x'",
        "missing field 'priority'",
        None,
    ]
    assert decoded.reasons == [None, None, "invalid-json", "invalid-integer", "missing-field", None]
    assert [row["tracing"] for row in rows] == [[("t", "0")], [], None, None, None, [("t", "5")]]
    assert [row["delivery_attempts"] for row in rows] == [0, 2, None, None, None, 0]
    assert [row["priority"] for row in rows] == [3, 3, None, None, None, 3]


def test_fields_are_found_by_name_whatever_layouts_repeat_or_look_alike() -> None:
    """Layouts whose names have the same lengths in the same places (``payload`` and
    ``tracing`` swapped; ``tracing`` spelt ``tracinq``) are told apart byte by byte, and more
    layouts than are remembered at once each find their fields."""
    from atlasbus.decoding.kernels.pick_fields import field_columns

    def entry(seq: int, names: list[bytes]) -> list[object]:
        values = {
            b"payload": b'{"n": %d}' % seq,
            b"tracing": b'{"t": "%d"}' % seq,
            b"tracinq": b"unknown",
            b"priority": b"%d" % (seq % 10),
        }
        # 3 layouts, then 18 others (more than are remembered), then the first 3 again
        extra_count = seq % 10 if 24 <= seq < 42 else 0
        extras = [(b"x%d" % k, b"v") for k in range(extra_count)]
        pairs = [(name, values[name]) for name in names] + extras
        return [f"1-{seq}".encode(), [x for pair in pairs for x in pair]]

    layouts = [
        [b"priority", b"payload", b"tracing"],
        [b"priority", b"tracing", b"payload"],
        [b"priority", b"payload", b"tracinq"],
    ]
    entries = [entry(seq, layouts[seq % 3]) for seq in range(48)]
    columns = field_columns(pair_page_of(entries), [b"payload", b"tracing", b"priority"])
    assert columns[b"payload"].to_pylist() == [b'{"n": %d}' % seq for seq in range(48)]
    assert columns[b"priority"].to_pylist() == [b"%d" % (seq % 10) for seq in range(48)]
    tracing = columns[b"tracing"]
    assert isinstance(tracing, PartialColumn)
    assert tracing.values.to_pylist() == [b'{"t": "%d"}' % seq for seq in range(48) if seq % 3 < 2]
    assert tracing.rows(present=False) == list(range(2, 48, 3))

    decoded = decode_envelope_page(
        pair_page_of(entries), topic="t", stream="s:t", include_raw_fields=False
    )
    from_lists = decode_envelope_page(entries, topic="t", stream="s:t", include_raw_fields=False)
    assert decoded.batch.to_pylist() == from_lists.batch.to_pylist()
    assert [row["tracing"] for row in decoded.batch.to_pylist()][:3] == [
        [("t", "0")],
        [("t", "1")],
        [],
    ]

    # The same bytes of names cut in other places: b"payloadtr", b"acing" are not the fields.
    cut_elsewhere = [
        [b"1-0", [b"priority", b"1", b"payload", b"{}", b"tracing", b"{}"]],
        [b"1-1", [b"priority", b"2", b"payloadtr", b"{}", b"acing", b"{}"]],
    ]
    columns = field_columns(pair_page_of(cut_elsewhere), [b"payload", b"tracing"])
    for name in (b"payload", b"tracing"):
        column = columns[name]
        assert isinstance(column, PartialColumn)
        assert column.rows(present=True) == [0]


# --- format=raw ------------------------------------------------------------------------------

# Values that send a column of fields down its value-by-value path, or look as if they might:
# not UTF-8, the text of an escape, a backslash ending one value before an "x" starting the next.
AWKWARD_VALUES = [b"\xff", b"caf\\xe9", b"a\\", b"x41", b"", "é ✓".encode(), b"\\\\x4", b"\\"]
# All UTF-8, one the text of an escape: the column's own bytes are not its text.
ESCAPE_TEXT = [b"plain", b"caf\\xe9", b"\\\\x41", "é".encode(), b"", b"a\\", b"x41", b"ok"]


def test_raw_format_reads_a_page_of_columns_as_its_entries() -> None:
    entries = [
        [f"1-{row}".encode(), [b"text", text, b"odd", value, b"\xfe name", b"x"]]
        for row, (text, value) in enumerate(zip(ESCAPE_TEXT, AWKWARD_VALUES, strict=True))
    ]
    maps = raw_fields_of_pages(entries)
    assert [raw_entry(fields) for fields in maps] == [
        list(zip(flat[0::2], flat[1::2], strict=True)) for _, flat in entries
    ]
    assert [dict(fields)["text"] for fields in maps][1:3] == [
        "caf\\\\xe9",
        "\\\\\\\\x41",
    ]
    assert maps[0] == [
        ("text", "plain"),
        ("odd", "\\xff"),
        ("\\xfe name", "x"),
    ]


def test_raw_format_reads_names_and_values_of_any_layouts_as_their_entries() -> None:
    entries = [
        [b"1-0", [b"text", b"caf\\xe9", b"odd", b"\xff"]],
        [b"1-1", [b"\xfe name", b"x"]],
        [b"1-2", [b"k", b"1", b"k", b"2", b"k", b""]],  # a repeated name: every pair kept
        [b"1-3", [b"a\\", b"x41", b"", b"\\\\x4"]],  # an empty name
        [b"1-4", [b"odd", b"\xff", b"text", b"caf\\xe9"]],  # 1-0's fields, swapped
    ]
    maps = raw_fields_of_pages(entries)
    assert [raw_entry(fields) for fields in maps] == [
        list(zip(flat[0::2], flat[1::2], strict=True)) for _, flat in entries
    ]
    assert maps[:3] == [
        [("text", "caf\\\\xe9"), ("odd", "\\xff")],
        [("\\xfe name", "x")],
        [("k", "1"), ("k", "2"), ("k", "")],
    ]


def test_raw_format_reads_every_layout_of_a_live_stream_in_order(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """Pages of 4, byte for byte, every entry of the planned range once and in order: first
    a range of one layout, all UTF-8, then the whole stream, with entries of their own layout
    and a repeated name (all walked into names and values)."""
    stream = f"{prefix}:any"
    published: list[tuple[bytes, list[tuple[bytes, bytes]]]] = []

    def add(*pairs: tuple[bytes, bytes]) -> None:
        flat = [part for pair in pairs for part in pair]
        published.append((r.execute_command("XADD", stream, "*", *flat), list(pairs)))

    def read(upto: bytes) -> list[tuple[bytes, list[tuple[bytes, bytes]]]]:
        planned = ReadRange(stream, stream, ZERO, EntryId.parse(upto.decode()))
        return [
            (row["id"].encode(), raw_entry(row["fields"]))
            for batch in read_range(options, planned)
            for row in batch.to_pylist()
        ]

    options = parse_source_options(
        {"url": redis_url, "streams": stream, "format": "raw", "pageSize": "4"}
    )
    for value in ESCAPE_TEXT * 2:
        add((b"temp", b"21.5"), (b"note", value))
    one_layout = len(published)
    for value in AWKWARD_VALUES * 3:
        add((b"temp", b"21.5"), (b"note", value))
    add((b"note", b"swapped"), (b"temp", b"1"))
    add((b"k", b"1"), (b"k", b"2"))
    add((b"only", b"\x00\x01"))
    for row in range(9):
        add((b"temp", str(row).encode()), (b"note", b"\\x41" if row % 2 else b"ok"))
    add((b"temp", b"after the plan"))  # past the planned range: not this read's
    assert read(published[one_layout - 1][0]) == published[:one_layout]
    assert read(published[-2][0]) == published[:-1]
