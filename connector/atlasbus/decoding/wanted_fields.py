"""A cut page as the envelope decoder reads it: a column per wanted field (executor).

A ``ColumnPage`` has its columns already; a ``PairPage``'s are picked out by name
(``atlasbus.decoding.kernels.pick_fields``); a ``MixedPage``'s are its parts' columns joined, so the
decoder runs once over all of them. A field that some entries lack comes as a ``PartialColumn``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from atlasbus.decoding.cut_pages import ColumnPage, CutPage, PairPage, PartialColumn
from atlasbus.decoding.kernels.pick_fields import field_columns
from atlasbus.decoding.kernels.raw_field_maps import raw_field_maps, raw_pair_maps

FieldColumn: TypeAlias = pa.Array | PartialColumn


def wanted_columns(page: CutPage, names: Sequence[bytes]) -> dict[bytes, FieldColumn]:
    """The values of each of ``names`` that some entry of ``page`` has, entry by entry."""
    if isinstance(page, ColumnPage):
        return {name: page.columns[name] for name in names if name in page.columns}
    if isinstance(page, PairPage):
        return field_columns(page, names)
    parts = [(len(part), wanted_columns(part, names)) for part in page.parts]
    joined: dict[bytes, FieldColumn] = {}
    for name in names:
        pieces = [(size, columns.get(name)) for size, columns in parts]
        if any(column is not None for _, column in pieces):
            joined[name] = _joined(pieces)
    return joined


def raw_maps(page: CutPage) -> pa.MapArray:
    """Each entry of ``page`` as a map of its field names to values: the ``fields`` column
    (of every row with ``format=raw`` or ``includeRawFields``, else of error rows)."""
    if isinstance(page, ColumnPage):
        return raw_field_maps(page)
    if isinstance(page, PairPage):
        return raw_pair_maps(page)
    return pa.concat_arrays([raw_maps(part) for part in page.parts])


def _joined(pieces: list[tuple[int, FieldColumn | None]]) -> FieldColumn:
    """One field's columns of consecutive parts (``size`` entries each; None where no entry
    of the part has the field) as one: a column if every entry has it, else partial."""
    if all(isinstance(column, pa.Array) for _, column in pieces):
        whole: pa.Array = pa.concat_arrays([column for _, column in pieces])
        return whole
    values: list[pa.Array] = []
    present: list[np.ndarray] = []
    for size, column in pieces:
        if column is None:
            present.append(np.zeros(size, np.bool_))
        elif isinstance(column, PartialColumn):
            values.append(column.values)
            present.append(column.present.to_numpy(zero_copy_only=False))
        else:
            values.append(column)
            present.append(np.ones(size, np.bool_))
    mask = np.concatenate(present)
    positions = np.cumsum(mask) - 1
    return PartialColumn(pa.concat_arrays(values), pa.array(positions, mask=~mask), pa.array(mask))
