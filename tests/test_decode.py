"""The core decoder without Spark: a page decodes the same whichever path it takes.

A page whose values are all well formed is decoded column-wise in C; a page holding one bad
value is decoded row by row so the bad row can be named. These tests pin that the two paths
agree, so a malformed neighbour never changes how a good entry reads.
"""

from __future__ import annotations

import gc
import json

import pytest
import redis

from atlasbus.decode import decode_envelope_page, decode_envelopes
from atlasbus.entry_id import ZERO, EntryId
from atlasbus.planning import ReadRange
from atlasbus.reader import read_range
from atlasbus.source_options import parse_source_options
from helpers import publish

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
    return decode_envelopes(entries, topic="t", stream="s:t", include_raw_fields=False).to_pylist()


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
