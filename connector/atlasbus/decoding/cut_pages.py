"""Pages of stream entries cut into binary columns: one per field
(``atlasbus.decoding.kernels.cut_one_layout``), or of names and values whatever the fields
(``atlasbus.decoding.kernels.cut_any_layout``).

Kept apart from the cutting, which compiles code with numba, so that code which only decodes
pages (``atlasbus.decoding.decoder``) does not load the compiler.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class ColumnPage:
    """A page of entries with one field layout, as binary columns (one per field name).

    ``names`` are the field names in the entries' order; ``columns[name]`` holds that field's
    values, row by row. No value is null.
    """

    ids: pa.Array
    names: list[bytes]
    columns: dict[bytes, pa.Array]

    def __len__(self) -> int:
        return len(self.ids)

    def entries(self) -> list[tuple[bytes, list[bytes]]]:
        """The page as hiredis would give it, [ID, [name, value, ...]] per entry: slow path."""
        values = [self.columns[name].to_pylist() for name in self.names]
        entries = []
        for row, entry_id in enumerate(self.ids.to_pylist()):
            fields: list[bytes] = []
            for name, column in zip(self.names, values, strict=True):
                fields += (name, column[row])
            entries.append((entry_id, fields))
        return entries


@dataclass(frozen=True)
class PairPage:
    """A page of entries of any field layouts, as binary columns: ``names`` and ``values``
    hold every entry's fields one entry after another, in the entries' order; entry ``i``'s
    are those from ``field_offsets[i]`` to ``field_offsets[i + 1]`` (int32). No value is null.
    """

    ids: pa.Array
    field_offsets: pa.Array
    names: pa.Array
    values: pa.Array

    def __len__(self) -> int:
        return len(self.ids)

    def entries(self) -> list[tuple[bytes, list[bytes]]]:
        """The page as hiredis would give it, [ID, [name, value, ...]] per entry: slow path."""
        names, values = self.names.to_pylist(), self.values.to_pylist()
        bounds = self.field_offsets.to_pylist()
        entries = []
        for row, entry_id in enumerate(self.ids.to_pylist()):
            fields: list[bytes] = []
            for field in range(bounds[row], bounds[row + 1]):
                fields += (names[field], values[field])
            entries.append((entry_id, fields))
        return entries


@dataclass(frozen=True)
class MixedPage:
    """Pages of different layouts next to each other in one hand-over, decoded as one.

    A stream whose entries now and then lack an optional field is cut into runs: replies of
    one layout into a ``ColumnPage``, the reply with the odd entry into a ``PairPage``. Decoded
    one by one, each part paid the decoder's fixed costs (some 0.3 ms a call) and the parts'
    batches were joined again after; decoded as one, a batch pays them once.
    """

    parts: tuple[ColumnPage | PairPage, ...]

    def __len__(self) -> int:
        return sum(map(len, self.parts))

    @property
    def ids(self) -> pa.Array:
        """Every part's entry IDs (binary), in order."""
        return pa.concat_arrays([part.ids for part in self.parts])

    def entries(self) -> list[tuple[bytes, list[bytes]]]:
        """The page as hiredis would give it, [ID, [name, value, ...]] per entry: slow path."""
        return [entry for part in self.parts for entry in part.entries()]


CutPage = ColumnPage | PairPage | MixedPage


@dataclass(frozen=True)
class PartialColumn:
    """One field's values on a page where some entries lack the field
    (``atlasbus.decoding.kernels.pick_fields``).

    ``values`` (binary, no null) are those of the entries that have it, in order; ``positions``
    (int64, length of the page) gives each entry's place in ``values``, null where the entry
    lacks the field; ``present`` is the same as a mask. The decoder decodes ``values`` alone,
    on its column-wide paths, and spreads the result back over the page by ``positions``.
    """

    values: pa.Array
    positions: pa.Array
    present: pa.Array

    def rows(self, *, present: bool) -> list[int]:
        """The rows of the entries that have the field (``present``), or that lack it."""
        import pyarrow.compute as pc

        mask = self.present if present else pc.invert(self.present)
        rows: list[int] = pc.indices_nonzero(mask).to_pylist()
        return rows
