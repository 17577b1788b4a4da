"""Deciding whether entries vanished before the query read them, and what to do about it.

Loss is looked for at two moments:

- when a batch is planned (driver, ``lost_before_planning``): entries of the batch's range that
  are already gone. History removed before the query started is never loss: the start records
  Redis 7's removal counter (``Accounted``), and while it has not moved no entry can be
  missing, whatever older XDELs the range holds. Redis 7 counts every entry ever added
  (``entries-added``), so with the count recorded at the previous batch's end the number added
  since is exact, and comparing it with the number present gives the number lost. Without
  counts (Redis 6.2, a batch cut short of the newest entry, a checkpoint of an older atlasbus),
  only what the boundaries show is reported: the entry the query last read gone with nothing
  before it left (a trim past it), or the newest XDEL inside the range, the range then
  starting where the removals were last all accounted for;
- when a task has read its piece (executor, ``lost_while_reading``): the piece's entry count
  recorded at planning against the count read, so entries deleted between planning and the
  read, or between two attempts of the task, are found and counted.

One place decides what happens then (``on_data_loss``), so the message is the same wherever
loss is found: it names the stream, the missing range, the count where known, and the
``failOnDataLoss`` option.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from atlasbus.bus.stream_catalog import Advance, StreamCatalog, StreamInfo, Walk
from atlasbus.errors import DataLossError
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.model.stream_plan import Accounted, LostEntries

if TYPE_CHECKING:
    from atlasbus.dead_letters import QueryContext
    from atlasbus.planning.batch_plan import ReadRange

log = logging.getLogger("atlasbus.data_loss")


def nothing_remains_up_to(info: StreamInfo, position: EntryId) -> bool:
    """True when no entry at or before ``position`` is left: a trim (or XDELs) passed it."""
    return info.first is None or info.first > position


def nothing_removed_since(info: StreamInfo, accounted: Accounted | None) -> bool:
    """Redis 7: no entry was removed from the stream since every removal was accounted for.

    ``entries-added`` gone back below what was recorded means the stream was deleted and made
    again, whose counters start over: then nothing is known.
    """
    return (
        accounted is not None
        and info.entries_added is not None
        and info.removed == accounted.removed
        and info.entries_added >= accounted.added
    )


def accounted_at(info: StreamInfo, position: EntryId) -> Accounted | None:
    """The stream's removals, all accounted for up to ``position`` (None on Redis 6.2)."""
    if info.entries_added is None or info.removed is None:
        return None
    deleted = info.max_deleted if info.max_deleted != ZERO else None
    return Accounted(info.removed, info.entries_added, position, deleted)


def needs_count(after: EntryId, info: StreamInfo) -> bool:
    """Whether the entries of ``(after, ..]`` must be counted to tell what was XDEL'd.

    Redis 7 only: an XDEL above ``after`` while older entries remain means some entries of
    the range may be gone, and only a count tells how many.
    """
    return (
        info.entries_added is not None
        and info.max_deleted is not None
        and info.max_deleted > after
        and not nothing_remains_up_to(info, after)
    )


def lost_before_planning(
    stream: str,
    after: EntryId,
    upto: EntryId,
    info: StreamInfo,
    *,
    added: int | None,
    present: int | None,
    accounted: Accounted | None = None,
    walked: bool = False,
    counted_info: StreamInfo | None = None,
) -> LostEntries | None:
    """Entries of ``(after, upto]`` already removed when the batch is planned; driver.

    ``added`` is how many entries were added to the range (Redis 7 counters), ``present`` how
    many are in it now; both None when unknown. ``after`` is an entry the query read (or ZERO
    for a stream new to the query, whose trimmed history is not loss). ``accounted`` is what
    the batch's start recorded of the stream's removals (see ``Accounted``): while nothing was
    removed since, nothing is lost.
    ``walked``: ``present`` was counted by walking the range, after ``info`` was taken. An
    entry deleted in between is among the missing but past what ``info`` knows of
    deletions, so their upper bound is taken from ``counted_info``, XINFO asked after the
    walk (None: the stream is gone, and the bound is ``upto``).
    """
    if after == ZERO:
        return None
    if added is not None and added < 0:
        # entries-added went backwards: the stream was deleted and created again since
        upper = info.first.predecessor() if info.first is not None else upto
        return LostEntries(stream, after, min(upper, upto))
    if nothing_removed_since(info, accounted):
        return None
    if added is not None and present is not None:
        missing = added - present
        if missing <= 0:
            return None
        if not walked:
            upper = _upper_bound(after, upto, info)
        else:
            upper = upto if counted_info is None else _upper_bound(after, upto, counted_info)
        return LostEntries(stream, after, upper, missing)
    newest_deleted = info.max_deleted
    if newest_deleted is not None and newest_deleted > after:
        # Redis 7: an XDEL reached past the last-read entry; an unread entry went with it if
        # the XDEL'd ID is in the range. Past the range's end Redis cannot tell, and the
        # removals stay unaccounted for: the batch that reaches the XDEL'd ID reports from
        # where they were last all accounted for, so a removal in a batch between is inside.
        if newest_deleted <= upto:
            since = after
            if accounted is not None and accounted.after < after:
                # one removal since, and the newest XDEL moved: that XDEL was it, here
                only_this = (
                    info.removed is not None
                    and info.removed - accounted.removed == 1
                    and newest_deleted != accounted.deleted
                )
                since = after if only_this else accounted.after
            return LostEntries(stream, since, newest_deleted)
        return None
    if not nothing_remains_up_to(info, after):
        return None  # the last-read entry or an older one is still there: no trim passed it
    if newest_deleted == after:
        return None  # Redis 7: the last-read entry went by XDEL (the bus's consumer), no further
    # A trim passed the last-read entry, or (Redis 6.2, which records no XDEL) the bus's
    # consumer deleted it: conservative (docs/guarantees.md).
    if info.first is None:
        if info.last_generated > after:
            return LostEntries(stream, after, min(info.last_generated, upto))
        return None
    if info.first > after.successor():
        return LostEntries(stream, after, min(info.first.predecessor(), upto))
    return None


def _upper_bound(after: EntryId, upto: EntryId, info: StreamInfo) -> EntryId:
    """The greatest ID that can be among the missing: past it nothing was removed."""
    bounds = []
    if nothing_remains_up_to(info, after):
        bounds.append(info.first.predecessor() if info.first is not None else upto)
    if info.max_deleted is not None and info.max_deleted > after:
        bounds.append(info.max_deleted)
    return min(max(bounds), upto) if bounds else upto


def lost_while_reading(
    stream: str,
    after: EntryId,
    upto: EntryId,
    *,
    expected: int | None,
    read: int,
    removed_at_planning: int | None,
    info: StreamInfo | None,
    first: EntryId | None = None,
) -> LostEntries | None:
    """Entries of a planned piece ``(after, upto]`` that its task did not find; executor.

    ``expected`` is the piece's entry count recorded at planning, when known: then the answer
    is exact. Otherwise (a large batch cut by time on Redis 7) the stream's removal counter
    and boundaries since planning decide, conservatively. ``info`` is the stream after the read.
    ``first``, the piece's first entry when planned (where known), is where a trim must have
    passed to reach the piece: nothing lay between ``after`` and it (``0-0`` and a stream's
    first entry, say).
    """
    if expected is not None:
        missing = expected - read
        return LostEntries(stream, after, upto, missing) if missing > 0 else None
    if removed_at_planning is None:
        return None  # Redis 6.2 keeps no counters: not detectable here (docs/guarantees.md)
    if info is None:
        return LostEntries(stream, after, upto)  # the stream was deleted under the read
    if info.removed is None or info.removed == removed_at_planning:
        return None  # nothing at all was removed from the stream since planning
    if nothing_remains_up_to(info, max(after, first) if first is not None else after):
        upper = info.first.predecessor() if info.first is not None else upto
        return LostEntries(stream, after, min(upper, upto))
    removals = info.removed - removed_at_planning
    newest_deleted = info.max_deleted
    # an XDEL beyond the piece cannot have touched it when it was the only removal since
    if (
        newest_deleted is not None
        and newest_deleted > after
        and (newest_deleted <= upto or removals > 1)
    ):
        return LostEntries(stream, after, min(newest_deleted, upto))
    return None


def lost_in_batch(catalog: StreamCatalog, read: ReadRange, lost: LostEntries) -> LostEntries:
    """What the whole batch lost on ``read``'s stream, once its piece is found short; executor.

    Counts the entries left in the batch's range: against the entries planning counted there,
    the count is exact, and the range named is the batch's. Where planning did not count every
    piece, the piece's own loss is returned, saying that more may be missing elsewhere.
    """
    piece = f"this task's piece {lost.span()} misses {lost.count if lost.count else 'some'}"
    if read.batch is None or read.batch == (read.after, read.upto):
        return lost
    after, upto = read.batch
    if read.batch_expected is None:
        return replace(
            lost,
            note=f"at least that; more may be missing in this batch's other pieces "
            f"{LostEntries(lost.stream, after, upto).span()}",
        )
    walk = Walk(max(read.batch_expected, 1))
    catalog.advance_many([Advance(read.stream, after, upto, None, walk)])
    missing = read.batch_expected - walk.total
    if lost.count is not None and missing <= lost.count:
        return lost
    return LostEntries(
        lost.stream, after, upto, missing, note=f"in all, in this batch's range; {piece}"
    )


FAILOVER_HINT = (
    ", or lost in a failover of the master (written to the old one, not yet to the replica "
    "that took over: options minReplicas on the sink and the source keep that from happening)"
)


def on_data_loss(
    lost: LostEntries,
    *,
    fail_on_data_loss: bool,
    dead_letter_table: str | None = None,
    topic: str | None = None,
    context: QueryContext | None = None,
    failover_possible: bool = False,
) -> None:
    """Raise (the default) or warn, naming ``failOnDataLoss`` either way; with
    ``failover_possible`` (a Sentinel URL), also the other way entries vanish.

    With ``failOnDataLoss=false`` and a ``deadLetterTable``, the lost range also becomes one
    ``data-loss`` dead letter; its ID is made of the stream and the range, which are recorded
    in the batch's end offset or are the bounds of a planned piece, so finding the same loss
    again (a replanned or replayed batch, a retried task) records nothing new. Driver or
    executor.
    """
    described = lost.describe() + (FAILOVER_HINT if failover_possible else "")
    if fail_on_data_loss:
        raise DataLossError(
            f"{described}. The query stops so nothing is skipped silently; set option "
            "failOnDataLoss=false to continue from the entries still in the stream."
        )
    log.warning("%s; continuing because failOnDataLoss=false", described)
    if dead_letter_table is not None:
        from atlasbus.dead_letters import DeadLetter, DeadLetterTable, QueryContext

        letter = DeadLetter.for_data_loss(
            stream=lost.stream,
            after=str(lost.after),
            upto=str(lost.upto),
            topic=topic,
            error=lost.describe(),
            context=context or QueryContext(),
        )
        DeadLetterTable(dead_letter_table).append([letter])
