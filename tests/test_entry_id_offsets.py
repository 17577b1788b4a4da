"""Entry IDs order numerically and offsets have one canonical JSON form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from atlasbus.errors import OffsetError
from atlasbus.model.entry_id import MAX_SEQ, ZERO, EntryId
from atlasbus.model.offsets import StreamOffsets

ids = st.builds(EntryId, st.integers(0, 2**50), st.integers(0, MAX_SEQ))


def test_ids_compare_as_numbers_not_strings() -> None:
    assert EntryId.parse("9-0") < EntryId.parse("10-0")
    assert EntryId.parse("10-2") < EntryId.parse("10-10")
    assert EntryId.parse("1700000000000") == EntryId(1700000000000, 0)


@given(ids)
def test_predecessor_and_successor_are_neighbours(entry: EntryId) -> None:
    if entry != ZERO:
        assert entry.predecessor() < entry
        assert entry.predecessor().successor() == entry
    assert EntryId.parse(str(entry)) == entry


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc", "'abc' is not a Redis stream entry ID: expected 'ms-seq'"),
        ("1-x", "'1-x' is not a Redis stream entry ID"),
        ("-1-0", "'-1-0' is not a Redis stream entry ID"),
        ("1-99999999999999999999", "out of range"),
    ],
)
def test_bad_ids_are_named_in_the_error(text: str, message: str) -> None:
    with pytest.raises(OffsetError, match="entry ID") as info:
        EntryId.parse(text)
    assert message in str(info.value)


def test_offsets_round_trip_through_canonical_json() -> None:
    offsets = StreamOffsets({"b:t": EntryId(5, 1), "a:t": EntryId(10, 0)})
    assert offsets.to_json() == '{"a:t":"10-0","b:t":"5-1"}'
    assert StreamOffsets.from_json(offsets.to_json()) == offsets
    assert StreamOffsets.from_dict({"a:t": "10-0", "b:t": "5-1"}) == offsets


def test_offsets_json_errors_name_the_stream() -> None:
    with pytest.raises(OffsetError, match="position of stream 'a' must be an entry ID"):
        StreamOffsets.from_dict({"a": 5})
    with pytest.raises(OffsetError, match="not valid JSON"):
        StreamOffsets.from_json("{nope")
