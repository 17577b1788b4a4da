"""Whether every value of a binary column is a JSON object, by compiled loops (executor).

The column form of ``atlasbus.wire.json_object_check``: a column page's ``payload`` values are
checked where they lie in the Arrow buffer, with no bytes object made per value for simdjson.

Like simdjson there, this only ever says yes where orjson, the contract's parser, would; "not
sure" sends the page to the per-value checks. It takes JSON's grammar with a margin: nesting
at most 64 deep, surrogates escaped only in pairs, numbers up to the largest double (orjson
refuses an infinite one) with at most three exponent digits, and UTF-8 checked by Arrow over
the whole column unless every byte is ASCII.
``tests/test_json_objects.py`` holds it to orjson on edge cases and mutated documents.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.decoding.kernels.ascii_text import offsets_within, outside_data
from atlasbus.decoding.kernels.compiler import (
    NO_BITS,
    Word,
    binary_column,
    byte_at,
    compiled,
    has_high_byte,
    inlined,
    put_byte,
)
from atlasbus.decoding.kernels.json_lexer import scan_string, skip_space

_QUOTE, _COLON, _COMMA, _MINUS, _PLUS, _DOT = 34, 58, 44, 45, 43, 46
_OPEN_OBJECT, _OPEN_ARRAY = 123, 91  # each closing bracket is its opening one plus 2
_ZERO, _NINE, _LOWER_E, _UPPER_E = 48, 57, 101, 69
# The literals' first four bytes as _four_bytes reads them, and false's fifth.
_TRUE, _NULL, _FALS = (int.from_bytes(word, "little") for word in (b"true", b"null", b"fals"))
_E = ord("e")
_DEEPEST = 64
# The largest double is 1.7976931348623157e308: a number whose first digit stands for 10**308
# is finite when its digits are at most these (a larger one, or more digits, goes to orjson).
_LARGEST_MAGNITUDE = 308
_LARGEST_DOUBLE_DIGITS = tuple(b"17976931348623157")


def json_object_texts(values: pa.Array) -> pa.Array | None:
    """``values`` as a string column when every one is a JSON object; None when not sure.
    Raises ``outside_data`` for a column built wrong."""
    if len(values) == 0 and values.type == pa.binary():
        return pa.array([], pa.string())
    column = binary_column(values)
    if column is None:
        return None
    data, offsets = column
    found = _all_objects(data, offsets, np.empty(_DEEPEST, np.uint8))
    if found == _OUTSIDE_DATA:
        raise outside_data("checking JSON objects")
    if found == _NOT_ALL_OBJECTS:
        return None
    if found == _OBJECTS_IN_ASCII:
        return values.view(pa.string())
    try:
        return values.cast(pa.string())  # checks the UTF-8, inside strings the only non-ASCII
    except pa.ArrowInvalid:
        return None


@inlined
def _is_digit(byte: int) -> bool:
    return _ZERO <= byte <= _NINE


@inlined
def _after_number(data: int, pos: int, end: int) -> int:
    """Past the JSON number at ``pos``; -1 when malformed or not clearly finite. ``pos`` is
    below ``end`` (the caller read its byte); every later read is checked against ``end``."""
    if byte_at(data, pos) == _MINUS:
        pos += 1
    start = pos
    while pos < end and _is_digit(byte_at(data, pos)):
        pos += 1
    whole_digits = pos - start
    if whole_digits == 0 or (whole_digits > 1 and byte_at(data, start) == _ZERO):
        return -1
    if pos < end and byte_at(data, pos) == _DOT:
        pos += 1
        fraction = pos
        while pos < end and _is_digit(byte_at(data, pos)):
            pos += 1
        if pos == fraction:
            return -1
    exponent = 0
    if pos < end and (byte_at(data, pos) == _LOWER_E or byte_at(data, pos) == _UPPER_E):
        pos += 1
        negative = False
        if pos < end and (byte_at(data, pos) == _PLUS or byte_at(data, pos) == _MINUS):
            negative = byte_at(data, pos) == _MINUS
            pos += 1
        digits = pos
        while pos < end and _is_digit(byte_at(data, pos)):
            exponent = exponent * 10 + byte_at(data, pos) - _ZERO
            pos += 1
        if pos == digits or pos - digits > 3:
            return -1
        if negative:
            exponent = -exponent
    magnitude = whole_digits - 1 + exponent  # the power of ten of the first digit
    if magnitude < _LARGEST_MAGNITUDE:
        return pos
    if magnitude == _LARGEST_MAGNITUDE and _below_largest_double(data, start, pos):
        return pos
    return -1


@compiled
def _below_largest_double(data: int, start: int, end: int) -> bool:
    """Whether the digits from ``start`` (the number's first, up to its exponent), read as
    d.ddd..., are at most those of the largest double: then orjson's double is finite.

    In bounds: reads only from ``start`` to ``end``, the number's bytes, which its one caller
    (``_after_number``) found within the value (compiled apart, it cannot know the buffer).
    """
    digit = 0
    for pos in range(start, end):
        byte = byte_at(data, pos)
        if byte == _DOT:
            continue
        if not _is_digit(byte):
            break  # the exponent
        if digit == len(_LARGEST_DOUBLE_DIGITS):
            if byte != _ZERO:
                return False  # beyond the largest double's digits: leave it to orjson
            continue
        if byte != _LARGEST_DOUBLE_DIGITS[digit]:
            return bool(byte < _LARGEST_DOUBLE_DIGITS[digit])
        digit += 1
    return True


@inlined
def _four_bytes(data: int, pos: int) -> int:
    return (
        int(byte_at(data, pos))
        | int(byte_at(data, pos + 1)) << 8
        | int(byte_at(data, pos + 2)) << 16
        | int(byte_at(data, pos + 3)) << 24
    )


@inlined
def _after_literal(data: int, pos: int, end: int) -> int:
    """Past ``true``, ``false`` or ``null`` at ``pos``; -1 if it is none of them."""
    if pos + 4 > end:
        return -1
    four = _four_bytes(data, pos)
    if four in (_TRUE, _NULL):
        return pos + 4
    if four == _FALS and pos + 5 <= end and byte_at(data, pos + 4) == _E:
        return pos + 5
    return -1


@inlined
def _after_key(data: int, pos: int, end: int) -> tuple[int, Word]:
    """Past the colon of the member whose key starts at ``pos`` (-1 if there is none), and
    the OR of the key's bytes (``scan_string``)."""
    pos = skip_space(data, pos, end)
    if pos >= end or byte_at(data, pos) != _QUOTE:
        return -1, NO_BITS
    pos, seen = scan_string(data, pos + 1, end, True)
    if pos < 0:
        return -1, seen
    pos = skip_space(data, pos, end)
    if pos >= end or byte_at(data, pos) != _COLON:
        return -1, seen
    return pos + 1, seen


@inlined
def _is_object(data: int, pos: int, end: int, stack: int) -> tuple[bool, Word]:
    """Whether the text from ``pos`` to ``end`` is one JSON object, and the OR of the bytes of
    its strings (``scan_string``): outside them JSON has only ASCII. A loop, no recursion.

    ``stack`` is the address of ``_DEEPEST`` bytes, the open brackets (``put_byte``).
    """
    seen = NO_BITS
    pos = skip_space(data, pos, end)
    if pos >= end or byte_at(data, pos) != _OPEN_OBJECT:
        return False, seen
    depth = 0
    expect_value = True
    while True:
        if expect_value:
            pos = skip_space(data, pos, end)
            if pos >= end:
                return False, seen
            byte = byte_at(data, pos)
            if byte in (_OPEN_OBJECT, _OPEN_ARRAY):
                if depth == _DEEPEST:
                    return False, seen
                put_byte(stack, depth, byte)
                depth += 1
                pos = skip_space(data, pos + 1, end)
                if pos < end and byte_at(data, pos) == byte + 2:  # empty
                    depth -= 1
                    pos += 1
                    expect_value = False
                elif byte == _OPEN_OBJECT:
                    pos, bits = _after_key(data, pos, end)
                    seen |= bits
                    if pos < 0:
                        return False, seen
                continue
            if byte == _QUOTE:
                pos, bits = scan_string(data, pos + 1, end, True)
                seen |= bits
            elif byte == _MINUS or _is_digit(byte):
                pos = _after_number(data, pos, end)
            else:
                pos = _after_literal(data, pos, end)
            if pos < 0:
                return False, seen
            expect_value = False
            continue
        if depth == 0:
            return bool(skip_space(data, pos, end) == end), seen
        pos = skip_space(data, pos, end)
        if pos >= end:
            return False, seen
        byte = byte_at(data, pos)
        if byte == _COMMA:
            pos += 1
            if byte_at(stack, depth - 1) == _OPEN_OBJECT:
                pos, bits = _after_key(data, pos, end)
                seen |= bits
                if pos < 0:
                    return False, seen
            expect_value = True
        elif byte == byte_at(stack, depth - 1) + 2:
            depth -= 1
            pos += 1
        else:
            return False, seen


# What _all_objects finds.
_NOT_ALL_OBJECTS, _OBJECTS_IN_ASCII, _OBJECTS_NOT_ALL_ASCII, _OUTSIDE_DATA = range(4)


@compiled
def _all_objects(data: Any, offsets: Any, stack: Any) -> int:
    """Whether every value is a JSON object, and if so whether all their bytes are ASCII.

    Only the strings' bytes can be other than ASCII in an object, and the string scans OR
    the words they read anyway: ORing every value's bytes after its check cost 26 ns of the
    check's 280 for the benchmark's payloads of 250 bytes, and a pass of its own over a
    batch's payloads, read again from memory, 4-5% of the decoding thread's time.
    ``stack``: ``_DEEPEST`` bytes, given by the caller, which keeps them alive.

    In bounds: checked first, the offsets lie within ``data`` and ``stack`` holds
    ``_DEEPEST`` bytes. Every scan then reads a value's bytes only below its end (each read
    follows a check against it, words only where 8 bytes are left), and the stack only below
    the depth, which never passes ``_DEEPEST``.
    """
    address, size, stack_address = data.ctypes.data, data.shape[0], stack.ctypes.data
    if stack.shape[0] < _DEEPEST or not offsets_within(offsets, size):
        return _OUTSIDE_DATA
    seen = NO_BITS
    for row in range(offsets.shape[0] - 1):
        start, end = int(offsets[row]), int(offsets[row + 1])
        is_object, bits = _is_object(address, start, end, stack_address)
        if not is_object:
            return _NOT_ALL_OBJECTS
        seen |= bits
    return _OBJECTS_NOT_ALL_ASCII if has_high_byte(seen) else _OBJECTS_IN_ASCII
