"""Flat JSON objects of strings turned into an Arrow map column by compiled loops (executor).

``tracing`` and ``metadata`` are JSON objects shown as ``map<string,string>``; what publishers
send is nearly always flat: string keys, string (or null) values, no escapes. orjson builds a
dict and a str per key and value of every entry just for them to be copied into Arrow again:
a quarter of a reader's CPU. Here a column page's values are parsed where they lie in the
Arrow buffer and the keys and values copied straight into the map column's buffers.

The grammar taken is strict: JSON whitespace, one object, keys and values strings without a
backslash or control character, or ``null`` values, no key twice. A page with any other value
(a number, a nested value, an escape, a duplicate key, anything malformed) or with keys or
values that are not valid UTF-8 gives None, and the caller parses the page with orjson
(``atlasbus.decode``): so every value this takes, orjson would map to the same strings, and
the rest get orjson's result and error. ``tests/test_flat_json_maps.py`` holds the two to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.compiled import byte_at, compiled, copy_bytes, has_byte, has_byte_below, word_at

_SPACE, _TAB, _LF, _CR = 32, 9, 10, 13
_QUOTE, _BACKSLASH, _COLON, _COMMA = 34, 92, 58, 44
_OPEN, _CLOSE = 123, 125
_N, _U, _L = 110, 117, 108
# The shortest pair with its comma, '"":"",': a value of n bytes holds at most n // 6 + 1 pairs.
_SHORTEST_PAIR = 6


def flat_string_maps(values: pa.Array) -> pa.MapArray | None:
    """``values`` (binary JSON texts, none null) as a map column; None when any is not flat."""
    if values.type != pa.binary() or values.null_count or len(values) == 0:
        return None
    _, offsets_buffer, data_buffer = values.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32)[
        values.offset : values.offset + len(values) + 1
    ]
    data = (
        np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    )
    taken, map_offsets, key_offsets, key_data, value_offsets, value_data, valid = _flat_maps(
        data, offsets
    )
    if not taken:
        return None
    pairs = len(key_offsets) - 1
    nulls = pairs - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    keys = pa.Array.from_buffers(
        pa.string(), pairs, [None, pa.py_buffer(key_offsets), pa.py_buffer(key_data)]
    )
    items = pa.Array.from_buffers(
        pa.string(),
        pairs,
        [validity, pa.py_buffer(value_offsets), pa.py_buffer(value_data)],
        null_count=nulls,
    )
    try:  # keys and values are copied as they lie: Arrow checks their UTF-8
        keys.validate(full=True)
        items.validate(full=True)
    except pa.ArrowInvalid:
        return None
    return pa.MapArray.from_arrays(pa.array(map_offsets), keys, items)


@compiled
def skip_space(data: int, pos: int, end: int) -> int:
    """The first position from ``pos`` that is not JSON whitespace (or ``end``)."""
    while pos < end:
        byte = byte_at(data, pos)
        if byte != _SPACE and byte != _LF and byte != _CR and byte != _TAB:
            break
        pos += 1
    return pos


@compiled
def skip_plain_words(data: int, pos: int, end: int) -> int:
    """Past the 8-byte words from ``pos`` that hold no quote, backslash or control byte: string
    text a word at a time, where a byte at a time cost four times as much on long values."""
    while pos + 8 <= end:
        word = word_at(data, pos)
        if has_byte(word, _QUOTE) or has_byte(word, _BACKSLASH) or has_byte_below(word, _SPACE):
            return pos
        pos += 8
    return pos


@compiled
def _closing_quote(data: int, pos: int, end: int) -> int:
    """Where the string whose text starts at ``pos`` ends; -1 at an escape or control byte."""
    while pos < end:
        pos = skip_plain_words(data, pos, end)
        if pos >= end:
            break
        byte = byte_at(data, pos)
        if byte == _QUOTE:
            return pos
        if byte == _BACKSLASH or byte < _SPACE:
            return -1
        pos += 1
    return -1


@compiled
def _same_text(data: int, a: int, b: int, length: int) -> bool:
    k = 0
    while k < length and byte_at(data, a + k) == byte_at(data, b + k):
        k += 1
    return k == length


@compiled
def _object_pairs(
    data: int, pos: int, end: int, key_at: Any, key_length: Any, value_at: Any, value_length: Any
) -> int:
    """The pairs of the flat object ``byte_at(data, pos:end)``, noted in the arrays (a null value's
    length is -1); -1 when the text is not such an object."""
    pos = skip_space(data, pos, end)
    if pos >= end or byte_at(data, pos) != _OPEN:
        return -1
    pos = skip_space(data, pos + 1, end)
    if pos < end and byte_at(data, pos) == _CLOSE:
        return 0 if skip_space(data, pos + 1, end) == end else -1
    pairs = 0
    while True:
        if pos >= end or byte_at(data, pos) != _QUOTE:
            return -1
        close = _closing_quote(data, pos + 1, end)
        if close < 0:
            return -1
        key_at[pairs] = pos + 1
        key_length[pairs] = close - pos - 1
        for earlier in range(pairs):
            if key_length[earlier] == key_length[pairs] and _same_text(
                data, key_at[earlier], key_at[pairs], key_length[pairs]
            ):
                return -1  # a repeated key: orjson's path keeps the last value at the first place
        pos = skip_space(data, close + 1, end)
        if pos >= end or byte_at(data, pos) != _COLON:
            return -1
        pos = skip_space(data, pos + 1, end)
        if pos < end and byte_at(data, pos) == _QUOTE:
            close = _closing_quote(data, pos + 1, end)
            if close < 0:
                return -1
            value_at[pairs] = pos + 1
            value_length[pairs] = close - pos - 1
            pos = close + 1
        elif (
            pos + 4 <= end
            and byte_at(data, pos) == _N
            and byte_at(data, pos + 1) == _U
            and byte_at(data, pos + 2) == _L
            and byte_at(data, pos + 3) == _L
        ):
            value_at[pairs] = pos
            value_length[pairs] = -1
            pos += 4
        else:
            return -1
        pairs += 1
        pos = skip_space(data, pos, end)
        if pos >= end:
            return -1
        if byte_at(data, pos) == _COMMA:
            pos = skip_space(data, pos + 1, end)
        elif byte_at(data, pos) == _CLOSE:
            return pairs if skip_space(data, pos + 1, end) == end else -1
        else:
            return -1


@compiled
def _flat_maps(data: Any, offsets: Any) -> Any:
    """Parse every value twice: first to check it and size the buffers, then to fill them.

    Returns whether all values were taken, then the map offsets, the keys' offsets and bytes,
    the values' offsets and bytes, and which values are not null.
    """
    address = data.ctypes.data
    rows = offsets.shape[0] - 1
    longest = 0
    for row in range(rows):
        longest = max(longest, offsets[row + 1] - offsets[row])
    capacity = longest // _SHORTEST_PAIR + 1
    key_at = np.empty(capacity, np.int64)
    key_length = np.empty(capacity, np.int64)
    value_at = np.empty(capacity, np.int64)
    value_length = np.empty(capacity, np.int64)
    map_offsets = np.zeros(rows + 1, np.int32)
    key_bytes = 0
    value_bytes = 0
    for row in range(rows):
        pairs = _object_pairs(
            address,
            int(offsets[row]),
            int(offsets[row + 1]),
            key_at,
            key_length,
            value_at,
            value_length,
        )
        if pairs < 0:
            none = np.zeros(1, np.int32)
            return False, map_offsets, none, data[:0], none, data[:0], np.zeros(0, np.bool_)
        map_offsets[row + 1] = map_offsets[row] + pairs
        for pair in range(pairs):
            key_bytes += key_length[pair]
            value_bytes += max(value_length[pair], 0)
    total = map_offsets[rows]
    key_offsets = np.zeros(total + 1, np.int32)
    value_offsets = np.zeros(total + 1, np.int32)
    key_data = np.empty(key_bytes, np.uint8)
    value_data = np.empty(value_bytes, np.uint8)
    valid = np.ones(total, np.bool_)
    at = 0
    for row in range(rows):
        pairs = _object_pairs(
            address,
            int(offsets[row]),
            int(offsets[row + 1]),
            key_at,
            key_length,
            value_at,
            value_length,
        )
        for pair in range(pairs):
            copy_bytes(key_data, key_offsets[at], data, key_at[pair], key_length[pair])
            key_offsets[at + 1] = key_offsets[at] + key_length[pair]
            if value_length[pair] < 0:
                valid[at] = False
                value_offsets[at + 1] = value_offsets[at]
            else:
                copy_bytes(value_data, value_offsets[at], data, value_at[pair], value_length[pair])
                value_offsets[at + 1] = value_offsets[at] + value_length[pair]
            at += 1
    return True, map_offsets, key_offsets, key_data, value_offsets, value_data, valid
