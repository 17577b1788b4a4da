"""The compiled reading of IDs' times gives what Arrow's kernels give, edge to edge."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from atlasbus.decoding.decoder import _MAX_ID_MS, _timestamps_of
from atlasbus.decoding.kernels.id_times import id_microseconds

EDGE_MS = [0, 1, 1_700_000_000_000, _MAX_ID_MS, _MAX_ID_MS + 1, 10**15, 2**64 - 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(EDGE_MS) | st.integers(0, 2**64 - 1), min_size=1, max_size=20))
def test_times_match_arrows_split_of_the_ids(milliseconds: list[int]) -> None:
    ids = pa.array([f"{ms}-{seq}".encode() for seq, ms in enumerate(milliseconds)], pa.binary())

    by_arrow = _timestamps_of(ids.cast(pa.string()))
    compiled = _timestamps_of(ids.cast(pa.string()), ids)

    assert compiled.equals(by_arrow)
    assert compiled.null_count == sum(ms > _MAX_ID_MS for ms in milliseconds)


def test_a_slice_reads_its_own_ids() -> None:
    ids = pa.array([b"5-0", b"7-1", b"9-2"], pa.binary()).slice(1)

    micros = id_microseconds(ids, _MAX_ID_MS)

    assert micros is not None
    assert micros.to_pylist() == [7000, 9000]


def test_what_is_not_an_id_is_left_to_the_general_path() -> None:
    for text in (b"", b"-1", b"12", b"12x-1", b"+1-0"):
        assert id_microseconds(pa.array([b"1-0", text], pa.binary()), _MAX_ID_MS) is None
