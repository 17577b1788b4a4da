"""The column form of ``atlasbus.raw_fields``: a column page's entries as ``fields`` maps.

A page cut into columns (``atlasbus.column_page``: every entry has the same fields, in the
same order) becomes maps on the executor without a Python object per value. A column of
valid UTF-8 with no backslash before an ``x`` is its own text, as ``raw_text`` says, and
seeing that takes two compiled passes over its bytes; only a column holding such a backslash
or a byte that is not UTF-8 goes value by value. Arrow then interleaves the columns into each
entry's map, its fields in the entry's order. Value by value from hiredis's lists,
``format=raw`` cost the reader 8 µs an entry of 8 fields.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from atlasbus.ascii_text import text_column
from atlasbus.column_page import ColumnPage
from atlasbus.compiled import NO_BITS, binary_column, byte_at, bytes_equal, compiled, word_at
from atlasbus.raw_fields import raw_text

_BACKSLASH, _X = 92, 120


def raw_field_maps(page: ColumnPage) -> pa.MapArray:
    """Each entry of ``page`` as a map of its field names to values, both as ``raw_text``."""
    size, width = len(page), len(page.names)
    rows = np.arange(size, dtype=np.int64)
    fields = np.arange(width, dtype=np.int64)
    names = [raw_text(name).encode() for name in page.names]
    keys = _repeated_texts(names, size)
    texts = [_raw_texts(page.columns[name]) for name in page.names]
    # Row by row, the fields in order: field f of row r is element f * size + r of the columns
    # one after another.
    order = (fields[np.newaxis, :] * size + rows[:, np.newaxis]).ravel()
    items = pa.concat_arrays(texts).take(pa.array(order)) if width else pa.array([], pa.string())
    offsets = pa.array(np.arange(size + 1, dtype=np.int32) * width)
    return pa.MapArray.from_arrays(offsets, keys, items)


def _repeated_texts(texts: list[bytes], times: int) -> pa.Array:
    """``texts`` (UTF-8) one after another, ``times`` over, as a string column."""
    lengths = np.tile(np.array([len(text) for text in texts], np.int32), times)
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = np.tile(np.frombuffer(b"".join(texts), np.uint8), times)
    return pa.Array.from_buffers(
        pa.string(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


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
