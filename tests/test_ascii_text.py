"""A column page's binary columns become strings as Arrow's cast makes them, checked or not."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atlasbus.decoding.kernels.ascii_text import all_ascii, text_column


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(max_size=20) | st.text(max_size=10).map(str.encode), max_size=12),
    st.integers(0, 3),
)
def test_text_is_what_arrows_cast_gives_or_the_same_error(values: list[bytes], skip: int) -> None:
    column = pa.array(values, pa.binary()).slice(min(skip, len(values)))
    try:
        expected = column.cast(pa.string())
    except pa.ArrowInvalid:
        with pytest.raises(pa.ArrowInvalid):
            text_column(column)
        return
    text = text_column(column)
    assert text.type == pa.string()
    assert text.equals(expected)
    assert text.to_pylist() == [value.decode() for value in values[skip:]]


def test_a_byte_of_128_or_more_anywhere_is_seen() -> None:
    """Bytes are looked at 8 at a time, then one by one: each position of both counts."""
    for size in (1, 7, 8, 9, 15, 16, 17, 24):
        for at in range(size):
            data = bytearray(b"a" * size)
            data[at] = 0x80
            assert not all_ascii(np.frombuffer(bytes(data), np.uint8), 0, size), (size, at)
            assert all_ascii(np.frombuffer(bytes(data), np.uint8), at + 1, size)
            assert all_ascii(np.frombuffer(bytes(data), np.uint8), 0, at)


def test_utf8_beyond_ascii_is_kept_and_broken_utf8_refused() -> None:
    assert text_column(pa.array(["prix €", "ok"], pa.binary())).to_pylist() == ["prix €", "ok"]
    with pytest.raises(pa.ArrowInvalid):
        text_column(pa.array([b"ok", b"\xc3("], pa.binary()))
