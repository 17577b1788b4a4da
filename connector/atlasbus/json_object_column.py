"""Whether every value of a binary column is a JSON object, by compiled loops (executor).

The column form of ``atlasbus.json_objects``: a column page's ``payload`` values are checked
where they lie in the Arrow buffer, with no bytes object made per value for simdjson.

Like simdjson there, this only ever says yes where orjson, the contract's parser, would; "not
sure" sends the page to the per-value checks. It takes JSON's grammar with a margin: nesting
at most 64 deep, surrogates escaped only in pairs, numbers up to the largest double (orjson
refuses an infinite one) with at most three exponent digits, and UTF-8 checked by Arrow over
the whole column.
``tests/test_json_objects.py`` holds it to orjson on edge cases and mutated documents.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.compiled import byte_at, compiled
from atlasbus.flat_json_maps import skip_plain_words, skip_space

_QUOTE, _BACKSLASH, _COLON, _COMMA, _MINUS, _PLUS, _DOT = 34, 92, 58, 44, 45, 43, 46
_OPEN_OBJECT, _OPEN_ARRAY = 123, 91  # each closing bracket is its opening one plus 2
_ZERO, _NINE, _LOWER_E, _UPPER_E, _LOWER_U = 48, 57, 101, 69, 117
_T, _R, _U, _E, _F, _A, _L, _S, _N = b"truefalsn"  # the letters of true, false and null
_SIMPLE_ESCAPES = tuple(b'"\\/bfnrt')
_DEEPEST = 64
# The largest double is 1.7976931348623157e308: a number whose first digit stands for 10**308
# is finite when its digits are at most these (a larger one, or more digits, goes to orjson).
_LARGEST_MAGNITUDE = 308
_LARGEST_DOUBLE_DIGITS = tuple(b"17976931348623157")


def json_object_texts(values: pa.Array) -> pa.Array | None:
    """``values`` as a string column when every one is a JSON object; None when not sure."""
    if values.type != pa.binary() or values.null_count:
        return None
    if len(values) == 0:
        return pa.array([], pa.string())
    _, offsets_buffer, data_buffer = values.buffers()
    end = values.offset + len(values) + 1
    offsets = np.frombuffer(offsets_buffer, np.int32)[values.offset : end]
    data = (
        np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    )
    if not _all_objects(data.ctypes.data, offsets):
        return None
    try:
        return values.cast(pa.string())  # checks the UTF-8, inside strings the only non-ASCII
    except pa.ArrowInvalid:
        return None


@compiled
def _is_digit(byte: int) -> bool:
    return _ZERO <= byte <= _NINE


@compiled
def _code_unit(data: int, pos: int, end: int) -> int:
    """The UTF-16 code unit of the ``\\uXXXX`` escape at ``pos``; -1 if there is none."""
    if pos + 6 > end or byte_at(data, pos) != _BACKSLASH or byte_at(data, pos + 1) != _LOWER_U:
        return -1
    code = 0
    for k in range(pos + 2, pos + 6):
        digit = byte_at(data, k)
        if _is_digit(digit):
            code = code * 16 + digit - _ZERO
        elif 97 <= digit <= 102:  # a-f
            code = code * 16 + digit - 87
        elif 65 <= digit <= 70:  # A-F
            code = code * 16 + digit - 55
        else:
            return -1
    return code


@compiled
def _after_unicode_escape(data: int, pos: int, end: int) -> int:
    """Past the ``\\u`` escape at ``pos``, or the surrogate pair it starts; -1 if neither."""
    code = _code_unit(data, pos, end)
    if code < 0xD800 or code > 0xDFFF:
        return pos + 6 if code >= 0 else -1
    if code > 0xDBFF:
        return -1  # a low surrogate first: orjson refuses it
    low = _code_unit(data, pos + 6, end)
    return pos + 12 if 0xDC00 <= low <= 0xDFFF else -1


@compiled
def _after_string(data: int, pos: int, end: int) -> int:
    """Past the closing quote of the string whose text starts at ``pos``; -1 if not sure."""
    while pos < end:
        pos = skip_plain_words(data, pos, end)
        if pos >= end:
            break
        byte = byte_at(data, pos)
        if byte == _QUOTE:
            return pos + 1
        if byte < 32:
            return -1
        if byte == _BACKSLASH:
            if pos + 1 >= end:
                return -1
            escaped = byte_at(data, pos + 1)
            if escaped == _LOWER_U:
                pos = _after_unicode_escape(data, pos, end)
                if pos < 0:
                    return -1
                continue
            if escaped not in _SIMPLE_ESCAPES:
                return -1
            pos += 2
            continue
        pos += 1
    return -1


@compiled
def _after_number(data: int, pos: int, end: int) -> int:
    """Past the JSON number at ``pos``; -1 when malformed or not clearly finite."""
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
    d.ddd..., are at most those of the largest double: then orjson's double is finite."""
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


@compiled
def _after_literal(data: int, pos: int, end: int) -> int:
    """Past ``true``, ``false`` or ``null`` at ``pos``; -1 if it is none of them."""
    if pos + 4 <= end:
        if (
            byte_at(data, pos) == _T
            and byte_at(data, pos + 1) == _R
            and byte_at(data, pos + 2) == _U
            and byte_at(data, pos + 3) == _E
        ):
            return pos + 4
        if (
            byte_at(data, pos) == _N
            and byte_at(data, pos + 1) == _U
            and byte_at(data, pos + 2) == _L
            and byte_at(data, pos + 3) == _L
        ):
            return pos + 4
    if (
        pos + 5 <= end
        and byte_at(data, pos) == _F
        and byte_at(data, pos + 1) == _A
        and byte_at(data, pos + 2) == _L
        and byte_at(data, pos + 3) == _S
        and byte_at(data, pos + 4) == _E
    ):
        return pos + 5
    return -1


@compiled
def _after_key(data: int, pos: int, end: int) -> int:
    """Past the colon of the member whose key starts at ``pos``; -1 if there is none."""
    pos = skip_space(data, pos, end)
    if pos >= end or byte_at(data, pos) != _QUOTE:
        return -1
    pos = _after_string(data, pos + 1, end)
    if pos < 0:
        return -1
    pos = skip_space(data, pos, end)
    if pos >= end or byte_at(data, pos) != _COLON:
        return -1
    return pos + 1


@compiled
def _is_object(data: int, pos: int, end: int, stack: Any) -> bool:
    """Whether the text from ``pos`` to ``end`` is one JSON object: a loop, no recursion."""
    pos = skip_space(data, pos, end)
    if pos >= end or byte_at(data, pos) != _OPEN_OBJECT:
        return False
    depth = 0
    expect_value = True
    while True:
        if expect_value:
            pos = skip_space(data, pos, end)
            if pos >= end:
                return False
            byte = byte_at(data, pos)
            if byte in (_OPEN_OBJECT, _OPEN_ARRAY):
                if depth == stack.shape[0]:
                    return False
                stack[depth] = byte
                depth += 1
                pos = skip_space(data, pos + 1, end)
                if pos < end and byte_at(data, pos) == byte + 2:  # empty
                    depth -= 1
                    pos += 1
                    expect_value = False
                elif byte == _OPEN_OBJECT:
                    pos = _after_key(data, pos, end)
                    if pos < 0:
                        return False
                continue
            if byte == _QUOTE:
                pos = _after_string(data, pos + 1, end)
            elif byte == _MINUS or _is_digit(byte):
                pos = _after_number(data, pos, end)
            else:
                pos = _after_literal(data, pos, end)
            if pos < 0:
                return False
            expect_value = False
            continue
        if depth == 0:
            return bool(skip_space(data, pos, end) == end)
        pos = skip_space(data, pos, end)
        if pos >= end:
            return False
        byte = byte_at(data, pos)
        if byte == _COMMA:
            pos += 1
            if stack[depth - 1] == _OPEN_OBJECT:
                pos = _after_key(data, pos, end)
                if pos < 0:
                    return False
            expect_value = True
        elif byte == stack[depth - 1] + 2:
            depth -= 1
            pos += 1
        else:
            return False


@compiled
def _all_objects(data: int, offsets: Any) -> bool:
    stack = np.empty(_DEEPEST, np.uint8)
    for row in range(offsets.shape[0] - 1):
        if not _is_object(data, int(offsets[row]), int(offsets[row + 1]), stack):
            return False
    return True
