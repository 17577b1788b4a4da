"""Stream offsets: for each stream key, the last entry ID included.

This is the shape Spark checkpoints and the shape users pass in ``startingOffsets`` /
``endingOffsets``. The JSON form is canonical (sorted keys) so equal offsets serialise equally.
A batch's end offset may carry, per stream, what planning saw (``StreamPlan``: cut points,
counts, Redis 7 counters); plain ``{"stream": "ms-seq"}`` offsets stay valid everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

from atlasbus.errors import OffsetError
from atlasbus.model.entry_id import EntryId
from atlasbus.model.stream_plan import StreamPlan


class StreamOffsets(Mapping[str, EntryId]):
    """An immutable map from stream key to the last entry ID included, with optional plans."""

    __slots__ = ("_plans", "_positions")

    def __init__(
        self,
        positions: Mapping[str, EntryId] | None = None,
        plans: Mapping[str, StreamPlan] | None = None,
    ) -> None:
        self._positions: dict[str, EntryId] = dict(sorted((positions or {}).items()))
        self._plans: dict[str, StreamPlan] = {
            stream: plan
            for stream, plan in (plans or {}).items()
            if stream in self._positions and not plan.is_plain
        }
        for stream, plan in self._plans.items():
            if plan.position != self._positions[stream]:
                raise ValueError(f"plan of {stream!r} is for {plan.position}, not its position")

    @classmethod
    def from_plans(cls, plans: Mapping[str, StreamPlan]) -> StreamOffsets:
        return cls({stream: plan.position for stream, plan in plans.items()}, plans)

    @classmethod
    def from_dict(cls, raw: Mapping[str, object], *, what: str = "offsets") -> StreamOffsets:
        """Read Spark's offset dict (or a parsed JSON object) of ``{stream: "ms-seq"}``.

        A value may also be the object form atlasbus writes into end offsets.
        """
        plans: dict[str, StreamPlan] = {}
        for stream, value in raw.items():
            if not isinstance(value, str | dict):
                raise OffsetError(
                    f"{what}: the position of stream {stream!r} must be an entry ID string "
                    f"like '1700000000000-0', got {value!r}"
                )
            plans[str(stream)] = StreamPlan.from_json_value(
                value, what=f"{what} for stream {stream!r}"
            )
        return cls.from_plans(plans)

    @classmethod
    def from_json(cls, text: str, *, what: str = "offsets") -> StreamOffsets:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OffsetError(f"{what} is not valid JSON ({exc.msg}): {text!r}") from None
        if not isinstance(raw, dict):
            raise OffsetError(f"{what} must be a JSON object of stream to entry ID: {text!r}")
        return cls.from_dict(raw, what=what)

    def plan(self, stream: str) -> StreamPlan:
        """What planning recorded for ``stream`` (a bare position when nothing was recorded)."""
        return self._plans.get(stream) or StreamPlan(self._positions[stream])

    def positions(self) -> StreamOffsets:
        """The same positions without the plans: where the next batch starts."""
        return StreamOffsets(self._positions)

    def to_dict(self) -> dict[str, object]:
        return {stream: self.plan(stream).to_json_value() for stream in self._positions}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def __getitem__(self, stream: str) -> EntryId:
        return self._positions[stream]

    def __iter__(self) -> Iterator[str]:
        return iter(self._positions)

    def __len__(self) -> int:
        return len(self._positions)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StreamOffsets):
            return self._positions == other._positions and self._plans == other._plans
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._positions.items()))

    def __repr__(self) -> str:
        return f"StreamOffsets({self.to_json()})"
