"""What planning saw of one stream's part of a micro-batch, recorded in the end offset.

Spark writes a batch's end offset to its checkpoint before the batch runs, and hands the same
offset back when the batch is replayed after a crash. Everything that planning learns from
Redis and that a replay must reuse therefore lives here, in the end offset:

- ``cuts``: where the stream's range ``(start, position]`` is cut into tasks, so a replanned
  batch gets exactly the same pieces (and the same Spark partition IDs) however the stream
  grew, shrank or was trimmed since;
- ``counts``: how many entries each piece held when planned, when that is known exactly, so
  the task that reads a piece can tell whether entries vanished before it read them;
- ``index``: Redis 7's ``entries-added`` at ``position``, when ``position`` was the newest entry,
  so the next batch knows exactly how many entries were added after it;
- ``read``: Redis 7, where ``index`` is not known (a batch cut short of the newest entry):
  how many entries the stream had received up to ``position`` as far as planning counted
  them, the index counted on from the start's. Used only to tell the query's lag
  (``atlasbus.operations.lag``) and as the mirrored group's entries read, never for loss checks:
  entries deleted ahead of the query before it counted them are missing from it;
- ``removed``: Redis 7's count of entries ever removed from the stream (``entries-added`` minus
  ``length``) when planned, so a task can tell that nothing was removed since;
- ``first``: the range's first entry when planned, where its pieces were not counted, so the
  task reading the first piece tells a trim past that entry (entries maybe gone unread) from
  the stream's head simply lying past the range's start, as it does from ``0-0``;
- ``lost``: entries of the range already gone when planned, reported (once per dead-letter ID)
  whenever the batch is planned or replanned;
- ``accounted``: Redis 7, where every removal the stream had seen is known to be harmless or
  reported (``Accounted``), so the next batch tells history deleted before the query started
  (never loss) from entries deleted under it.

An offset value is either the plain entry ID string (what users write in ``startingOffsets``,
and what checkpoints of atlasbus 0.1 hold) or an object with ``id`` and the facts above. Pure
data: no Redis here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from atlasbus.errors import OffsetError
from atlasbus.model.entry_id import MAX_SEQ, EntryId


@dataclass(frozen=True)
class LostEntries:
    """Entries of ``stream`` in ``(after, upto]`` were removed before the query read them.

    ``count`` is how many, where the server could tell (Redis 7's counters, or counts recorded
    at planning), else None.
    """

    stream: str
    after: EntryId
    upto: EntryId
    count: int | None = None
    note: str = field(default="", compare=False)
    """Said after the range, in brackets: where the range stands in the batch."""

    def describe(self) -> str:
        how_many, verb = "entries", "were"
        if self.count == 1:
            how_many, verb = "1 entry", "was"
        elif self.count is not None:
            how_many = f"{self.count} entries"
        note = f" ({self.note})" if self.note else ""
        return (
            f"stream {self.stream!r}: {how_many} {self.span()} {verb} removed (trimmed or "
            f"deleted) before the query read them{note}"
        )

    def span(self) -> str:
        """The range as people read it: upper bound ``9-18446744073709551615`` is "before 10-0"."""
        if self.upto.seq == MAX_SEQ:
            return f"after {self.after} and before {self.upto.successor()}"
        return f"after {self.after} up to {self.upto}"


@dataclass(frozen=True)
class Accounted:
    """Redis 7: every entry the stream's removal counter had counted at ``removed`` went before
    the query started, was at or below ``after`` when it went, or was reported as lost.

    While the counter still says ``removed`` (and ``entries-added`` has not gone back below
    ``added``: the stream was not deleted and made again), nothing was removed since: no
    entry above the position can be missing, whatever XDELs older history holds. Once it
    moved, the removals not yet placed may lie anywhere above ``after``, which is where a
    conservative report starts (``atlasbus.planning.data_loss``).
    """

    removed: int
    added: int
    after: EntryId
    deleted: EntryId | None = None
    """The newest ID XDELed by then (``max-deleted-entry-id``), None if none was."""

    def to_json_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "removed": self.removed,
            "added": self.added,
            "after": str(self.after),
        }
        if self.deleted is not None:
            value["deleted"] = str(self.deleted)
        return value

    @classmethod
    def from_json_value(cls, value: Any, *, what: str) -> Accounted:
        deleted = value.get("deleted")
        return cls(
            int(value["removed"]),
            int(value["added"]),
            EntryId.parse(value["after"], what=f"{what} accounted"),
            EntryId.parse(deleted, what=f"{what} accounted") if deleted is not None else None,
        )


@dataclass(frozen=True)
class StreamPlan:
    """One stream's entry in a batch's end offset (see the module docstring)."""

    position: EntryId
    index: int | None = None
    removed: int | None = None
    read: int | None = None
    cuts: tuple[EntryId, ...] = ()
    counts: tuple[int, ...] | None = None
    lost: tuple[EntryId, EntryId, int | None] | None = None
    accounted: Accounted | None = None
    first: EntryId | None = None

    @property
    def entries_read(self) -> int | None:
        """Entries the stream had received up to ``position``: ``index``, else ``read``."""
        return self.index if self.index is not None else self.read

    @property
    def is_plain(self) -> bool:
        return (
            self.index is None
            and self.removed is None
            and self.read is None
            and not self.cuts
            and self.counts is None
            and self.lost is None
            and self.accounted is None
            and self.first is None
        )

    def to_json_value(self) -> str | dict[str, Any]:
        if self.is_plain:
            return str(self.position)
        value: dict[str, Any] = {"id": str(self.position)}
        if self.index is not None:
            value["index"] = self.index
        if self.read is not None:
            value["read"] = self.read
        if self.removed is not None:
            value["removed"] = self.removed
        if self.cuts:
            value["cuts"] = [str(cut) for cut in self.cuts]
        if self.counts is not None:
            value["counts"] = list(self.counts)
        if self.lost is not None:
            after, upto, count = self.lost
            value["lost"] = {"after": str(after), "upto": str(upto), "count": count}
        if self.accounted is not None:
            value["accounted"] = self.accounted.to_json_value()
        if self.first is not None:
            value["first"] = str(self.first)
        return value

    @classmethod
    def from_json_value(cls, value: object, *, what: str) -> StreamPlan:
        if isinstance(value, str):
            return cls(EntryId.parse(value, what=what))
        if not isinstance(value, dict) or not isinstance(value.get("id"), str):
            raise OffsetError(
                f"{what} must be an entry ID string like '1700000000000-0' (or an object with "
                f"an 'id' written by atlasbus), got {value!r}"
            )
        try:
            cuts = tuple(EntryId.parse(c, what=f"{what} cut") for c in value.get("cuts", ()))
            counts_raw = value.get("counts")
            counts = tuple(int(c) for c in counts_raw) if counts_raw is not None else None
            lost_raw = value.get("lost")
            lost = None
            if lost_raw is not None:
                count = lost_raw.get("count")
                lost = (
                    EntryId.parse(lost_raw["after"], what=f"{what} lost range"),
                    EntryId.parse(lost_raw["upto"], what=f"{what} lost range"),
                    int(count) if count is not None else None,
                )
            index = value.get("index")
            read = value.get("read")
            removed = value.get("removed")
            first = value.get("first")
            accounted_raw = value.get("accounted")
            accounted = (
                Accounted.from_json_value(accounted_raw, what=what)
                if accounted_raw is not None
                else None
            )
            plan = cls(
                EntryId.parse(value["id"], what=what),
                index=int(index) if index is not None else None,
                read=int(read) if read is not None else None,
                removed=int(removed) if removed is not None else None,
                cuts=cuts,
                counts=counts,
                lost=lost,
                accounted=accounted,
                first=EntryId.parse(first, what=f"{what} first") if first is not None else None,
            )
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            if isinstance(exc, OffsetError):
                raise
            raise OffsetError(f"{what} is not an offset atlasbus wrote: {value!r}") from None
        if counts is not None and len(counts) != len(cuts) + 1:
            raise OffsetError(f"{what} has {len(cuts)} cuts but {len(counts)} counts: {value!r}")
        return plan
