"""Stream offsets: for each stream key, the last entry ID included.

This is the shape Spark checkpoints and the shape users pass in ``startingOffsets`` /
``endingOffsets``. The JSON form is canonical (sorted keys) so equal offsets serialise equally.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

from atlasbus.entry_id import EntryId
from atlasbus.errors import OffsetError


class StreamOffsets(Mapping[str, EntryId]):
    """An immutable map from stream key to the last entry ID included."""

    __slots__ = ("_positions",)

    def __init__(self, positions: Mapping[str, EntryId] | None = None) -> None:
        self._positions: dict[str, EntryId] = dict(sorted((positions or {}).items()))

    @classmethod
    def from_dict(cls, raw: Mapping[str, object], *, what: str = "offsets") -> StreamOffsets:
        """Read Spark's offset dict (or a parsed JSON object) of ``{stream: "ms-seq"}``."""
        positions: dict[str, EntryId] = {}
        for stream, value in raw.items():
            if not isinstance(value, str):
                raise OffsetError(
                    f"{what}: the position of stream {stream!r} must be an entry ID string "
                    f"like '1700000000000-0', got {value!r}"
                )
            positions[str(stream)] = EntryId.parse(value, what=f"{what} for stream {stream!r}")
        return cls(positions)

    @classmethod
    def from_json(cls, text: str, *, what: str = "offsets") -> StreamOffsets:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OffsetError(f"{what} is not valid JSON ({exc.msg}): {text!r}") from None
        if not isinstance(raw, dict):
            raise OffsetError(f"{what} must be a JSON object of stream to entry ID: {text!r}")
        return cls.from_dict(raw, what=what)

    def to_dict(self) -> dict[str, str]:
        return {stream: str(position) for stream, position in self._positions.items()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def updated(self, changes: Mapping[str, EntryId]) -> StreamOffsets:
        return StreamOffsets({**self._positions, **changes})

    def __getitem__(self, stream: str) -> EntryId:
        return self._positions[stream]

    def __iter__(self) -> Iterator[str]:
        return iter(self._positions)

    def __len__(self) -> int:
        return len(self._positions)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StreamOffsets):
            return self._positions == other._positions
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._positions.items()))

    def __repr__(self) -> str:
        return f"StreamOffsets({self.to_json()})"
