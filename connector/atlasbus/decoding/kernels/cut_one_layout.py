"""Cutting raw XRANGE replies into Arrow columns without a Python object per value (executor).

hiredis turns a page of 1,000 envelopes into some 19,000 Python objects (a list per entry and
per field list, a bytes object per ID, name and value), which decoding then picks apart and
copies into Arrow arrays again: two thirds of a reader's CPU before any value is checked. Here
the reply's RESP bytes are walked by JIT-compiled loops (numba), which note where each ID and
value lies and copy each field's values into one Arrow binary column.

That applies to a page whose entries all carry the same field names in the same order (what a
publisher writes). Any other page is cut into columns of names and values
(``atlasbus.decoding.kernels.cut_any_layout``), and an entry decodes the same whatever its page
(``atlasbus.decoding.decoder``).

Compiled code is cached on disk (numba's ``cache=True``), so a worker process pays the
compilation once per installation, then about 0.5 CPU-s to load numba and the code: beside this
module, else in the user's cache directory, else in the temporary directory
(``atlasbus.decoding.kernels.compiler``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from redis.exceptions import InvalidResponse

from atlasbus.decoding.cut_pages import ColumnPage
from atlasbus.decoding.kernels.compiler import (
    NO_BITS,
    byte_at,
    compiled,
    copy_bytes,
    inlined,
    word_at,
)

# What a walk of the buffer found.
MORE = 0  # the reply is not all there yet: read more bytes and walk again from where it stopped
COMPLETE = 1  # the reply ends at the returned position
NOT_XRANGE = -1  # not an array of [ID, [name, value, ...]] (an error reply, say): use hiredis
FULL = 2  # the walk's arrays for names and values are full: grow them and walk on
# An entry's field layout differs from the walk's: end the walk before it, walk on in a new one
# (``Walk.rest``). Only when the walk may split; otherwise the rest is walked without notes.
LAYOUT_CHANGES = 3

_ASTERISK, _DOLLAR, _CR, _LF, _MINUS, _ZERO = 42, 36, 13, 10, 45, 48


@inlined
def _decimal(buf: int, pos: int, end: int) -> tuple[int, int]:
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
            if digits == 0 or digits > 18 or byte_at(buf, pos + 1) != _LF:
                return 0, -2
            return (-value if negative else value), pos + 2
        if byte < 48 or byte > 57:
            return 0, -2
        value = value * 10 + (byte - 48)
        digits += 1
        pos += 1
    return 0, -1


@compiled
def _number(buf: int, pos: int, end: int) -> tuple[int, int]:
    """``_decimal`` for Python callers (a reply's header)."""
    value, after = _decimal(buf, pos, end)
    return value, after


@inlined
def _short_length(buf: int, pos: int, end: int) -> tuple[int, int]:
    """The decimal of 1 to 3 digits at ``pos`` ended by CRLF, and the position after it; -1
    as the position for any other text, or one not all below ``end``. The caller keeps
    ``pos + 3`` below ``end``.

    A bulk string's length, unrolled: ``_decimal``'s loop, whose trip count varies from value
    to value, took 40% of the walk's time.
    """
    first = byte_at(buf, pos) - _ZERO
    if first < 0 or first > 9:
        return 0, -1
    byte = byte_at(buf, pos + 1)
    if byte == _CR:
        return (first, pos + 3) if byte_at(buf, pos + 2) == _LF else (0, -1)
    second = byte - _ZERO
    if second < 0 or second > 9:
        return 0, -1
    byte = byte_at(buf, pos + 2)
    if byte == _CR:
        return (10 * first + second, pos + 4) if byte_at(buf, pos + 3) == _LF else (0, -1)
    third = byte - _ZERO
    if third < 0 or third > 9 or pos + 4 >= end or byte_at(buf, pos + 3) != _CR:
        return 0, -1
    if byte_at(buf, pos + 4) != _LF:
        return 0, -1
    return 100 * first + 10 * second + third, pos + 5


@inlined
def bulk(buf: int, pos: int, end: int) -> tuple[int, int, int]:
    """A bulk string at ``pos``: (status, its start, its length)."""
    if pos >= end:
        return MORE, 0, 0
    if byte_at(buf, pos) != _DOLLAR:
        return NOT_XRANGE, 0, 0
    start = -1
    if pos + 5 <= end:
        length, start = _short_length(buf, pos + 1, end)
    if start < 0:  # a longer length, or one not all read yet
        length, start = _decimal(buf, pos + 1, end)
    if start == -1:
        return MORE, 0, 0
    if start < 0 or length < 0:
        return NOT_XRANGE, 0, 0
    if start + length + 2 > end:
        return MORE, 0, 0
    if byte_at(buf, start + length) != _CR or byte_at(buf, start + length + 1) != _LF:
        return NOT_XRANGE, 0, 0
    return COMPLETE, start, length


@inlined
def entry_head(address: int, pos: int, end: int) -> tuple[int, int, int, int, int]:
    """The head of the entry at ``pos``, ``*2``, its ID and its field list's header: (status,
    the ID's start, its length, the entry's field count, the position of its first name)."""
    if pos + 4 > end:
        return MORE, 0, 0, 0, 0
    if (
        byte_at(address, pos) != _ASTERISK
        or byte_at(address, pos + 1) != 50
        or byte_at(address, pos + 2) != _CR
        or byte_at(address, pos + 3) != _LF
    ):  # "*2\r\n"
        return NOT_XRANGE, 0, 0, 0, 0
    status, start, length = bulk(address, pos + 4, end)
    if status != COMPLETE:
        return status, 0, 0, 0, 0
    at = start + length + 2
    if at >= end:
        return MORE, 0, 0, 0, 0
    if byte_at(address, at) != _ASTERISK:
        return NOT_XRANGE, 0, 0, 0, 0
    count, at = _decimal(address, at + 1, end)
    if at == -1:
        return MORE, 0, 0, 0, 0
    if at < 0 or count < 0 or count % 2:
        return NOT_XRANGE, 0, 0, 0, 0
    return COMPLETE, start, length, count // 2, at


# The fewest bytes a field takes in a reply: an empty name and an empty value, "$0\r\n\r\n" each.
SMALLEST_FIELD = 12


@inlined
def full_or_more(names: int, at: int, end: int) -> int:
    """FULL: grow the notes for an entry of ``names`` fields; MORE while fewer bytes have
    arrived than that many fields take (a garbled count must not grow them without end)."""
    return MORE if names > (end - at) // SMALLEST_FIELD else FULL


# A walk's ``width`` before its first entry is walked.
_NO_ENTRY_YET = -1


@compiled
def _walk(
    buf: Any,
    end: int,
    total: int,
    pos: int,
    entry: int,
    values: int,
    width: int,
    id_start: Any,
    id_length: Any,
    value_start: Any,
    value_length: Any,
    name_start: Any,
    name_length: Any,
) -> tuple[int, int, int, int, int]:
    """Walk entries from ``entry`` (at byte ``pos``, ``values`` values noted); resumable.

    Notes where each ID and value lies, and where the first entry's names lie (``width`` of
    them). Every later entry's names are compared with those as they are walked, while their
    bytes are in the CPU's caches (a pass of its own over the cut page's names took a tenth of
    cutting it); at the first difference the walk returns LAYOUT_CHANGES at that entry's
    start. Returns (status, position, entries walked, values noted, width); FULL when the
    arrays are too small for the next entry.

    In bounds: every byte read lies below ``end``, which is cut to the buffer's length here
    (``bulk`` and ``entry_head`` check each read against it), and every note is written below
    its array's length, checked before the entry's notes are written.
    """
    address = buf.ctypes.data  # the helpers read bytes by address: no reference counting
    end = min(end, buf.shape[0])
    capacity = value_start.shape[0]
    while entry < total:
        if entry >= id_start.shape[0]:
            return FULL, pos, entry, values, width
        status, start, length, names, at = entry_head(address, pos, end)
        if status != COMPLETE:
            return status, pos, entry, values, width
        if width == _NO_ENTRY_YET:
            if names > name_start.shape[0]:
                return full_or_more(names, at, end), pos, entry, values, width
        elif width != names:
            return LAYOUT_CHANGES, pos, entry, values, width
        if values + names > capacity:
            return full_or_more(names, at, end), pos, entry, values, width
        for name in range(names):
            status, name_at, name_size = bulk(address, at, end)
            if status != COMPLETE:
                return status, pos, entry, values, width
            at = name_at + name_size + 2
            status, value_at, value_size = bulk(address, at, end)
            if status != COMPLETE:
                return status, pos, entry, values, width
            at = value_at + value_size + 2
            if width == _NO_ENTRY_YET:
                name_start[name] = name_at
                name_length[name] = name_size
            elif not _same_name(address, name_at, name_size, name_start[name], name_length[name]):
                return LAYOUT_CHANGES, pos, entry, values, width
            value_start[values + name] = value_at
            value_length[values + name] = value_size
        id_start[entry] = start
        id_length[entry] = length
        values += names
        width = names
        pos = at
        entry += 1
    return COMPLETE, pos, entry, values, width


# The low ``n`` bytes of a word, for comparing names shorter than a word in one step.
_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(8)], np.uint64)


@inlined
def _same_name(address: int, at: int, size: int, other: int, other_size: int) -> bool:
    """Whether the name of ``size`` bytes at ``at`` is the one of ``other_size`` at ``other``.

    Compared a word at a time, the last word overlapping the one before it, and a name shorter
    than a word in one masked word: a byte at a time, the tails of ``payload`` and
    ``correlation_id`` made comparing the names a third of the walk. A word read may run past
    a name: the caller has walked the value's bulk string after each name (at least 8 bytes
    with the CRLFs).
    """
    if size != other_size:
        return False
    if size < 8:
        difference = word_at(address, at) ^ word_at(address, other)
        return bool((difference & _LOW_BYTES[size]) == NO_BITS)
    k = 0
    while k + 8 < size:
        if word_at(address, at + k) != word_at(address, other + k):
            return False
        k += 8
    return bool(word_at(address, at + size - 8) == word_at(address, other + size - 8))


@compiled
def _gather(
    buf: Any, id_start: Any, id_length: Any, value_start: Any, value_length: Any, width: int
) -> Any:
    """Every column at once, entry by entry through the reply: Arrow offsets and bytes.

    Column 0 holds the IDs, column 1 + f the values of field f. Returns the offsets (one row
    per column, int32), the bytes of all columns one after another, and where each column's
    bytes begin in them (and where the last ends); None when a note lies outside ``buf``.

    In bounds: the notes are checked against the buffer first (a walk made them, but a
    caller's mistake must not read elsewhere), and every write lies in ``data``, sized by
    the same lengths.
    """
    entries = id_start.shape[0]
    if id_length.shape[0] < entries or value_start.shape[0] < entries * width:
        return None
    if value_length.shape[0] < entries * width or not spans_within(
        buf.shape[0], id_start[:entries], id_length[:entries]
    ):
        return None
    if not spans_within(
        buf.shape[0], value_start[: entries * width], value_length[: entries * width]
    ):
        return None
    columns = width + 1
    offsets = np.zeros((columns, entries + 1), np.int32)
    bounds = np.zeros(columns + 1, np.int64)
    for column in range(columns):
        total = 0
        for row in range(entries):
            if column == 0:
                total += id_length[row]
            else:
                total += value_length[row * width + column - 1]
            offsets[column, row + 1] = total
        bounds[column + 1] = bounds[column] + total
    data = np.empty(bounds[columns], np.uint8)
    target, source = data.ctypes.data, buf.ctypes.data
    for row in range(entries):
        copy_bytes(target, bounds[0] + offsets[0, row], source, id_start[row], id_length[row])
        for column in range(1, columns):
            value = row * width + column - 1
            at = bounds[column] + offsets[column, row]
            copy_bytes(target, at, source, value_start[value], value_length[value])
    return offsets, data, bounds


@inlined
def spans_within(size: int, starts: Any, lengths: Any) -> bool:
    """Whether every span (``starts[i]``, ``lengths[i]`` bytes) lies within ``size`` bytes."""
    for index in range(starts.shape[0]):
        start, length = starts[index], lengths[index]
        if start < 0 or length < 0 or start + length > size:
            return False
    return True


def spans_error(what: str) -> InvalidResponse:
    """What a gather that found a note outside its buffer raises (a bug, not bad input)."""
    return InvalidResponse(f"{what}: a noted span lies outside the reply's buffer")


# IDs noted before a walk's arrays grow: a header claiming more entries than arrive (a
# garbled reply) must not allocate for them all.
_FIRST_IDS = 4096


class ReplyWalk:
    """One reply's walk: where it stopped (to resume when more bytes arrive) and what it noted.

    ``begin`` is where the reply starts in the buffer; every position noted is the buffer's.
    ``places`` begins with the IDs' starts and lengths.
    """

    def __init__(self, begin: int = 0) -> None:
        self.begin = begin
        self.entries = -1  # from the reply's header; -1 until the header is read
        self.position = begin
        self.walked = 0
        self.first_entry = begin  # where the first entry starts, after any array header
        self.places: tuple[np.ndarray, ...] = ()

    def start(self, entries: int, position: int) -> None:
        """The reply's header is read: ``entries`` follow from ``position``."""
        self.entries, self.position, self.first_entry = entries, position, position

    def id_room(self) -> int:
        """How many entries' IDs to note before growing: all of them, up to ``_FIRST_IDS``."""
        return min(self.entries, _FIRST_IDS)

    def header_read(self, buf: np.ndarray, end: int) -> int:
        """COMPLETE once the reply's array header is read (``start`` called), else MORE or
        NOT_XRANGE."""
        if self.entries >= 0:
            return COMPLETE
        if end <= self.begin:
            return MORE
        if buf[self.begin] != _ASTERISK:
            return NOT_XRANGE
        entries, position = _number(buf.ctypes.data, self.begin + 1, end)
        if position == -1:
            return MORE
        if position < 0 or entries < 0:
            return NOT_XRANGE
        self.start(entries, position)
        return COMPLETE


class Walk(ReplyWalk):
    """A walk of entries of one field layout, noting each value where it lies (to cut one
    column per field)."""

    def __init__(self, begin: int = 0) -> None:
        super().__init__(begin)
        self.values = 0
        self.width = _NO_ENTRY_YET  # names an entry, once the first entry is walked

    def start(self, entries: int, position: int) -> None:
        super().start(entries, position)
        ids = np.empty((2, self.id_room()), np.int64)
        values = np.empty((2, 8 * self.id_room()), np.int64)  # 8 fields an entry before growing
        names = np.empty((2, 16), np.int64)
        # ID starts and lengths, value starts and lengths, the first entry's name starts and
        # lengths (as walked)
        self.places = (*ids, *values, *names)

    def grow(self) -> None:
        """Room for more entries, values and names, keeping those noted (``_walk`` said
        FULL)."""
        id_start, id_length = self.places[:2]
        if self.walked == len(id_start):
            room = min(self.entries, 2 * len(id_start) + 16)
            id_start, id_length = grown(self.places[:2], self.walked, room)
        values = grown(self.places[2:4], self.values, 2 * len(self.places[2]) + 16)
        names = grown(self.places[4:], max(self.width, 0), 2 * len(self.places[4]))
        self.places = (id_start, id_length, *values, *names)

    def names(self, buf: np.ndarray) -> list[bytes]:
        """The field names of every entry walked, in order."""
        starts, lengths = (notes[: self.width].tolist() for notes in self.places[4:])
        text = buf.data  # sliced with Python ints: half the cost of numpy's slices per name
        return [
            text[start : start + length].tobytes()
            for start, length in zip(starts, lengths, strict=True)
        ]


def grown(arrays: tuple[np.ndarray, ...], kept: int, size: int) -> np.ndarray:
    """``arrays`` (starts, lengths) as rows of ``size`` elements, their first ``kept`` kept."""
    larger = np.empty((len(arrays), size), np.int64)
    for row, array in enumerate(arrays):
        larger[row, :kept] = array[:kept]
    return larger


def walk_reply(buf: np.ndarray, end: int, walk: Walk) -> int:
    """Advance ``walk`` over the reply at ``buf[walk.begin:end]``: MORE, COMPLETE, NOT_XRANGE
    or LAYOUT_CHANGES (the walk stops at the first entry whose field names differ from the
    first entry's, in number, order or bytes).

    On COMPLETE, ``walk.position`` is where the reply ends.
    """
    end = min(end, len(buf))  # every read below, the header's too, lies within the buffer
    if (header := walk.header_read(buf, end)) != COMPLETE:
        return header
    while True:
        status, walk.position, walk.walked, walk.values, walk.width = _walk(
            buf,
            end,
            walk.entries,
            walk.position,
            walk.walked,
            walk.values,
            walk.width,
            *walk.places,
        )
        if status != FULL:
            return int(status)
        walk.grow()


def cut_reply(buf: np.ndarray, walk: Walk) -> ColumnPage | None:
    """The completely walked reply as columns; None when it repeats a field name (the
    general path keeps the last value)."""
    names = walk.names(buf) if walk.entries else []
    if len(set(names)) != len(names):
        return None
    return cut_replies(buf, [walk], names)


def cut_replies(buf: np.ndarray, walks: Sequence[Walk], names: Sequence[bytes]) -> ColumnPage:
    """Completely walked replies in ``buf``, each of the field layout ``names`` (no name
    twice), as one page of columns, their entries in order.

    One gather for them all: a micro-batch's pages cut one by one and then joined cost the
    reader 6% more CPU (each page's Python calls and arrays, and the join's copy of every
    byte). The caller has the names from grouping the walks by layout: reading each walk's
    again here was 7 ns an entry.
    """
    walks = [walk for walk in walks if walk.entries]
    if not walks:
        return ColumnPage(pa.array([], pa.binary()), [], {})
    names = list(names)
    width = len(names)
    id_start, id_length, value_start, value_length = _joined_places(walks)
    entries = len(id_start)
    gathered = _gather(buf, id_start, id_length, value_start, value_length, width)
    if gathered is None:
        raise spans_error("cutting replies into columns")
    offsets, data, bounds = gathered
    arrays = [
        pa.Array.from_buffers(
            pa.binary(), entries, [None, pa.py_buffer(column_offsets), pa.py_buffer(values)]
        )
        for column_offsets, values in zip(offsets, np.split(data, bounds[1:-1]), strict=True)
    ]
    return ColumnPage(arrays[0], names, dict(zip(names, arrays[1:], strict=True)))


def _joined_places(walks: Sequence[Walk]) -> tuple[np.ndarray, ...]:
    """The walks' notes of IDs and values as one walk's, in order."""
    noted = []
    for walk in walks:
        id_start, id_length, value_start, value_length = walk.places[:4]
        entries, values = walk.entries, walk.values
        noted.append(
            (id_start[:entries], id_length[:entries], value_start[:values], value_length[:values])
        )
    if len(noted) == 1:
        return noted[0]
    return tuple(np.concatenate(parts) for parts in zip(*noted, strict=True))
