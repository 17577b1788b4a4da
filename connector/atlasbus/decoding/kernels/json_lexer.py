"""Compiled scanning of JSON text where it lies in a buffer: whitespace and strings (executor).

Shared by the column page's JSON checks and parsers (``atlasbus.decoding.kernels.json_objects``,
``atlasbus.decoding.kernels.flat_json_maps``). Each takes the buffer's address
(``atlasbus.decoding.kernels.compiler.byte_at``) and positions in it, and says -1 where the text is
not what it should be or where the caller would rather leave it to orjson. None of them reads a byte
outside [``pos``, ``end``): the kernels that call them check at their entry that every value lies
within the buffer.
"""

from __future__ import annotations

import numpy as np

from atlasbus.decoding.kernels.compiler import (
    NO_BITS,
    Word,
    byte_at,
    bytes_below,
    bytes_equal,
    compiled,
    first_marked,
    inlined,
    word_at,
)

_SPACE, _TAB, _LF, _CR = 32, 9, 10, 13
_QUOTE, _BACKSLASH, _LOWER_U, _ZERO = 34, 92, 117, 48
_SIMPLE_ESCAPES = tuple(b'"\\/bfnrt')


@inlined
def skip_space(data: int, pos: int, end: int) -> int:
    """The first position from ``pos`` that is not JSON whitespace (or ``end``)."""
    while pos < end:
        byte = byte_at(data, pos)
        if byte != _SPACE and byte != _LF and byte != _CR and byte != _TAB:
            break
        pos += 1
    return pos


@inlined
def _string_stops(word: Word) -> Word:
    """The quotes, backslashes and control bytes of ``word`` as ``bytes_below`` marks them."""
    return bytes_equal(word, _QUOTE) | bytes_equal(word, _BACKSLASH) | bytes_below(word, _SPACE)


@inlined
def after_string(data: int, pos: int, end: int, escapes: bool) -> int:
    """Past the closing quote of the string whose text starts at ``pos``.

    -1 at a control byte, an escape JSON does not have, a lone surrogate escape (orjson
    refuses it), an unclosed string, or any escape when ``escapes`` is False.
    """
    after: int = scan_string(data, pos, end, escapes)[0]
    return after


@inlined
def scan_string(data: int, pos: int, end: int, escapes: bool) -> tuple[int, Word]:
    """``after_string``, and the OR of the bytes read on the way (``has_high_byte`` of it):
    every byte of the string's text, and some bytes after its closing quote.

    The text is read a word at a time, and a word with a quote, a backslash or a control byte
    goes straight to the first: a byte at a time cost four times as much on long values, and
    going byte by byte through the word that holds the closing quote (all of a short string)
    a third of the payload check's time. A word is read only where all 8 bytes lie below
    ``end``; the last 7 are read one at a time.
    """
    seen = NO_BITS
    while pos < end:
        if pos + 8 <= end:
            word = word_at(data, pos)
            seen |= word
            stops = _string_stops(word)
            if stops == NO_BITS:
                pos += 8
                continue
            pos += first_marked(stops)
        byte = byte_at(data, pos)
        if byte == _QUOTE:
            return pos + 1, seen
        if byte < _SPACE:
            return -1, seen
        if byte == _BACKSLASH:
            if not escapes or pos + 1 >= end:
                return -1, seen
            escaped = byte_at(data, pos + 1)
            if escaped == _LOWER_U:
                pos = _after_unicode_escape(data, pos, end)
                if pos < 0:
                    return -1, seen
                continue
            if escaped not in _SIMPLE_ESCAPES:
                return -1, seen
            pos += 2
            continue
        seen |= np.uint64(byte)
        pos += 1  # within the last 7 bytes, read one at a time
    return -1, seen


@compiled
def _code_unit(data: int, pos: int, end: int) -> int:
    """The UTF-16 code unit of the ``\\uXXXX`` escape at ``pos``; -1 if there is none.

    In bounds: reads the 6 bytes from ``pos`` only once checked to lie in [0, ``end``), which
    its callers keep within the buffer (compiled apart, it cannot know the buffer's length).
    """
    if pos < 0 or pos + 6 > end:
        return -1
    if byte_at(data, pos) != _BACKSLASH or byte_at(data, pos + 1) != _LOWER_U:
        return -1
    code = 0
    for k in range(pos + 2, pos + 6):
        digit = byte_at(data, k)
        if _ZERO <= digit <= _ZERO + 9:
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
    """Past the ``\\u`` escape at ``pos``, or the surrogate pair it starts; -1 if neither.

    In bounds: reads only through ``_code_unit``, which checks its 6 bytes against ``end``.
    """
    code = _code_unit(data, pos, end)
    if code < 0xD800 or code > 0xDFFF:
        return pos + 6 if code >= 0 else -1
    if code > 0xDBFF:
        return -1  # a low surrogate first: orjson refuses it
    low = _code_unit(data, pos + 6, end)
    return pos + 12 if 0xDC00 <= low <= 0xDFFF else -1
