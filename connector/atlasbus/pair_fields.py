"""Fields picked by name out of a page of names and values, for the envelope decoder (executor).

A reply whose entries differ in their fields (a publisher that leaves an optional field out
now and then, or two publishers that write different ones to one stream) is cut into names
and values (``atlasbus.xrange_pairs``). The envelope decoder wants a column per field, as a
page of one layout gives: one compiled pass finds, for each field it reads, where each entry
holds it, and Arrow's ``take`` gathers the values. Before, such replies went to hiredis, a
Python object per name and value, and a stream of five layouts in turn cost the reader 20
times as much an entry as a uniform one (``benchmarks/bench_layouts.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from atlasbus.column_page import PairPage, PartialColumn
from atlasbus.compiled import binary_column, byte_at, compiled

# Where an entry lacks a field, in ``_last_places``'s notes.
_ABSENT = -1


def field_columns(page: PairPage, names: Sequence[bytes]) -> dict[bytes, pa.Array | PartialColumn]:
    """The values of each of ``names`` that some entry of ``page`` has, entry by entry (the
    last one where an entry repeats the name): a binary Arrow column where every entry has
    the field, else a ``PartialColumn`` of the entries that have it."""
    column = binary_column(page.names)
    if column is None or not names:
        return {}
    data, name_offsets = column
    wanted = np.frombuffer(b"".join(names) or b"\0", np.uint8)
    wanted_offsets = np.zeros(len(names) + 1, np.int64)
    np.cumsum([len(name) for name in names], out=wanted_offsets[1:])
    field_offsets = page.field_offsets.to_numpy(zero_copy_only=False)
    places = _last_places(data, name_offsets, field_offsets, wanted, wanted_offsets)
    columns: dict[bytes, pa.Array | PartialColumn] = {}
    for name, picks in zip(names, places, strict=True):
        absent = picks == _ABSENT
        if absent.all():
            continue
        if not absent.any():
            columns[name] = page.values.take(pa.array(picks))
            continue
        present = ~absent
        positions = np.cumsum(present) - 1
        columns[name] = PartialColumn(
            page.values.take(pa.array(picks[present])),
            pa.array(positions, mask=absent),
            pa.array(present),
        )
    return columns


@compiled
def _last_places(
    names: Any, name_offsets: Any, field_offsets: Any, wanted: Any, wanted_offsets: Any
) -> Any:
    """For each wanted name (its bytes in ``wanted`` from ``wanted_offsets``), the index of
    each entry's last field of that name, or ``_ABSENT``."""
    count = wanted_offsets.shape[0] - 1
    entries = field_offsets.shape[0] - 1
    places = np.full((count, entries), _ABSENT, np.int64)
    address, wanted_address = names.ctypes.data, wanted.ctypes.data
    for entry in range(entries):
        for field in range(field_offsets[entry], field_offsets[entry + 1]):
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
                    places[index, entry] = field
                    break
    return places
