"""Flat JSON objects of strings turned into an Arrow map column by compiled loops (executor).

``tracing`` and ``metadata`` are JSON objects shown as ``map<string,string>``; what publishers
send is nearly always flat: string keys, string (or null) values, no escapes. orjson builds a
dict and a str per key and value of every entry just for them to be copied into Arrow again:
a quarter of a reader's CPU. Here a column page's values are parsed where they lie in the
Arrow buffer and the keys and values copied straight into the map column's buffers.

The grammar taken is strict: JSON whitespace, one object, keys and values strings without a
backslash or control character, or ``null`` values, no key twice. A page with any other value (a
number, a nested value, an escape, a duplicate key, anything malformed) or with keys or values that
are not valid UTF-8 gives None, and the caller parses the page with orjson
(``atlasbus.decoding.decoder``): so every value this takes, orjson would map to the same strings,
and the rest get orjson's result and error. ``tests/test_flat_json_maps.py`` holds the two to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.decoding.kernels.ascii_text import all_ascii, offsets_within, outside_data
from atlasbus.decoding.kernels.compiler import (
    binary_column,
    byte_at,
    compiled,
    copy_bytes,
    inlined,
    put_int,
    same_bytes,
)
from atlasbus.decoding.kernels.json_lexer import after_string, skip_space

_QUOTE, _COLON, _COMMA = 34, 58, 44
_OPEN, _CLOSE = 123, 125
_N, _U, _L = 110, 117, 108
# The shortest pair with its comma, '"":"",': a value of n bytes holds at most n // 6 + 1 pairs.
_SHORTEST_PAIR = 6


def flat_string_maps(values: pa.Array) -> pa.MapArray | None:
    """``values`` (binary JSON texts, none null) as a map column; None when any is not flat.
    Raises ``outside_data`` for a column built wrong."""
    column = binary_column(values)
    if column is None:
        return None
    data, offsets = column
    status, map_offsets, key_offsets, key_data, value_offsets, value_data, valid = _flat_maps(
        data, offsets
    )
    if status == _OUTSIDE_DATA:
        raise outside_data("parsing flat JSON objects")
    if status == _NOT_FLAT:
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
    if not (all_ascii(key_data, 0, len(key_data)) and all_ascii(value_data, 0, len(value_data))):
        try:  # keys and values are copied as they lie: Arrow checks their UTF-8
            keys.validate(full=True)
            items.validate(full=True)
        except pa.ArrowInvalid:
            return None
    return pa.MapArray.from_arrays(pa.array(map_offsets), keys, items)


# What _object_pairs notes of each pair, at ``places[_NOTES * pair + ...]``: where its key and
# value start and how long they are (a null value's length is -1).
_KEY_AT, _KEY_LENGTH, _VALUE_AT, _VALUE_LENGTH = range(4)
_NOTES = 4


@inlined
def _object_pairs(data: int, pos: int, end: int, places: int) -> int:
    """The pairs of the flat object from ``pos`` to ``end``, noted in the int64 array at address
    ``places`` (``put_int``); -1 when the text is not such an object."""
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
        after = after_string(data, pos + 1, end, False)
        if after < 0:
            return -1
        put_int(places, _NOTES * pairs + _KEY_AT, pos + 1)
        put_int(places, _NOTES * pairs + _KEY_LENGTH, after - pos - 2)
        pos = skip_space(data, after, end)
        if pos >= end or byte_at(data, pos) != _COLON:
            return -1
        pos = skip_space(data, pos + 1, end)
        if pos < end and byte_at(data, pos) == _QUOTE:
            after = after_string(data, pos + 1, end, False)
            if after < 0:
                return -1
            put_int(places, _NOTES * pairs + _VALUE_AT, pos + 1)
            put_int(places, _NOTES * pairs + _VALUE_LENGTH, after - pos - 2)
            pos = after
        elif pos + 4 <= end and _is_null(data, pos):
            put_int(places, _NOTES * pairs + _VALUE_AT, pos)
            put_int(places, _NOTES * pairs + _VALUE_LENGTH, -1)
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


@inlined
def _repeats_a_key(data: int, places: Any, pairs: int) -> bool:
    """Whether two of the ``pairs`` noted in ``places`` have the same key: orjson's path keeps
    the last value at the first key's place, so such a page is left to it."""
    for pair in range(1, pairs):
        at, length = places[_NOTES * pair + _KEY_AT], places[_NOTES * pair + _KEY_LENGTH]
        for earlier in range(pair):
            if places[_NOTES * earlier + _KEY_LENGTH] == length and same_bytes(
                data, places[_NOTES * earlier + _KEY_AT], at, length
            ):
                return True
    return False


@inlined
def _is_null(data: int, pos: int) -> bool:
    return bool(
        byte_at(data, pos) == _N
        and byte_at(data, pos + 1) == _U
        and byte_at(data, pos + 2) == _L
        and byte_at(data, pos + 3) == _L
    )


# What _flat_maps finds.
_TAKEN, _NOT_FLAT, _OUTSIDE_DATA = range(3)


@compiled
def _flat_maps(data: Any, offsets: Any) -> Any:
    """Parse every value once, copying its keys and values as it goes into buffers sized for
    the most the column's bytes can hold (parsing twice, to size them exactly first, cost
    half as much again); what is returned is the part used.

    Returns ``_TAKEN`` (or why not), then the map offsets, the keys' offsets and bytes, the
    values' offsets and bytes, and which values are not null.

    In bounds: checked first, the offsets lie within ``data``; each value is then read only
    below its end. Pair p's notes are written once its key's closing quote is read, at least
    6p + 3 bytes into its value (every pair before it and its comma take 6, '"":"",'): the
    notes of the longest value fit ``places``, and all keys and values the output buffers.
    """
    address, size = data.ctypes.data, data.shape[0]
    if not offsets_within(offsets, size):
        no_offsets, no_bytes = np.zeros(1, np.int32), np.empty(0, np.uint8)
        no_pairs = np.empty(0, np.bool_)
        return _OUTSIDE_DATA, no_offsets, no_offsets, no_bytes, no_offsets, no_bytes, no_pairs
    rows = offsets.shape[0] - 1
    longest = 0
    for row in range(rows):
        longest = max(longest, int(offsets[row + 1]) - int(offsets[row]))
    # room for _object_pairs's notes on the pairs of the longest value, alive to the end:
    # they are written through its address
    places = np.empty(_NOTES * (longest // _SHORTEST_PAIR + 1), np.int64)
    notes = places.ctypes.data
    used = int(offsets[rows]) - int(offsets[0])  # the values' bytes
    most_pairs = used // _SHORTEST_PAIR + rows
    map_offsets = np.empty(rows + 1, np.int32)
    key_offsets = np.empty(most_pairs + 1, np.int32)
    value_offsets = np.empty(most_pairs + 1, np.int32)
    key_data = np.empty(used, np.uint8)
    value_data = np.empty(used, np.uint8)
    valid = np.empty(most_pairs, np.bool_)
    keys, items = key_data.ctypes.data, value_data.ctypes.data
    map_offsets[0] = key_offsets[0] = value_offsets[0] = 0
    at = 0
    for row in range(rows):
        pairs = _object_pairs(address, int(offsets[row]), int(offsets[row + 1]), notes)
        if pairs < 0 or _repeats_a_key(address, places, pairs):
            return _NOT_FLAT, map_offsets, key_offsets, key_data, value_offsets, value_data, valid
        map_offsets[row + 1] = map_offsets[row] + pairs
        for pair in range(pairs):
            length = places[_NOTES * pair + _KEY_LENGTH]
            copy_bytes(keys, key_offsets[at], address, places[_NOTES * pair + _KEY_AT], length)
            key_offsets[at + 1] = key_offsets[at] + length
            length = places[_NOTES * pair + _VALUE_LENGTH]
            valid[at] = length >= 0
            if length < 0:
                length = 0
            else:
                copy_bytes(
                    items, value_offsets[at], address, places[_NOTES * pair + _VALUE_AT], length
                )
            value_offsets[at + 1] = value_offsets[at] + length
            at += 1
    return (
        _TAKEN,
        map_offsets,
        key_offsets[: at + 1],
        key_data[: key_offsets[at]],
        value_offsets[: at + 1],
        value_data[: value_offsets[at]],
        valid[:at],
    )
