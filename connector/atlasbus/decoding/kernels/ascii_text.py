"""A column page's binary columns as strings, unchecked where every byte is ASCII (executor).

The schema's string columns need UTF-8, and a column page's values arrive as binary. Arrow's
cast checks each value, with its kernel's set-up on every call: 19 ns an entry for a 242-byte
payload, 7.5 for a correlation ID, 4 for an entry ID. Bytes all below 128 are UTF-8, and
seeing that takes one OR per 8 bytes of the column's data (10, 1.4 and 0.7 ns). A column
holding any other byte is cast, which checks it.

Also the bounds check the column kernels make at their entry (``offsets_within``), and the
error their wrappers raise when it fails (``outside_data``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.decoding.kernels.compiler import (
    NO_BITS,
    Word,
    binary_column,
    byte_at,
    compiled,
    has_high_byte,
    inlined,
    word_at,
)


def text_column(values: pa.Array) -> pa.Array:
    """``values`` (binary) as a string column; raises ``pa.ArrowInvalid``, as Arrow's cast
    does, when a value is not UTF-8."""
    column = binary_column(values)
    if column is not None:
        data, offsets = column
        if all_ascii(data, int(offsets[0]), int(offsets[-1])):
            return values.view(pa.string())
    return values.cast(pa.string())


def all_ascii(data: np.ndarray, start: int, end: int) -> bool:
    """Whether ``data[start:end]`` is all below 128; raises ``outside_data`` when that range
    is not within ``data``."""
    found = _all_ascii(data, start, end)
    if found < 0:
        raise outside_data("checking text for ASCII")
    return bool(found)


def outside_data(what: str) -> ValueError:
    """What a kernel's wrapper raises when the kernel's entry check found offsets outside the
    column's bytes, or running backwards: an Arrow array built wrong (never a value's bytes,
    which may be anything). No other path may read it either: Arrow's trust the offsets."""
    return ValueError(f"atlasbus: {what}: a binary column's offsets lie outside its data")


@inlined
def offsets_within(offsets: Any, size: int) -> bool:
    """Whether ``offsets`` (a binary column's, one more than its rows) lie within its ``size``
    bytes: the first at least 0, none below the one before, the last at most ``size``. Then
    every value's bytes, from its offset to the next, lie within the buffer.

    Branch-free over the offsets, so that the compiler makes vector compares of them: 0.2 ns
    a row, against 15-250 ns for the kernels' work on it.
    """
    last = offsets.shape[0] - 1
    if last < 0 or offsets[0] < 0 or offsets[last] > size:
        return False
    backwards = 0
    for row in range(last):
        backwards |= offsets[row + 1] < offsets[row]
    return backwards == 0


@compiled
def _all_ascii(data: Any, start: int, end: int) -> int:
    """1 if the bytes from ``start`` to ``end`` are all below 128, else 0; -1 if that range is
    not within ``data``.

    In bounds: ``bits_of`` reads only from ``start`` to ``end``, checked first to lie in
    ``data``.
    """
    address, size = data.ctypes.data, data.shape[0]
    if start < 0 or end < start or end > size:
        return -1
    return 0 if has_high_byte(bits_of(address, start, end)) else 1


@inlined
def bits_of(address: int, start: int, end: int) -> Word:
    """The OR of the bytes from ``start`` to ``end``, 8 at a time (``has_high_byte`` of it):
    no byte outside that range is read."""
    seen = NO_BITS
    at = start
    while at + 8 <= end:
        seen |= word_at(address, at)
        at += 8
    while at < end:
        seen |= np.uint64(byte_at(address, at))
        at += 1
    return seen
