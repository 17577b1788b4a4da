"""Where a query starts, and how far each micro-batch may go.

Runs on the driver. Offsets are ``{stream: last entry ID included}``; a stream missing from a
start offset is new to the query and is read from its first entry.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from atlasbus.bus.replication import NoLongerMaster
from atlasbus.bus.stream_catalog import Advance, StreamCatalog, StreamInfo, Walk, last_position
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.options.source import SourceOptions

log = logging.getLogger("atlasbus.positions")


def starting_offsets(
    catalog: StreamCatalog, options: SourceOptions, *, create_group: bool = True
) -> dict[str, EntryId]:
    """Resolve ``startingOffsets`` / ``startingTimestamp`` into concrete positions.

    Creates the consumer group (``group`` option) at the starting position where it is missing.
    """
    starting = options.starting
    streams = catalog.discover(options.subscription)
    positions: dict[str, EntryId]
    if starting.kind == "earliest":
        positions = {}
    elif starting.kind == "latest":
        infos = catalog.info(streams)
        positions = {stream: last_position(infos[stream]) for stream in streams}
    elif starting.kind == "timestamp":
        assert starting.timestamp_ms is not None
        at = EntryId(starting.timestamp_ms, 0).predecessor()
        positions = dict.fromkeys(streams, at)
    elif starting.kind == "group":
        assert options.group is not None
        positions = catalog.group_positions(streams, options.group)
        missing = sorted(set(streams) - set(positions))
        if missing:
            log.info(
                "consumer group %r does not exist yet on %s: starting there from the earliest",
                options.group,
                ", ".join(missing),
            )
    else:
        positions = dict(starting.offsets)
    if create_group and options.group is not None:
        every = sorted(set(streams) | set(positions))
        catalog.ensure_groups({s: positions.get(s, ZERO) for s in every}, options.group)
    return _as_read_entries(catalog, positions)


def _as_read_entries(
    catalog: StreamCatalog, positions: Mapping[str, EntryId]
) -> dict[str, EntryId]:
    """Move each position back to the newest entry at or before it.

    Reading "after X" is the same for both, but a real entry lets later batches tell trimming
    from ordinary progress (see ``data_loss``). A stream with no such entry starts from its
    beginning, like a stream new to the query.
    """
    asked = {stream: position for stream, position in positions.items() if position != ZERO}
    found = catalog.last_at_or_before_each(asked) if asked else {}
    return {stream: entry for stream, entry in found.items() if entry is not None}


@dataclass(frozen=True)
class BatchEnd:
    """How far the next batch goes, and what was learnt on the way (for ``mark_batch``)."""

    positions: dict[str, EntryId]
    infos: Mapping[str, StreamInfo | None]
    walks: Mapping[str, Walk]


def latest_offsets(
    catalog: StreamCatalog,
    options: SourceOptions,
    start: Mapping[str, EntryId],
    *,
    max_entries: int | None,
    target: Mapping[str, EntryId] | None = None,
) -> dict[str, EntryId]:
    """The end positions of the next batch from ``start`` (see ``batch_end``)."""
    return batch_end(catalog, options, start, max_entries=max_entries, target=target).positions


def batch_end(
    catalog: StreamCatalog,
    options: SourceOptions,
    start: Mapping[str, EntryId],
    *,
    max_entries: int | None,
    target: Mapping[str, EntryId] | None = None,
) -> BatchEnd:
    """The end of the next batch from ``start``.

    ``max_entries`` (admission control) caps the batch's total entries, shared fairly between
    streams with pending entries. ``target`` (Trigger.AvailableNow) caps every stream at the
    position recorded when the trigger began; streams found later are left for a later query.
    """
    if target is None:
        streams = sorted(set(catalog.discover(options.subscription)) | set(start))
    else:  # the target's streams were discovered when the run began: no SCAN again
        streams = sorted(target)
    infos, behind = _replicated_tails(catalog, options, streams)
    if behind is not None:
        assert options.replication is not None
        log.warning(
            "fewer than %d replicas of Redis at %s acknowledged the streams' newest entries "
            "within %d ms (option minReplicas): this trigger reads nothing new",
            options.replication.min_replicas,
            behind,
            options.replication.timeout_ms,
        )
        return BatchEnd(dict(start), infos, {})
    latest: dict[str, EntryId] = {}
    for stream in streams:
        newest = last_position(infos[stream])
        if target is not None:
            newest = min(newest, target[stream])
        latest[stream] = max(newest, start.get(stream, ZERO))
    if max_entries is None:
        return BatchEnd(_without_unread_new_streams(start, latest), infos, {})
    walks: dict[str, Walk] = {}
    positions = _admit(catalog, options, start, latest, max_entries, walks)
    return BatchEnd(positions, infos, walks)


def _replicated_tails(
    catalog: StreamCatalog, options: SourceOptions, streams: list[str]
) -> tuple[dict[str, StreamInfo | None], str | None]:
    """The streams' XINFO, and (with ``minReplicas``) the master whose replicas do not hold
    it yet, or None. After a cluster failover the tails are read again from the new masters,
    whose replicas are then asked; a second failover under way leaves it to the next trigger."""
    infos = catalog.info(streams)
    if options.replication is None:
        return infos, None
    try:
        return infos, catalog.replicas_behind(options.replication)
    except NoLongerMaster as moved:
        log.info("%s is a replica now (a failover): the streams' tails read again", moved)
        infos = catalog.info(streams)
    try:
        return infos, catalog.replicas_behind(options.replication)
    except NoLongerMaster as still:
        return infos, f"{still} (a replica now: a failover is under way)"


def _admit(
    catalog: StreamCatalog,
    options: SourceOptions,
    start: Mapping[str, EntryId],
    latest: Mapping[str, EntryId],
    max_entries: int,
    walks: dict[str, Walk],
) -> dict[str, EntryId]:
    """Advance streams by at most ``max_entries`` in all: equal shares, leftovers passed on.

    The entries walked are counted into ``walks`` (per stream), so planning knows exactly how
    many each piece holds.
    """
    end = {stream: start.get(stream, ZERO) for stream in latest}
    pending = [s for s in sorted(latest) if latest[s] > end[s]]
    budget = max_entries
    while pending and budget > 0:
        share = max(1, budget // len(pending))
        queue, still_pending = pending, []
        while queue:
            # In stream order, each takes its share of what is left. The walks that surely
            # get a full share go to Redis together; one whose share depends on what those
            # walk (the budget runs short) waits for their answer.
            allowances: list[int] = []
            left = budget
            for _ in queue:
                allowance = min(share, left)
                if allowance <= 0 or (allowance < share and allowances):
                    break
                allowances.append(allowance)
                left -= allowance
            if not allowances:
                still_pending += queue
                break
            walking, queue = queue[: len(allowances)], queue[len(allowances) :]
            steps = [
                Advance(
                    stream,
                    end[stream],
                    latest[stream],
                    allowance,
                    walks.setdefault(stream, Walk(options.max_entries_per_partition)),
                )
                for stream, allowance in zip(walking, allowances, strict=True)
            ]
            for step, (position, walked) in zip(steps, catalog.advance_many(steps), strict=True):
                budget -= walked
                if walked < (step.budget or 0):
                    end[step.stream] = latest[step.stream]
                else:
                    end[step.stream] = position
                    if position < latest[step.stream]:
                        still_pending.append(step.stream)
        pending = still_pending
    return _without_unread_new_streams(start, end)


def _without_unread_new_streams(
    start: Mapping[str, EntryId], end: dict[str, EntryId]
) -> dict[str, EntryId]:
    """A stream enters the offsets only once something of it is read (then it has a position)."""
    return {s: p for s, p in end.items() if s in start or p != ZERO}


def ending_offsets(catalog: StreamCatalog, options: SourceOptions) -> dict[str, EntryId]:
    """A batch read's end: ``endingOffsets``, else (and for a stream it does not list, as an
    unlisted stream of ``startingOffsets`` starts at its default) each stream's newest entry;
    with ``endingTimestamp``, no later than the last ID of the millisecond before it."""
    given = dict(options.ending or {})
    streams = [s for s in catalog.discover(options.subscription) if s not in given]
    infos = catalog.info(streams) if streams else {}
    ends = {**{stream: last_position(infos[stream]) for stream in streams}, **given}
    if options.ending_timestamp_ms is None:
        return ends
    before = EntryId(options.ending_timestamp_ms, 0).predecessor()
    return {stream: min(end, before) for stream, end in ends.items()}
