"""Planning cuts a range into pieces that cover it exactly, whatever the cut points."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from atlasbus.model.entry_id import EntryId
from atlasbus.planning.batch_plan import split_range


@st.composite
def ranges(draw: st.DrawFn) -> tuple[EntryId, EntryId, EntryId, int]:
    after = EntryId(draw(st.integers(0, 10**6)), draw(st.integers(0, 50)))
    first = (
        after.successor()
        if draw(st.booleans())
        else EntryId(after.ms + draw(st.integers(0, 10**4)), draw(st.integers(0, 50)))
    )
    if first <= after:
        first = after.successor()
    upto = EntryId(first.ms + draw(st.integers(0, 10**4)), draw(st.integers(0, 10**3)))
    if upto < first:
        upto = first
    return after, first, upto, draw(st.integers(1, 40))


def covers(pieces: list[tuple[EntryId, EntryId]], after: EntryId, upto: EntryId) -> bool:
    if pieces[0][0] != after or pieces[-1][1] != upto:
        return False
    return all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(pieces))


@given(ranges())
def test_pieces_are_contiguous_and_cover_the_range(
    case: tuple[EntryId, EntryId, EntryId, int],
) -> None:
    after, first, upto, count = case
    pieces = split_range(after, first, upto, count)
    assert 1 <= len(pieces) <= count
    assert covers(pieces, after, upto)


def test_split_starts_at_the_first_entry_not_at_zero() -> None:
    after, first, upto = EntryId(0, 0), EntryId(1_000_000, 0), EntryId(1_000_999, 5)
    pieces = split_range(after, first, upto, 10)
    assert len(pieces) == 10
    assert pieces[0] == (after, EntryId(1_000_099, 2**64 - 1))


def test_entries_of_one_millisecond_are_split_by_sequence() -> None:
    pieces = split_range(EntryId(7, 0).predecessor(), EntryId(7, 0), EntryId(7, 999), 4)
    assert [hi for _, hi in pieces] == [
        EntryId(7, 249),
        EntryId(7, 499),
        EntryId(7, 749),
        EntryId(7, 999),
    ]


def test_one_piece_when_asked_for_one() -> None:
    assert split_range(EntryId(1, 0), EntryId(2, 0), EntryId(9, 0), 1) == [
        (EntryId(1, 0), EntryId(9, 0))
    ]
