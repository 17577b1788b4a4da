"""The column form of ``atlasbus.wire.raw_text``: a page's entries as ``fields`` maps.

A page cut into columns (``atlasbus.decoding.cut_pages``: a column per field, or columns of every
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

from atlasbus.decoding.cut_pages import ColumnPage, PairPage
from atlasbus.decoding.kernels.ascii_text import offsets_within, outside_data, text_column
from atlasbus.decoding.kernels.compiler import (
    NO_BITS,
    binary_column,
    byte_at,
    bytes_equal,
    compiled,
    copy_bytes,
    word_at,
)
from atlasbus.wire.raw_text import raw_text

_BACKSLASH, _X = 92, 120
_LARGEST_OFFSET = 2**31 - 1


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
    sizes = np.zeros(len(texts), np.int64)
    offsets = np.empty((len(texts), size + 1), np.int32)
    for field, text in enumerate(texts):
        _, offsets_buffer, data_buffer = text.buffers()
        start = text.offset
        offsets[field] = np.frombuffer(offsets_buffer, np.int32)[start : start + size + 1]
        if data_buffer is not None:
            addresses[field], sizes[field] = data_buffer.address, data_buffer.size
    interleaved = _interleave(addresses, sizes, offsets)  # ``texts`` keep the bytes alive
    if interleaved is None:
        raise outside_data("interleaving fields")
    item_offsets, data = interleaved
    return pa.Array.from_buffers(
        pa.string(), len(item_offsets) - 1, [None, pa.py_buffer(item_offsets), pa.py_buffer(data)]
    )


@compiled
def _interleave(addresses: Any, sizes: Any, offsets: Any) -> Any:
    """Arrow offsets and bytes of the values row by row: field ``f``'s ``sizes[f]`` bytes lie
    at the address ``addresses[f]`` (a list of arrays would cost numba's reflection), its
    values' offsets in ``offsets[f]``.

    None when the entry check fails. In bounds: checked first, each field's offsets lie
    within its bytes, and all of them fit Arrow's 32-bit offsets; each value is then copied
    from between its offset and the next to ``data``, sized for their sum.
    """
    width, rows = offsets.shape[0], offsets.shape[1] - 1
    if addresses.shape[0] < width or sizes.shape[0] < width:
        return None
    total = 0
    for field in range(width):
        if not offsets_within(offsets[field], sizes[field]):
            return None
        total += offsets[field, rows] - offsets[field, 0]
    if total > _LARGEST_OFFSET:
        return None
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
        escape = _has_escape_text(data, int(offsets[0]), int(offsets[-1]))
        if escape < 0:
            raise outside_data("looking for escape text")
        if not escape:
            try:
                return text_column(values)
            except pa.ArrowInvalid:  # a value that is not UTF-8
                pass
    return pa.array([raw_text(value) for value in values.to_pylist()], pa.string())


@compiled
def _has_escape_text(data: Any, start: int, end: int) -> int:
    """1 if a backslash stands before an ``x`` anywhere from ``start`` to ``end``, else 0; -1
    if that range is not within ``data``.

    Across two values too: that only sends the column value by value, which is exact.
    In bounds: the range is checked first; words are read only where 8 bytes are left
    before ``end``, and a byte after a backslash only below ``end``.
    """
    address, size = data.ctypes.data, data.shape[0]
    if start < 0 or end < start or end > size:
        return -1
    at = start
    while at + 8 <= end:
        if bytes_equal(word_at(address, at), _BACKSLASH) == NO_BITS:
            at += 8
            continue
        for k in range(at, at + 8):
            if byte_at(address, k) == _BACKSLASH and k + 1 < end and byte_at(address, k + 1) == _X:
                return 1
        at += 8
    while at < end:
        if byte_at(address, at) == _BACKSLASH and at + 1 < end and byte_at(address, at + 1) == _X:
            return 1
        at += 1
    return 0
