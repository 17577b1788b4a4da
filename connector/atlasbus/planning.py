"""Planning a batch: which entry-ID ranges each task reads, as a pure function of its offsets.

Runs on the driver, in two steps:

1. ``mark_batch``, when the batch's end is chosen (``latestOffset``, or a batch read's
   planning), asks Redis what it needs once and records it in the end offset, which Spark
   checkpoints before the batch runs (``stream_plan.py``): where to cut each stream's range
   into tasks, how many entries each piece holds when that is known, Redis 7's counters, and
   entries already lost.
2. ``plan_ranges(start, end)`` turns the offsets into ranges without asking Redis anything, so
   a replayed batch (same offsets) gets exactly the same pieces in the same order, however the
   stream changed in between; ``recorded_losses`` gives the losses recorded at step 1.

A piece is cut after every ``maxEntriesPerPartition`` entries where planning counted them
(admission control walks the range anyway, and so does a range with XDEL'd entries on Redis 7
or one needing several pieces of up to ``COUNT_CUTS_UP_TO`` entries in all); beyond that, as
equal slices of time from the first entry in range. Each entry falls in
exactly one piece whatever the cuts are. Offsets without a recorded plan (atlasbus 0.1
checkpoints, hand-written ``endingOffsets``) give one piece per stream.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from atlasbus.data_loss import (
    lost_before_planning,
    needs_count,
    nothing_remains_up_to,
    on_data_loss,
)
from atlasbus.entry_id import ZERO, EntryId
from atlasbus.offsets import StreamOffsets
from atlasbus.source_options import SourceOptions
from atlasbus.stream_plan import LostEntries, StreamPlan
from atlasbus.streams import StreamCatalog, StreamInfo, Walk

COUNT_CUTS_UP_TO = 500_000
"""A range needing several pieces is cut by count up to this many entries, by time beyond."""


@dataclass(frozen=True)
class ReadRange:
    """One task's work: entries of ``stream`` with IDs in ``(after, upto]``.

    ``expected`` is how many entries the range held when planned, where known exactly;
    ``removed`` the stream's Redis 7 removal counter then. The task compares them with what it
    finds, to report entries deleted after planning.
    """

    stream: str
    topic: str
    after: EntryId
    upto: EntryId
    expected: int | None = None
    removed: int | None = None


def mark_batch(
    catalog: StreamCatalog,
    options: SourceOptions,
    start: StreamOffsets,
    end: Mapping[str, EntryId],
    *,
    infos: Mapping[str, StreamInfo | None] | None = None,
    walks: Mapping[str, Walk] | None = None,
) -> StreamOffsets:
    """The batch's end offset with each advancing stream's plan recorded; driver.

    ``infos`` (XINFO STREAM taken when the end was chosen) and ``walks`` (entries counted by
    admission control) are reused when given. A stream that does not advance keeps the plan
    of ``start`` verbatim, so an idle query's end offset equals its start and Spark runs no
    batch.
    """
    advancing = [s for s in sorted(end) if end[s] > start.get(s, ZERO)]
    if infos is None or any(s not in infos for s in advancing):
        infos = {**(infos or {}), **catalog.info(advancing)}
    plans: dict[str, StreamPlan] = {}
    for stream in end:
        if stream in advancing:
            plans[stream] = _plan_stream(
                catalog, options, stream, start, end[stream], infos[stream], (walks or {})
            )
        elif stream in start and start[stream] == end[stream]:
            plans[stream] = start.plan(stream)
        else:
            plans[stream] = StreamPlan(end[stream])
    return StreamOffsets.from_plans(plans)


def _plan_stream(
    catalog: StreamCatalog,
    options: SourceOptions,
    stream: str,
    start: StreamOffsets,
    upto: EntryId,
    info: StreamInfo | None,
    walks: Mapping[str, Walk],
) -> StreamPlan:
    after = start.get(stream, ZERO)
    if info is None:  # deleted since the end was chosen: nothing to cut, a task finds it gone
        return StreamPlan(upto, cuts=(), counts=None)
    walk = walks.get(stream)
    start_plan = start.plan(stream) if stream in start else None
    start_index = 0 if after == ZERO else (start_plan.index if start_plan else None)
    at_tail = upto == info.last_generated
    added = None
    if at_tail and info.entries_added is not None and start_index is not None:
        added = info.entries_added - start_index
    present = walk.total if walk is not None else None
    if present is None and added is not None:
        if nothing_remains_up_to(info, after):
            present = info.length  # every entry left is in (after, upto]
        elif not needs_count(after, info):
            present = added  # nothing above `after` was removed
    if present is None and after != ZERO and needs_count(after, info):
        walk = Walk(options.max_entries_per_partition)
        catalog.advance(stream, after, upto, None, walk)
        present = walk.total
    lost = lost_before_planning(stream, after, upto, info, added=added, present=present)
    # Only at the stream's newest entry does entries-added say how many entries reach it.
    index = info.entries_added if at_tail else None
    if walk is None and _worth_counting(catalog, options, stream, after, upto, info, present):
        walk = Walk(options.max_entries_per_partition)
        catalog.advance(stream, after, upto, None, walk)
    if walk is not None:
        cuts, counts = walk.pieces(upto)
        plan_counts: tuple[int, ...] | None = counts
    else:
        cuts = _time_cuts(catalog, options, stream, after, upto, info, present)
        plan_counts = (present,) if present is not None and not cuts else None
    return StreamPlan(
        upto,
        index=index,
        removed=info.removed,
        cuts=cuts,
        counts=plan_counts,
        lost=(lost.after, lost.upto, lost.count) if lost is not None else None,
    )


def _worth_counting(
    catalog: StreamCatalog,
    options: SourceOptions,
    stream: str,
    after: EntryId,
    upto: EntryId,
    info: StreamInfo,
    present: int | None,
) -> bool:
    """Whether to cut this range by count: it needs several pieces and is small enough.

    Cutting by count walks the range's IDs on the driver once, so every task reads exactly
    ``maxEntriesPerPartition`` entries (time slices drift with the write rate) and knows its
    count. Past ``COUNT_CUTS_UP_TO`` entries the walk would cost more than it saves.
    """
    entries = present
    if entries is None:
        first = catalog.first_in_range(stream, after, upto)
        if first is None:
            return False
        entries = estimate_entries(info, first, upto)
    return options.max_entries_per_partition < entries <= COUNT_CUTS_UP_TO


def _time_cuts(
    catalog: StreamCatalog,
    options: SourceOptions,
    stream: str,
    after: EntryId,
    upto: EntryId,
    info: StreamInfo,
    present: int | None,
) -> tuple[EntryId, ...]:
    """Cut points as equal slices of time from the first entry in range (no count known)."""
    entries = present if present is not None else None
    if entries is not None and entries <= options.max_entries_per_partition:
        return ()
    first = catalog.first_in_range(stream, after, upto)
    if first is None:
        return ()
    if entries is None:
        entries = estimate_entries(info, first, upto)
    pieces = math.ceil(entries / options.max_entries_per_partition)
    return tuple(hi for _, hi in split_range(after, first, upto, pieces)[:-1])


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
        for (lo, hi), count in zip(pieces, counts, strict=True):
            if count == 0:
                continue
            ranges.append(ReadRange(stream, topic, lo, hi, count, plan.removed))
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
            losses.append(LostEntries(stream, *lost))
    return losses


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
