"""Planning a batch: which entry-ID ranges each task reads.

Runs on the driver. A stream's range ``(after, upto]`` is cut into pieces of about
``maxEntriesPerPartition`` entries, as equal slices of time starting at the first entry actually
in range. The cut points depend only on the range's ends, its first entry and the stream's size,
so a replayed batch (same start and end offsets) covers exactly the same entries; each entry
falls in exactly one piece whatever the cuts are.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from atlasbus.data_loss import find_lost_range, on_data_loss
from atlasbus.entry_id import ZERO, EntryId
from atlasbus.source_options import SourceOptions
from atlasbus.streams import StreamCatalog, StreamInfo


@dataclass(frozen=True)
class ReadRange:
    """One task's work: entries of ``stream`` with IDs in ``(after, upto]``."""

    stream: str
    topic: str
    after: EntryId
    upto: EntryId


def plan_ranges(
    catalog: StreamCatalog,
    options: SourceOptions,
    start: Mapping[str, EntryId],
    end: Mapping[str, EntryId],
) -> list[ReadRange]:
    """The ranges to read for a batch from ``start`` to ``end`` (both offsets maps).

    A stream absent from ``start`` is new to the query and is read from its beginning.
    Streams present in ``start`` are first checked for data loss.
    """
    streams = [s for s in sorted(end) if end[s] > start.get(s, ZERO)]
    infos = catalog.info(streams)
    ranges: list[ReadRange] = []
    for stream in streams:
        after, upto, info = start.get(stream, ZERO), end[stream], infos[stream]
        if stream in start and after != ZERO:
            present = catalog.entry_exists(stream, after)
            lost = find_lost_range(stream, after, upto, info, position_still_present=present)
            if lost is not None:
                on_data_loss(
                    lost,
                    fail_on_data_loss=options.fail_on_data_loss,
                    dead_letter_table=options.dead_letter_table,
                    topic=options.subscription.topic_of(stream),
                )
        first = catalog.first_in_range(stream, after, upto)
        if first is None or info is None:
            continue
        pieces = math.ceil(estimate_entries(info, first, upto) / options.max_entries_per_partition)
        topic = options.subscription.topic_of(stream)
        ranges.extend(
            ReadRange(stream, topic, lo, hi) for lo, hi in split_range(after, first, upto, pieces)
        )
    return ranges


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
