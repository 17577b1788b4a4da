"""The column form of ``atlasbus.raw_fields``: a page's entries as ``fields`` maps.

A page cut into columns (``atlasbus.column_page``: a column per field, or columns of every
entry's names and values) becomes maps on the executor without a Python object per value. A
column of valid UTF-8 with no backslash before an ``x`` is its own text, as ``raw_text``
says, and seeing that takes two compiled passes over its bytes; only a column holding such a
backslash or a byte that is not UTF-8 goes value by value. A page of one column per field
needs one more compiled pass, which interleaves the columns into each entry's map, its fields
in the entry's order. Value by value from hiredis's lists, ``format=raw`` cost the reader 8 µs
an entry of 8 fields.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.ascii_text import text_column
from atlasbus.column_page import ColumnPage, PairPage
from atlasbus.compiled import (
    NO_BITS,
    binary_column,
    byte_at,
    bytes_equal,
    compiled,
    copy_bytes,
    word_at,
)
from atlasbus.raw_fields import raw_text

_BACKSLASH, _X = 92, 120


def raw_field_maps(page: ColumnPage) -> pa.MapArray:
    """Each entry of ``page`` as a map of its field names to values, both as ``raw_text``."""
    size, width = len(page), len(page.names)
    names = [raw_text(name).encode() for name in page.names]
    keys = _repeated_texts(names, size)
    items = _interleaved([_raw_texts(page.columns[name]) for name in page.names], size)
    offsets = pa.array(np.arange(size + 1, dtype=np.int32) * width)
    return pa.MapArray.from_arrays(offsets, keys, items)


def raw_pair_maps(page: PairPage) -> pa.MapArray:
    """Each entry of ``page`` as a map of its field names to values, both as ``raw_text``.

    Every name and value is already where the map wants it, entry after entry: the two
    columns only need their text checked.
    """
    keys, items = _raw_texts(page.names), _raw_texts(page.values)
    return pa.MapArray.from_arrays(page.field_offsets, keys, items)


def _repeated_texts(texts: list[bytes], times: int) -> pa.Array:
    """``texts`` (UTF-8) one after another, ``times`` over, as a string column."""
    lengths = np.tile(np.array([len(text) for text in texts], np.int32), times)
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = np.tile(np.frombuffer(b"".join(texts), np.uint8), times)
    return pa.Array.from_buffers(
        pa.string(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _interleaved(texts: list[pa.Array], size: int) -> pa.Array:
    """The values of ``texts`` (string columns of ``size`` rows) row by row: each column's
    first value in order, then each one's second, and so on.

    One compiled pass: joining the columns and reordering them with Arrow's ``take`` copied
    every byte twice and cost half of the maps' time.
    """
    addresses = np.zeros(len(texts), np.int64)
    offsets = np.empty((len(texts), size + 1), np.int32)
    for field, text in enumerate(texts):
        _, offsets_buffer, data_buffer = text.buffers()
        start = text.offset
        offsets[field] = np.frombuffer(offsets_buffer, np.int32)[start : start + size + 1]
        if data_buffer is not None:
            addresses[field] = data_buffer.address
    item_offsets, data = _interleave(addresses, offsets)  # ``texts`` keep the bytes alive
    return pa.Array.from_buffers(
        pa.string(), len(item_offsets) - 1, [None, pa.py_buffer(item_offsets), pa.py_buffer(data)]
    )


@compiled
def _interleave(addresses: Any, offsets: Any) -> Any:
    """Arrow offsets and bytes of the values row by row: field ``f``'s bytes lie at the
    address ``addresses[f]``, its values' offsets in ``offsets[f]``."""
    width, rows = offsets.shape[0], offsets.shape[1] - 1
    total = 0
    for field in range(width):
        total += offsets[field, rows] - offsets[field, 0]
    item_offsets = np.empty(width * rows + 1, np.int32)
    data = np.empty(total, np.uint8)
    target = data.ctypes.data
    at = 0
    item_offsets[0] = 0
    for row in range(rows):
        for field in range(width):
            start = int(offsets[field, row])
            length = int(offsets[field, row + 1]) - start
            copy_bytes(target, at, addresses[field], start, length)
            at += length
            item_offsets[row * width + field + 1] = at
    return item_offsets, data


def _raw_texts(values: pa.Array) -> pa.Array:
    """``raw_text`` of each value of a binary column, as a string column."""
    column = binary_column(values)
    if column is not None:
        data, offsets = column
        if not _has_escape_text(data.ctypes.data, int(offsets[0]), int(offsets[-1])):
            try:
                return text_column(values)
            except pa.ArrowInvalid:  # a value that is not UTF-8
                pass
    return pa.array([raw_text(value) for value in values.to_pylist()], pa.string())


@compiled
def _has_escape_text(address: int, start: int, end: int) -> bool:
    """Whether a backslash stands before an ``x`` anywhere from ``start`` to ``end``.

    Across two values too: that only sends the column value by value, which is exact.
    """
    at = start
    while at + 8 <= end:
        if bytes_equal(word_at(address, at), _BACKSLASH) == NO_BITS:
            at += 8
            continue
        for k in range(at, at + 8):
            if byte_at(address, k) == _BACKSLASH and k + 1 < end and byte_at(address, k + 1) == _X:
                return True
        at += 8
    while at < end:
        if byte_at(address, at) == _BACKSLASH and at + 1 < end and byte_at(address, at + 1) == _X:
            return True
        at += 1
    return False
