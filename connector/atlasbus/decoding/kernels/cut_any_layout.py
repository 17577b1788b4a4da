"""XRANGE replies of any field layouts cut into columns of names and values (executor).

``format=raw`` keeps each entry's fields as they are, so it needs no column per field: a walk notes
where every ID, name and value lies, whatever fields each entry has, and one gather copies them into
three binary columns (IDs; names; values, in the entries' order) beside each entry's field count.
Streams whose producers write different fields, or repeat a name, are read at the speed of a uniform
one. The envelopes' cutter (``atlasbus.decoding.kernels.cut_one_layout``) must split a reply where
its layout changes and leaves a reply that changes often to hiredis, which built a Python object per
name and value: 8 µs an entry of 8 fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.decoding.cut_pages import PairPage
from atlasbus.decoding.kernels.compiler import compiled, copy_bytes
from atlasbus.decoding.kernels.cut_one_layout import (
    COMPLETE,
    FULL,
    ReplyWalk,
    bulk,
    entry_head,
    full_or_more,
    grown,
    spans_error,
    spans_within,
)


@compiled
def _walk_pairs(
    buf: Any,
    end: int,
    total: int,
    pos: int,
    entry: int,
    fields: int,
    id_start: Any,
    id_length: Any,
    fields_end: Any,
    name_start: Any,
    name_length: Any,
    value_start: Any,
    value_length: Any,
) -> tuple[int, int, int, int]:
    """Walk entries from ``entry`` (at byte ``pos``, ``fields`` fields noted); resumable.

    Notes where each ID, name and value lies, and where each entry's fields end in the
    notes. Returns (status, position, entries walked, fields noted); FULL when the arrays are
    too small for the next entry's fields.

    In bounds as ``atlasbus.decoding.kernels.cut_one_layout._walk`` is: reads below ``end``, cut to
    the buffer's length here; notes written below their arrays' lengths, checked first.
    """
    address = buf.ctypes.data  # the helpers read bytes by address: no reference counting
    end = min(end, buf.shape[0])
    capacity = min(name_start.shape[0], value_start.shape[0])
    while entry < total:
        if entry >= id_start.shape[0] or entry >= fields_end.shape[0]:
            return FULL, pos, entry, fields
        status, start, length, names, at = entry_head(address, pos, end)
        if status != COMPLETE:
            return status, pos, entry, fields
        if fields + names > capacity:
            return full_or_more(names, at, end), pos, entry, fields
        for field in range(fields, fields + names):
            status, name_at, name_size = bulk(address, at, end)
            if status != COMPLETE:
                return status, pos, entry, fields
            at = name_at + name_size + 2
            status, value_at, value_size = bulk(address, at, end)
            if status != COMPLETE:
                return status, pos, entry, fields
            at = value_at + value_size + 2
            name_start[field] = name_at
            name_length[field] = name_size
            value_start[field] = value_at
            value_length[field] = value_size
        id_start[entry] = start
        id_length[entry] = length
        fields += names
        fields_end[entry] = fields
        pos = at
        entry += 1
    return COMPLETE, pos, entry, fields


@compiled
def _gather_spans(buf: Any, starts: Any, lengths: Any) -> Any:
    """The bytes at ``starts`` (``lengths`` long) one after another: Arrow offsets and bytes;
    None when a span lies outside ``buf`` (checked first: every read is then in bounds)."""
    if lengths.shape[0] < starts.shape[0] or not spans_within(buf.shape[0], starts, lengths):
        return None
    offsets = np.zeros(starts.shape[0] + 1, np.int32)
    total = 0
    for index in range(starts.shape[0]):
        total += lengths[index]
        offsets[index + 1] = total
    data = np.empty(total, np.uint8)
    target, source = data.ctypes.data, buf.ctypes.data
    for index in range(starts.shape[0]):
        copy_bytes(target, offsets[index], source, starts[index], lengths[index])
    return offsets, data


class PairWalk(ReplyWalk):
    """A walk of entries of any field layouts, noting every name and value where it lies."""

    def __init__(self, begin: int = 0) -> None:
        super().__init__(begin)
        self.fields = 0

    def start(self, entries: int, position: int) -> None:
        super().start(entries, position)
        ids = np.empty((3, self.id_room()), np.int64)
        pairs = np.empty((4, 8 * self.id_room()), np.int64)  # 8 fields an entry before growing
        # ID starts and lengths, where each entry's fields end; name starts and lengths, value
        # starts and lengths
        self.places = (*ids, *pairs)

    def grow(self) -> None:
        """Room for more entries and fields, keeping those noted (``_walk_pairs`` said FULL)."""
        ids: tuple[np.ndarray, ...] = self.places[:3]
        if self.walked == len(ids[0]):
            ids = tuple(grown(ids, self.walked, min(self.entries, 2 * len(ids[0]) + 16)))
        pairs = grown(self.places[3:], self.fields, 2 * len(self.places[3]) + 16)
        self.places = (*ids, *pairs)


def walk_pairs(buf: np.ndarray, end: int, walk: PairWalk) -> int:
    """Advance ``walk`` over the reply at ``buf[walk.begin:end]``: MORE, COMPLETE or NOT_XRANGE.

    On COMPLETE, ``walk.position`` is where the reply ends.
    """
    end = min(end, len(buf))  # every read below, the header's too, lies within the buffer
    if (header := walk.header_read(buf, end)) != COMPLETE:
        return header
    while True:
        status, walk.position, walk.walked, walk.fields = _walk_pairs(
            buf, end, walk.entries, walk.position, walk.walked, walk.fields, *walk.places
        )
        if status != FULL:
            return int(status)
        walk.grow()


def cut_pairs(buf: np.ndarray, walks: Sequence[PairWalk]) -> PairPage:
    """Completely walked replies in ``buf`` as one page of IDs, names and values, in order."""
    id_start, id_length, fields_end, name_start, name_length, value_start, value_length = (
        _joined_places(walks)
    )
    field_offsets = np.zeros(len(fields_end) + 1, np.int32)
    field_offsets[1:] = fields_end
    return PairPage(
        _binary(buf, id_start, id_length),
        pa.array(field_offsets),
        _binary(buf, name_start, name_length),
        _binary(buf, value_start, value_length),
    )


def _binary(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    gathered = _gather_spans(buf, starts, lengths)
    if gathered is None:
        raise spans_error("cutting replies into names and values")
    offsets, data = gathered
    return pa.Array.from_buffers(
        pa.binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _joined_places(walks: Sequence[PairWalk]) -> tuple[np.ndarray, ...]:
    """The walks' notes as one walk's, in order, each entry's fields' end counted from the
    first walk's first field."""
    noted = []
    fields_before = 0
    for walk in walks:
        entries, fields = walk.entries, walk.fields
        id_start, id_length, fields_end = (notes[:entries] for notes in walk.places[:3])
        pairs = (notes[:fields] for notes in walk.places[3:])
        noted.append((id_start, id_length, fields_end + fields_before, *pairs))
        fields_before += fields
    if len(noted) == 1:
        return noted[0]
    if not noted:
        return tuple(np.empty(0, np.int64) for _ in range(7))
    return tuple(np.concatenate(parts) for parts in zip(*noted, strict=True))
