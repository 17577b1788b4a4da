"""Planning a batch: which entry-ID ranges each task reads, as a pure function of its offsets.

Runs on the driver, in two steps:

1. ``mark_batch``, when the batch's end is chosen (``latestOffset``, or a batch read's
   planning), asks Redis what it needs once and records it in the end offset, which Spark
   checkpoints before the batch runs (``atlasbus.model.stream_plan``): where to cut each stream's
   range into tasks, how many entries each piece holds when that is known, Redis 7's counters, and
   entries already lost.
2. ``plan_ranges(start, end)`` turns the offsets into ranges without asking Redis anything, so
   a replayed batch (same offsets) gets exactly the same pieces in the same order, however the
   stream changed in between; ``recorded_losses`` gives the losses recorded at step 1.

A piece is cut after every ``maxEntriesPerPartition`` entries where planning counted them
(admission control walks the range anyway, and so does a range with XDEL'd entries on Redis 7
or one needing several pieces of up to ``COUNT_CUTS_UP_TO`` entries in all); beyond that, as
equal slices of time from the first entry in range. ``minPartitions`` asks for more pieces
than that (Kafka's option), cut by time so nothing is walked. Each entry falls in exactly
one piece whatever the cuts are. Offsets without a recorded plan (atlasbus 0.1
checkpoints, hand-written ``endingOffsets``) give one piece per stream.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from atlasbus.bus.stream_catalog import Advance, StreamCatalog, StreamInfo, Walk
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.model.offsets import StreamOffsets
from atlasbus.model.stream_plan import Accounted, LostEntries, StreamPlan
from atlasbus.options.source import SourceOptions
from atlasbus.planning.data_loss import (
    accounted_at,
    lost_before_planning,
    needs_count,
    nothing_remains_up_to,
    nothing_removed_since,
    on_data_loss,
)

COUNT_CUTS_UP_TO = 500_000
"""A range needing several pieces is cut by count up to this many entries, by time beyond."""


@dataclass(frozen=True)
class ReadRange:
    """One task's work: entries of ``stream`` with IDs in ``(after, upto]``.

    ``expected`` is how many entries the range held when planned, where known exactly;
    ``removed`` the stream's Redis 7 removal counter then. The task compares them with what it
    finds, to report entries deleted after planning. ``batch`` is the stream's whole range in
    the batch, and ``batch_expected`` its entries when every piece was counted: a task that
    finds its piece short counts the whole range, so the report says how much the batch
    lost, not only its own piece. ``first`` is the range's first entry when planned, given to
    the first of its uncounted pieces (``StreamPlan.first``).
    """

    stream: str
    topic: str
    after: EntryId
    upto: EntryId
    expected: int | None = None
    removed: int | None = None
    batch: tuple[EntryId, EntryId] | None = None
    batch_expected: int | None = None
    first: EntryId | None = None


def with_baselines(catalog: StreamCatalog, positions: Mapping[str, EntryId]) -> StreamOffsets:
    """A query's starting offsets, each stream's removals recorded as accounted for; driver.

    Whatever was removed before the query started is history, not loss (``Accounted``): one
    XINFO round trip for all the streams, when the start is chosen. A stream absent from the
    start is new to the query, and its first batch records the same.
    """
    streams = [stream for stream in sorted(positions) if positions[stream] != ZERO]
    infos = catalog.info(streams) if streams else {}
    plans: dict[str, StreamPlan] = {}
    for stream, position in positions.items():
        info = infos.get(stream)
        accounted = accounted_at(info, position) if info is not None else None
        plans[stream] = StreamPlan(position, accounted=accounted)
    return StreamOffsets.from_plans(plans)


def mark_batch(
    catalog: StreamCatalog,
    options: SourceOptions,
    start: StreamOffsets,
    end: Mapping[str, EntryId],
    *,
    infos: Mapping[str, StreamInfo | None] | None = None,
    walks: Mapping[str, Walk] | None = None,
    removed_by_query: Mapping[str, int] | None = None,
    count_ranges: bool = False,
) -> StreamOffsets:
    """The batch's end offset with each advancing stream's plan recorded; driver.

    ``infos`` (XINFO STREAM taken when the end was chosen) and ``walks`` (entries counted by
    admission control) are reused when given. ``removed_by_query`` counts the entries the
    query itself removed from each stream since ``start`` was planned, all at or below its
    position (``trimConsumed``, ``sweepDelete``): accounted for, never loss. A stream that
    does not advance keeps the plan of ``start`` verbatim, so an idle query's end offset equals
    its start and Spark runs no batch, and costs no question to Redis. The advancing streams'
    questions are asked together, a few round trips in all whatever their number (see
    ``_plan_streams``). ``count_ranges`` counts a one-task range whose count Redis's counters
    cannot give (a window that ends before the stream's newest entry), up to
    ``COUNT_CUTS_UP_TO`` entries, so its task finds any loss exactly rather than
    conservatively.
    """
    advancing = [s for s in sorted(end) if end[s] > start.get(s, ZERO)]
    if infos is None or any(s not in infos for s in advancing):
        infos = {**(infos or {}), **catalog.info(advancing)}
    planned = _plan_streams(
        catalog,
        options,
        start,
        end,
        advancing,
        infos,
        walks or {},
        removed_by_query or {},
        count_ranges=count_ranges,
    )
    plans: dict[str, StreamPlan] = {}
    for stream in end:
        if stream in planned:
            plans[stream] = planned[stream]
        elif stream in start and start[stream] == end[stream]:
            plans[stream] = start.plan(stream)
        else:
            plans[stream] = StreamPlan(end[stream])
    return StreamOffsets.from_plans(plans)


@dataclass
class _Planning:
    """What is known of one advancing stream while its plan is worked out."""

    stream: str
    after: EntryId
    upto: EntryId
    info: StreamInfo
    walk: Walk | None
    added: int | None
    present: int | None
    accounted: Accounted | None = None
    first: EntryId | None = None
    cuts: tuple[EntryId, ...] = ()

    @property
    def quiet(self) -> bool:
        """Nothing was removed from the stream since its removals were all accounted for."""
        return self.after == ZERO or nothing_removed_since(self.info, self.accounted)

    def lost(
        self, *, walked: bool = False, counted_info: StreamInfo | None = None
    ) -> LostEntries | None:
        """``lost_before_planning`` with what is known of the range so far."""
        return lost_before_planning(
            self.stream,
            self.after,
            self.upto,
            self.info,
            added=self.added,
            present=self.present,
            accounted=self.accounted,
            walked=walked,
            counted_info=counted_info,
        )


def _plan_streams(
    catalog: StreamCatalog,
    options: SourceOptions,
    start: StreamOffsets,
    end: Mapping[str, EntryId],
    advancing: list[str],
    infos: Mapping[str, StreamInfo | None],
    walks: Mapping[str, Walk],
    removed_by_query: Mapping[str, int],
    *,
    count_ranges: bool = False,
) -> dict[str, StreamPlan]:
    """Plan every advancing stream; Redis is asked in steps, each one round trip (or a few
    for long walks) for all the streams that need it:

    1. count the range where XDELs above the start hide how many entries it holds;
    2. find the first entry in range where the count is unknown, or too large to count;
    3. count the ranges worth cutting by count (several pieces, up to ``COUNT_CUTS_UP_TO``).
    """
    plans: dict[str, StreamPlan] = {}
    work: list[_Planning] = []
    for stream in advancing:
        info = infos[stream]
        if info is None:  # deleted since the end was chosen: nothing to cut, a task finds it gone
            plans[stream] = StreamPlan(end[stream], cuts=(), counts=None)
            continue
        planning = _known(stream, start, end[stream], info, walks.get(stream))
        planning.accounted = _accounted_before(start, stream, removed_by_query.get(stream, 0))
        work.append(planning)
    size = options.max_entries_per_partition

    recount = [w for w in work if w.present is None and not w.quiet]
    recount = [w for w in recount if needs_count(w.after, w.info)]
    _count(catalog, size, recount)
    for w in recount:
        assert w.walk is not None
        w.present = w.walk.total
    losses = {w.stream: w.lost() for w in work}
    # A walk counts after XINFO was taken: an entry deleted in between lies past what that
    # XINFO bounds, so a loss a walk counted takes its bound from XINFO asked again (one
    # round trip, only then).
    recheck = [w for w in work if w.walk is not None and _counted(losses[w.stream])]
    if recheck:
        later = catalog.info([w.stream for w in recheck])
        for w in recheck:
            losses[w.stream] = w.lost(walked=True, counted_info=later[w.stream])

    uncounted = [w for w in work if w.walk is None]
    # the first entry is needed to estimate an unknown count, and to cut by time
    looked_up = [
        w
        for w in uncounted
        if w.present is None
        or w.present > COUNT_CUTS_UP_TO
        or (options.min_partitions is not None and w.present > 1)
    ]
    found: dict[str, EntryId | None] = {}
    for w in looked_up:
        known, first = _first_known(w)
        if known:
            found[w.stream] = first
    asked = [w for w in looked_up if w.stream not in found]
    known_empty = [w for w in looked_up if w.stream in found and found[w.stream] is None]
    found.update(catalog.first_in_ranges({w.stream: (w.after, w.upto) for w in asked}))
    found_empty = [w for w in asked if found[w.stream] is None]
    # A range known to hold no entry is counted: a removal elsewhere in its stream between
    # planning and the read, which Redis's counters cannot place, is then no loss of it.
    for w in known_empty + _still_empty(catalog, found_empty):
        if w.present is None:
            w.present = 0
    entries: dict[str, int] = {}
    for w in work:
        w.first = found.get(w.stream)
        if w.walk is not None:
            entries[w.stream] = w.walk.total
        elif w.present is not None:
            entries[w.stream] = w.present
        elif w.first is not None:
            entries[w.stream] = estimate_entries(w.info, w.first, w.upto)
    wanted = pieces_wanted(options.min_partitions, entries)
    to_count = []
    for w in uncounted:
        if w.stream not in entries:
            continue
        by_size = math.ceil(entries[w.stream] / size)
        pieces = max(by_size, wanted.get(w.stream, 1))
        if pieces <= 1:
            if count_ranges and w.present is None and entries[w.stream] <= COUNT_CUTS_UP_TO:
                to_count.append(w)
            continue
        if pieces == by_size and entries[w.stream] <= COUNT_CUTS_UP_TO:
            to_count.append(w)
        elif w.first is not None:
            w.cuts = tuple(hi for _, hi in split_range(w.after, w.first, w.upto, pieces)[:-1])
    _count(catalog, size, to_count)

    for w in work:
        lost = losses[w.stream]
        at_tail = w.upto == w.info.last_generated
        plan_counts: tuple[int, ...] | None
        if w.walk is not None:
            cuts, plan_counts = w.walk.pieces(w.upto)
        else:
            cuts = w.cuts
            plan_counts = (w.present,) if w.present is not None and not cuts else None
        plans[w.stream] = StreamPlan(
            w.upto,
            # Only at the stream's newest entry does entries-added say how many reach it.
            index=w.info.entries_added if at_tail else None,
            read=None if at_tail else _counted_on(w, start, lost),
            removed=w.info.removed,
            cuts=cuts,
            counts=plan_counts,
            lost=(lost.after, lost.upto, lost.count) if lost is not None else None,
            accounted=_accounted_after(w),
            first=_first_of_uncounted(w, plan_counts),
        )
    return plans


def _accounted_before(start: StreamOffsets, stream: str, removed_by_query: int) -> Accounted | None:
    """What ``start`` recorded of the stream's removals, plus those the query made since."""
    accounted = start.plan(stream).accounted if stream in start else None
    if accounted is None or not removed_by_query:
        return accounted
    return replace(accounted, removed=accounted.removed + removed_by_query)


def _accounted_after(w: _Planning) -> Accounted | None:
    """The removals accounted for at the batch's end, for the next batch (``Accounted``).

    All of them are when nothing was removed since the start's record, and when every
    removal lies at or below the batch's end (every XDEL, and the trims: an entry at or below
    the end is left): those above its start are reported with this batch. An XDEL or a trim
    past the end leaves them as the start recorded them: where the removals went is not known
    until a batch reaches it, and the next batch's checks run whatever the counter says.
    """
    now = accounted_at(w.info, w.upto)
    if w.quiet:
        return now
    info = w.info
    xdels_placed = info.max_deleted is None or info.max_deleted <= w.upto
    trims_placed = (info.first is not None and info.first <= w.upto) or (
        info.last_generated <= w.upto
    )
    return now if xdels_placed and trims_placed else w.accounted


def _known(
    stream: str, start: StreamOffsets, upto: EntryId, info: StreamInfo, walk: Walk | None
) -> _Planning:
    """What the counters (and admission control's walk) already tell of the range."""
    after = start.get(stream, ZERO)
    start_plan = start.plan(stream) if stream in start else None
    start_index = 0 if after == ZERO else (start_plan.index if start_plan else None)
    added = None
    if upto == info.last_generated and info.entries_added is not None and start_index is not None:
        added = info.entries_added - start_index
    present = walk.total if walk is not None else None
    if present is None and added is not None:
        if nothing_remains_up_to(info, after):
            present = info.length  # every entry left is in (after, upto]
        elif not needs_count(after, info):
            present = added  # nothing above `after` was removed
    return _Planning(stream, after, upto, info, walk, added, present)


def _counted_on(w: _Planning, start: StreamOffsets, lost: LostEntries | None) -> int | None:
    """Redis 7: entries the stream had received up to ``w.upto``, from the start's count plus
    the entries counted in the range (and those known lost); for lag only (``StreamPlan.read``).
    """
    if w.info.entries_added is None or w.walk is None:
        return None
    if w.after == ZERO:
        # Everything removed so far lies at or below upto unless an XDEL went past it.
        deleted_past = w.info.max_deleted is not None and w.info.max_deleted > w.upto
        base = None if deleted_past else w.info.removed
    else:
        base = start.plan(w.stream).entries_read if w.stream in start else None
    if base is None:
        return None
    return base + w.walk.total + (lost.count or 0 if lost is not None else 0)


def _counted(lost: LostEntries | None) -> bool:
    return lost is not None and lost.count is not None


def _first_of_uncounted(w: _Planning, counts: tuple[int, ...] | None) -> EntryId | None:
    """``StreamPlan.first``: the range's first entry, for an uncounted range, when XINFO (the
    snapshot the task's removal counter is compared with) told it. One an XRANGE found after
    XINFO could follow a trim in between, which the task would then not see."""
    if counts is not None or w.first is None:
        return None
    known, first = _first_known(w)
    return first if known else None


def _still_empty(catalog: StreamCatalog, empty: list[_Planning]) -> list[_Planning]:
    """Those of ``empty`` (ranges an XRANGE found empty after XINFO was taken) whose stream
    lost no entry in between: XINFO asked again, one round trip, only when there are any.
    An entry removed in between may have been in the range, unread: its range stays uncounted,
    so the task's check reports the removal as before. Redis 6.2 has no removal counter: a
    removal is not seen there either way (docs/guarantees.md)."""
    if not empty:
        return []
    later = catalog.info([w.stream for w in empty])
    still = []
    for w in empty:
        now = later[w.stream]
        if now is None:
            continue
        # entries-added gone back: the stream was deleted and made again in between
        remade = (now.entries_added or 0) < (w.info.entries_added or 0)
        if w.info.removed is None or (now.removed == w.info.removed and not remade):
            still.append(w)
    return still


def _first_known(w: _Planning) -> tuple[bool, EntryId | None]:
    """``(True, the first entry of (after, upto] or None)`` when XINFO STREAM tells it.

    When the stream's first entry is past ``after`` (a stream new to the query, or trimmed
    past it), it is the range's first entry, or the range is empty. Else ``(False, None)``.
    """
    first = w.info.first
    if first is None:
        return True, None
    if first > w.after:
        return True, (first if first <= w.upto else None)
    return False, None


def _count(catalog: StreamCatalog, size: int, streams: list[_Planning]) -> None:
    """Walk each stream's whole range, all streams together, counting pieces of ``size``."""
    for w in streams:
        w.walk = Walk(size)
    catalog.advance_many(
        [Advance(w.stream, w.after, w.upto, None, w.walk) for w in streams if w.walk is not None]
    )


def plan_ranges(
    options: SourceOptions, start: Mapping[str, EntryId], end: StreamOffsets
) -> list[ReadRange]:
    """The ranges to read for a batch from ``start`` to ``end``: pure, no Redis.

    A stream absent from ``start`` is new to the query and is read from its beginning. Pieces
    that planning counted as empty are left out.
    """
    ranges: list[ReadRange] = []
    for stream in end:
        after, upto = start.get(stream, ZERO), end[stream]
        if upto <= after:
            continue
        plan = end.plan(stream)
        topic = options.subscription.topic_of(stream)
        bounds = [after, *(c for c in plan.cuts if after < c < upto), upto]
        pieces = list(itertools.pairwise(bounds))
        counts: tuple[int | None, ...] = (
            plan.counts
            if plan.counts is not None and len(plan.counts) == len(pieces)
            else (None,) * len(pieces)
        )
        known = [count for count in counts if count is not None]
        batch_expected = sum(known) if len(known) == len(counts) else None
        for (lo, hi), count in zip(pieces, counts, strict=True):
            if count == 0:
                continue
            ranges.append(
                ReadRange(
                    stream,
                    topic,
                    lo,
                    hi,
                    count,
                    plan.removed,
                    batch=(after, upto),
                    batch_expected=batch_expected,
                    first=plan.first if lo == after else None,
                )
            )
    return ranges


def report_recorded_losses(
    options: SourceOptions, start: Mapping[str, EntryId], end: StreamOffsets
) -> None:
    """Raise or record (``failOnDataLoss``) each loss planning recorded in ``end``; driver.

    Runs every time the batch is planned, replays included: the dead letter of a loss is
    written once, since its ID is the recorded range.
    """
    for lost in recorded_losses(start, end):
        on_data_loss(
            lost,
            fail_on_data_loss=options.fail_on_data_loss,
            dead_letter_table=options.dead_letter_table,
            failover_possible=options.endpoint.is_sentinel,
            topic=options.subscription.topic_of(lost.stream),
        )


def recorded_losses(start: Mapping[str, EntryId], end: StreamOffsets) -> list[LostEntries]:
    """The losses planning recorded in ``end`` for the streams this batch advances."""
    losses = []
    for stream in end:
        if end[stream] <= start.get(stream, ZERO):
            continue
        lost = end.plan(stream).lost
        if lost is not None:
            note = WIDENED if lost[0] < start.get(stream, ZERO) else ""
            losses.append(LostEntries(stream, *lost, note=note))
    return losses


WIDENED = (
    "somewhere in this range: Redis keeps only the newest deleted ID, so the range starts "
    "where every removal was last accounted for; what earlier batches read of it is in the "
    "output"
)
"""Said of a loss reported from before the batch's start (``data_loss.lost_before_planning``)."""


def pieces_wanted(min_partitions: int | None, entries: Mapping[str, int]) -> dict[str, int]:
    """``minPartitions``, as Kafka's source divides it: each stream gets pieces in proportion
    to its share of the batch's entries, rounded, at least one; none without the option."""
    total = sum(entries.values())
    if min_partitions is None or total == 0:
        return {}
    return {
        stream: max(1, round(count / total * min_partitions)) for stream, count in entries.items()
    }


def estimate_entries(info: StreamInfo, first: EntryId, upto: EntryId) -> int:
    """Entries in ``[first, upto]``: exact when that is the whole stream, else by time share."""
    if info.first is None or info.last is None or info.length == 0:
        return 1
    if first <= info.first and upto >= info.last:
        return info.length
    stream_span = info.last.ms - info.first.ms + 1
    range_span = min(upto.ms, info.last.ms) - max(first.ms, info.first.ms) + 1
    share = min(1.0, max(range_span, 1) / stream_span)
    return max(1, math.ceil(info.length * share))


def split_range(
    after: EntryId, first: EntryId, upto: EntryId, pieces: int
) -> list[tuple[EntryId, EntryId]]:
    """Cut ``(after, upto]`` into at most ``pieces`` contiguous ranges, by time from ``first``.

    The first piece keeps ``after`` as its lower bound and the last keeps ``upto``, so the
    pieces cover the range exactly, with no gap and no overlap. Entries sharing one
    millisecond are split by sequence number.
    """
    if pieces <= 1 or first >= upto:
        return [(after, upto)]
    if first.ms == upto.ms:
        low, high = first.seq, upto.seq
        cuts = [EntryId(first.ms, low + (high - low) * i // pieces) for i in range(1, pieces)]
    else:
        low, high = first.ms, upto.ms
        cuts = [
            EntryId(low + (high - low + 1) * i // pieces, 0).predecessor() for i in range(1, pieces)
        ]
    bounds = [after, *sorted({c for c in cuts if after < c < upto}), upto]
    return list(itertools.pairwise(bounds))
