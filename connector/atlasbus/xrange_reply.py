"""Cutting raw XRANGE replies into Arrow columns without a Python object per value (executor).

hiredis turns a page of 1,000 envelopes into some 19,000 Python objects (a list per entry and
per field list, a bytes object per ID, name and value), which decoding then picks apart and
copies into Arrow arrays again: two thirds of a reader's CPU before any value is checked. Here
the reply's RESP bytes are walked by JIT-compiled loops (numba), which note where each ID and
value lies and copy each field's values into one Arrow binary column.

That applies to a page whose entries all carry the same field names in the same order (what a
publisher writes). Any other page is parsed by hiredis from the same bytes and decoded the
general way, so an entry decodes the same whatever its page (``atlasbus.decode``).

Compiled code is cached on disk (numba's ``cache=True``), so a worker process pays the
compilation once per installation, then about 0.5 CPU-s to load numba and the code: beside this
module, else in the user's cache directory, else in the temporary directory
(``atlasbus.compiled``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.column_page import ColumnPage
from atlasbus.compiled import byte_at, compiled, copy_bytes, inlined, word_at

# What a walk of the buffer found.
MORE = 0  # the reply is not all there yet: read more bytes and walk again from where it stopped
COMPLETE = 1  # the reply ends at the returned position
NOT_XRANGE = -1  # not an array of [ID, [name, value, ...]] (an error reply, say): use hiredis
FULL = 2  # the walk's arrays for names and values are full: grow them and walk on

_ASTERISK, _DOLLAR, _CR, _MINUS, _ZERO = 42, 36, 13, 45, 48


@compiled
def _number(buf: int, pos: int, end: int) -> tuple[int, int]:
    """The decimal integer at ``pos`` ended by CRLF, and the position after it; -1 if cut off.

    A non-digit gives a position of -2: the reply is not what XRANGE sends.
    """
    value = 0
    negative = False
    if pos < end and byte_at(buf, pos) == _MINUS:
        negative = True
        pos += 1
    digits = 0
    while pos < end:
        byte = byte_at(buf, pos)
        if byte == _CR:
            if pos + 1 >= end:
                return 0, -1
            if digits == 0 or digits > 18:
                return 0, -2
            return (-value if negative else value), pos + 2
        if byte < 48 or byte > 57:
            return 0, -2
        value = value * 10 + (byte - 48)
        digits += 1
        pos += 1
    return 0, -1


@inlined
def _short_length(buf: int, pos: int) -> tuple[int, int]:
    """The decimal of 1 to 3 digits at ``pos`` ended by CR, and the position after its CRLF;
    -1 as the position for any other text. The caller keeps ``pos + 3`` within the bytes read.

    A bulk string's length, unrolled: ``_number``'s loop, whose trip count varies from value
    to value, took 40% of the walk's time.
    """
    first = byte_at(buf, pos) - _ZERO
    if first < 0 or first > 9:
        return 0, -1
    byte = byte_at(buf, pos + 1)
    if byte == _CR:
        return first, pos + 3
    second = byte - _ZERO
    if second < 0 or second > 9:
        return 0, -1
    byte = byte_at(buf, pos + 2)
    if byte == _CR:
        return 10 * first + second, pos + 4
    third = byte - _ZERO
    if third < 0 or third > 9 or byte_at(buf, pos + 3) != _CR:
        return 0, -1
    return 100 * first + 10 * second + third, pos + 5


@compiled
def _bulk(buf: int, pos: int, end: int) -> tuple[int, int, int]:
    """A bulk string at ``pos``: (status, its start, its length)."""
    if pos >= end:
        return MORE, 0, 0
    if byte_at(buf, pos) != _DOLLAR:
        return NOT_XRANGE, 0, 0
    start = -1
    if pos + 5 <= end:
        length, start = _short_length(buf, pos + 1)
    if start < 0:  # a longer length, or one not all read yet
        length, start = _number(buf, pos + 1, end)
    if start == -1:
        return MORE, 0, 0
    if start < 0 or length < 0:
        return NOT_XRANGE, 0, 0
    if start + length + 2 > end:
        return MORE, 0, 0
    if byte_at(buf, start + length) != _CR:
        return NOT_XRANGE, 0, 0
    return COMPLETE, start, length


@compiled
def _walk(
    buf: Any,
    end: int,
    pos: int,
    entry: int,
    tokens: int,
    id_start: Any,
    id_length: Any,
    field_counts: Any,
    token_start: Any,
    token_length: Any,
) -> tuple[int, int, int, int]:
    """Walk entries from ``entry`` (at byte ``pos``, ``tokens`` names and values seen); resumable.

    Notes where each ID, name and value lies. Returns (status, position, entries walked, tokens
    seen); FULL when the token arrays are too small for the next entry.
    """
    address = buf.ctypes.data  # the helpers read bytes by address: no reference counting
    entries = id_start.shape[0]
    capacity = token_start.shape[0]
    while entry < entries:
        at = pos
        if at + 4 > end:
            return MORE, pos, entry, tokens
        if (
            byte_at(address, at) != _ASTERISK
            or byte_at(address, at + 1) != 50
            or byte_at(address, at + 2) != _CR
        ):  # "*2\r\n"
            return NOT_XRANGE, pos, entry, tokens
        status, start, length = _bulk(address, at + 4, end)
        if status != COMPLETE:
            return status, pos, entry, tokens
        at = start + length + 2
        if at >= end:
            return MORE, pos, entry, tokens
        if byte_at(address, at) != _ASTERISK:
            return NOT_XRANGE, pos, entry, tokens
        count, at = _number(address, at + 1, end)
        if at == -1:
            return MORE, pos, entry, tokens
        if at < 0 or count < 0 or count % 2:
            return NOT_XRANGE, pos, entry, tokens
        if tokens + count > capacity:
            return FULL, pos, entry, tokens
        for token in range(tokens, tokens + count):
            status, value_start, value_length = _bulk(address, at, end)
            if status != COMPLETE:
                return status, pos, entry, tokens
            token_start[token] = value_start
            token_length[token] = value_length
            at = value_start + value_length + 2
        id_start[entry] = start
        id_length[entry] = length
        field_counts[entry] = count // 2
        tokens += count
        pos = at
        entry += 1
    return COMPLETE, pos, entry, tokens


@compiled
def _same_names(buf: Any, field_counts: Any, token_start: Any, token_length: Any) -> bool:
    """Whether every entry has the first entry's field names, in the same order.

    Names are compared 8 bytes at a time: a byte at a time, this was a tenth of cutting.
    """
    address = buf.ctypes.data
    width = field_counts[0]
    for count in field_counts:
        if count != width:
            return False
    tokens = 2 * width
    for row in range(1, field_counts.shape[0]):
        for name in range(0, tokens, 2):
            token = row * tokens + name
            length = token_length[token]
            if length != token_length[name]:
                return False
            a, b = token_start[token], token_start[name]
            k = 0
            while k + 8 <= length:
                if word_at(address, a + k) != word_at(address, b + k):
                    return False
                k += 8
            while k < length:
                if byte_at(address, a + k) != byte_at(address, b + k):
                    return False
                k += 1
    return True


@compiled
def _gather(
    buf: Any, id_start: Any, id_length: Any, token_start: Any, token_length: Any, width: int
) -> Any:
    """Every column at once, entry by entry through the reply: Arrow offsets and bytes.

    Column 0 holds the IDs, column 1 + f the values of field f. Returns the offsets (one row
    per column, int32), the bytes of all columns one after another, and where each column's
    bytes begin in them (and where the last ends).
    """
    entries = id_start.shape[0]
    columns = width + 1
    offsets = np.zeros((columns, entries + 1), np.int32)
    bounds = np.zeros(columns + 1, np.int64)
    for column in range(columns):
        total = 0
        for row in range(entries):
            if column == 0:
                total += id_length[row]
            else:
                total += token_length[row * 2 * width + 2 * column - 1]
            offsets[column, row + 1] = total
        bounds[column + 1] = bounds[column] + total
    data = np.empty(bounds[columns], np.uint8)
    for row in range(entries):
        copy_bytes(data, bounds[0] + offsets[0, row], buf, id_start[row], id_length[row])
        for column in range(1, columns):
            token = row * 2 * width + 2 * column - 1
            at = bounds[column] + offsets[column, row]
            copy_bytes(data, at, buf, token_start[token], token_length[token])
    return offsets, data, bounds


class Walk:
    """One reply's walk: where it stopped (to resume when more bytes arrive) and what it noted.

    ``begin`` is where the reply starts in the buffer; every position noted is the buffer's.
    """

    def __init__(self, begin: int = 0) -> None:
        self.begin = begin
        self.entries = -1  # from the reply's header; -1 until the header is read
        self.position = begin
        self.walked = 0
        self.tokens = 0
        # ID starts and lengths, fields per entry, token starts and lengths (as walked)
        self.places: tuple[np.ndarray, ...] = ()

    def start(self, entries: int, position: int) -> None:
        self.entries, self.position = entries, position
        per_entry = np.empty((3, entries), np.int64)
        tokens = np.empty((2, 16 * entries), np.int64)  # 8 fields an entry before growing
        self.places = (*per_entry, *tokens)

    def grow(self) -> None:
        id_start, id_length, field_counts, token_start, token_length = self.places
        tokens = np.empty((2, 2 * len(token_start) + 16), np.int64)
        tokens[0, : self.tokens] = token_start[: self.tokens]
        tokens[1, : self.tokens] = token_length[: self.tokens]
        self.places = (id_start, id_length, field_counts, *tokens)


def walk_reply(buf: np.ndarray, end: int, walk: Walk) -> int:
    """Advance ``walk`` over the reply at ``buf[walk.begin:end]``: MORE, COMPLETE or NOT_XRANGE.

    On COMPLETE, ``walk.position`` is where the reply ends.
    """
    if walk.entries < 0:
        if end <= walk.begin:
            return MORE
        if buf[walk.begin] != _ASTERISK:
            return NOT_XRANGE
        entries, position = _number(buf.ctypes.data, walk.begin + 1, end)
        if position == -1:
            return MORE
        if position < 0 or entries < 0:
            return NOT_XRANGE
        walk.start(entries, position)
    while True:
        status, walk.position, walk.walked, walk.tokens = _walk(
            buf, end, walk.position, walk.walked, walk.tokens, *walk.places
        )
        if status != FULL:
            return int(status)
        walk.grow()


def cut_reply(buf: np.ndarray, walk: Walk) -> ColumnPage | None:
    """The completely walked reply as columns; None when its entries' field layouts differ."""
    return cut_replies(buf, [walk])


def cut_replies(buf: np.ndarray, walks: Sequence[Walk]) -> ColumnPage | None:
    """Completely walked replies in ``buf`` as one page of columns, their entries in order.

    One gather for them all: a micro-batch's pages cut one by one and then joined cost the
    reader 6% more CPU (each page's Python calls and arrays, and the join's copy of every
    byte). None when the entries' field layouts differ, across replies as within one.
    """
    walks = [walk for walk in walks if walk.entries]
    if not walks:
        return ColumnPage(pa.array([], pa.binary()), [], {})
    places = _joined_places(walks)
    id_start, id_length, field_counts, token_start, token_length = places
    entries = len(id_start)
    if not _same_names(buf, field_counts, token_start, token_length):
        return None
    width = int(field_counts[0])
    names = [  # the first entry's (every entry's) names: its even tokens
        bytes(buf[start : start + length])
        for start, length in zip(
            token_start[: 2 * width : 2], token_length[: 2 * width : 2], strict=True
        )
    ]
    if len(set(names)) != width:  # a repeated name: the general path keeps the last value
        return None
    offsets, data, bounds = _gather(buf, id_start, id_length, token_start, token_length, width)
    arrays = [
        pa.Array.from_buffers(
            pa.binary(), entries, [None, pa.py_buffer(column_offsets), pa.py_buffer(values)]
        )
        for column_offsets, values in zip(offsets, np.split(data, bounds[1:-1]), strict=True)
    ]
    return ColumnPage(arrays[0], names, dict(zip(names, arrays[1:], strict=True)))


def _joined_places(walks: Sequence[Walk]) -> tuple[np.ndarray, ...]:
    """The walks' notes (ID and token places, fields per entry) as one walk's, in order."""
    noted = []
    for walk in walks:
        id_start, id_length, counts, token_start, token_length = walk.places
        entries, tokens = walk.entries, walk.tokens
        per_entry = (id_start[:entries], id_length[:entries], counts[:entries])
        noted.append((*per_entry, token_start[:tokens], token_length[:tokens]))
    if len(noted) == 1:
        return noted[0]
    return tuple(np.concatenate(parts) for parts in zip(*noted, strict=True))
