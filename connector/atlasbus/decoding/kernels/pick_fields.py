"""Fields picked by name out of a page of names and values, for the envelope decoder (executor).

A reply whose entries differ in their fields (a publisher that leaves an optional field out now and
then, or two publishers that write different ones to one stream) is cut into names and values
(``atlasbus.decoding.kernels.cut_any_layout``). The envelope decoder wants a column per field, as a
page of one layout gives: one compiled pass finds, for each field it reads, where each entry holds
it (searching only the layouts it has not just seen), and a second gathers the values into a column
per field. Read through hiredis instead, a Python object per name and value, a stream of five
layouts in turn cost the reader 20 times as much an entry as a uniform one
(``benchmarks/bench_layouts.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.decoding.cut_pages import PairPage, PartialColumn
from atlasbus.decoding.kernels.ascii_text import offsets_within, outside_data
from atlasbus.decoding.kernels.compiler import (
    binary_column,
    byte_at,
    compiled,
    copy_bytes,
    inlined,
    same_bytes,
)

# Where an entry lacks a field, in ``_last_places``'s notes.
_ABSENT = -1


def field_columns(page: PairPage, names: Sequence[bytes]) -> dict[bytes, pa.Array | PartialColumn]:
    """The values of each of ``names`` that some entry of ``page`` has, entry by entry (the
    last one where an entry repeats the name): a binary Arrow column where every entry has
    the field, else a ``PartialColumn`` of the entries that have it. Raises ``outside_data``
    for a page built wrong."""
    column, values = binary_column(page.names), binary_column(page.values)
    if column is None or values is None or not names:
        return {}
    data, name_offsets = column
    wanted = np.frombuffer(b"".join(names) or b"\0", np.uint8)
    wanted_offsets = np.zeros(len(names) + 1, np.int64)
    np.cumsum([len(name) for name in names], out=wanted_offsets[1:])
    field_offsets = page.field_offsets.to_numpy(zero_copy_only=False)
    places = _last_places(data, name_offsets, field_offsets, wanted, wanted_offsets)
    if places is None:
        raise outside_data("picking fields by name")
    picked = _gathered(*values, places)
    if picked is None:
        raise outside_data("gathering fields' values")
    gathered, offsets, data_starts, counts = picked
    entries = len(page)
    columns: dict[bytes, pa.Array | PartialColumn] = {}
    for index, name in enumerate(names):
        count = int(counts[index])
        if count == 0:
            continue
        column = _binary(gathered, offsets[index, : count + 1], data_starts[index : index + 2])
        if count == entries:
            columns[name] = column
            continue
        present = places[index] != _ABSENT
        positions = np.cumsum(present) - 1
        columns[name] = PartialColumn(column, pa.array(positions, mask=~present), pa.array(present))
    return columns


def _binary(data: np.ndarray, offsets: np.ndarray, bounds: np.ndarray) -> pa.Array:
    """A binary Arrow column over ``offsets`` (from 0) and ``data[bounds[0]:bounds[1]]``,
    without a copy."""
    start, end = int(bounds[0]), int(bounds[1])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data[start:end])]
    return pa.Array.from_buffers(pa.binary(), len(offsets) - 1, buffers)


@compiled
def _gathered(data: Any, value_offsets: Any, places: Any) -> Any:
    """Each wanted name's values (``places``, as ``_last_places`` gives) gathered into one
    buffer, a name after another: (the bytes; each name's offsets from 0, a row per name;
    where each name's bytes start and end; how many entries have each name).

    Arrow's ``take`` did it a column at a time for about 26 ns a value; the values are mostly
    shorter than 16 bytes, which ``copy_bytes`` moves without calling memcpy. Entry by entry,
    every name's value at once: a name at a time went through a page's values (3.4 MB for
    10,000 envelopes, more than the cache holds) once per name, and took 7-22% longer.

    None when the entry check fails. In bounds: the values' offsets are checked to lie
    within ``data``, and each place to be a value's (or ``_ABSENT``) as the sizing pass meets
    it, before any byte is read; each name's bytes are then copied to where its size, summed
    in that pass, leaves room in ``gathered``.
    """
    if not offsets_within(value_offsets, data.shape[0]):
        return None
    fields = value_offsets.shape[0] - 1
    count, entries = places.shape
    data_starts = np.zeros(count + 1, np.int64)  # each name's size, then summed
    for entry in range(entries):
        for index in range(count):
            field = places[index, entry]
            if field != _ABSENT:
                if field < 0 or field >= fields:
                    return None
                data_starts[index + 1] += value_offsets[field + 1] - value_offsets[field]
    for index in range(count):
        data_starts[index + 1] += data_starts[index]
    gathered = np.empty(max(data_starts[count], 1), np.uint8)
    offsets = np.zeros((count, entries + 1), np.int32)
    counts = np.zeros(count, np.int64)  # each name's values gathered so far
    source, target = data.ctypes.data, gathered.ctypes.data
    for entry in range(entries):
        for index in range(count):
            field = places[index, entry]
            if field == _ABSENT:
                continue
            start = value_offsets[field]
            size = value_offsets[field + 1] - start
            row = counts[index]
            copy_bytes(target, data_starts[index] + offsets[index, row], source, start, size)
            offsets[index, row + 1] = offsets[index, row] + size
            counts[index] = row + 1
    return gathered, offsets, data_starts, counts


# How many layouts ``_last_places`` remembers: a stream's entries mostly repeat a few.
_LAYOUTS_KEPT = 8


@compiled
def _last_places(
    names: Any, name_offsets: Any, field_offsets: Any, wanted: Any, wanted_offsets: Any
) -> Any:
    """For each wanted name (its bytes in ``wanted`` from ``wanted_offsets``), the index of
    each entry's last field of that name, or ``_ABSENT``.

    An entry whose names are those of one of the last ``_LAYOUTS_KEPT`` layouts seen, byte for
    byte and in order, takes that layout's places; only a new layout is searched name by name.

    None when the entry check fails. In bounds: checked first, the names' offsets lie within
    ``names``, the wanted names' within ``wanted``, and the entries' field offsets among the
    names; every name compared then lies between its offset and the next, and the places
    written are within their arrays' shapes.
    """
    if not (
        offsets_within(name_offsets, names.shape[0])
        and offsets_within(wanted_offsets, wanted.shape[0])
        and offsets_within(field_offsets, name_offsets.shape[0] - 1)
    ):
        return None
    count = wanted_offsets.shape[0] - 1
    entries = field_offsets.shape[0] - 1
    places = np.full((count, entries), _ABSENT, np.int64)
    address = names.ctypes.data
    # Each kept layout: an entry that has it, and its places counted from the entry's first field.
    kept_entries = np.full(_LAYOUTS_KEPT, -1, np.int64)
    kept_places = np.full((_LAYOUTS_KEPT, count), _ABSENT, np.int64)
    next_slot = 0
    for entry in range(entries):
        first = field_offsets[entry]
        slot = _kept_layout(address, name_offsets, field_offsets, entry, kept_entries)
        if slot < 0:
            slot = next_slot
            next_slot = (next_slot + 1) % _LAYOUTS_KEPT
            kept_entries[slot] = entry
            _search_layout(
                address,
                name_offsets,
                field_offsets,
                entry,
                wanted,
                wanted_offsets,
                kept_places[slot],
            )
        for index in range(count):
            place = kept_places[slot, index]
            if place != _ABSENT:
                places[index, entry] = first + place
    return places


@inlined
def _kept_layout(
    address: int, name_offsets: Any, field_offsets: Any, entry: int, kept_entries: Any
) -> int:
    """The slot of the kept layout whose names are ``entry``'s, or -1."""
    first, end = field_offsets[entry], field_offsets[entry + 1]
    start, size = name_offsets[first], name_offsets[end] - name_offsets[first]
    for slot in range(kept_entries.shape[0]):
        other = kept_entries[slot]
        if other < 0:
            return -1
        other_first = field_offsets[other]
        if field_offsets[other + 1] - other_first != end - first:
            continue
        other_start = name_offsets[other_first]
        if name_offsets[other_first + end - first] - other_start != size:
            continue
        same = True
        for field in range(1, end - first):
            if (
                name_offsets[first + field] - start
                != name_offsets[other_first + field] - other_start
            ):
                same = False
                break
        if same and same_bytes(address, start, other_start, size):
            return slot
    return -1


@inlined
def _search_layout(
    address: int,
    name_offsets: Any,
    field_offsets: Any,
    entry: int,
    wanted: Any,
    wanted_offsets: Any,
    kept: Any,
) -> None:
    """Note in ``kept`` where ``entry`` holds each wanted name last, counted from its first
    field, or ``_ABSENT``."""
    wanted_address = wanted.ctypes.data
    count = wanted_offsets.shape[0] - 1
    first = field_offsets[entry]
    for index in range(count):
        kept[index] = _ABSENT
    for field in range(first, field_offsets[entry + 1]):
        start = name_offsets[field]
        size = name_offsets[field + 1] - start
        for index in range(count):
            other = wanted_offsets[index]
            if wanted_offsets[index + 1] - other != size:
                continue
            same = True
            for k in range(size):
                if byte_at(address, start + k) != byte_at(wanted_address, other + k):
                    same = False
                    break
            if same:
                kept[index] = field - first
                break
