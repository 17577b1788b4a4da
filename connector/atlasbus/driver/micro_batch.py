"""The source's driver side as a Spark-free state machine: the offsets a streaming query asks
for, one micro-batch after another (driver).

``pyspark_atlasbus.stream_reader`` hands each call of Spark's over to a ``MicroBatchDriver``:
``initial_offset`` where a new query starts, ``latest_offset`` the next batch's end,
``latest_report`` what progress shows beside it, ``plan`` the ranges a batch reads, and
``committed`` what follows a committed batch (``group`` mirrored, ``trimConsumed``). Between
the calls it keeps what a query's guarantees need: batch 0 of a start that moves pinned where
it starts, what the query itself removed (never counted as loss), the streams' newest IDs (a
stream deleted with entries not yet read is loss), the sweep's and the pacing's clocks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from atlasbus.bus.stream_catalog import StreamCatalog, StreamInfo
from atlasbus.model.entry_id import EntryId
from atlasbus.model.offsets import StreamOffsets
from atlasbus.model.stream_plan import LostEntries
from atlasbus.operations.lag import entries_after, latest_with_counts
from atlasbus.operations.retention import trim_consumed
from atlasbus.options.source import SourceOptions
from atlasbus.planning.batch_plan import (
    ReadRange,
    mark_batch,
    plan_ranges,
    report_recorded_losses,
    with_baselines,
)
from atlasbus.planning.data_loss import on_data_loss
from atlasbus.planning.pacing import TriggerPacer, new_entries_at_least
from atlasbus.planning.positions import BatchEnd, batch_end, latest_offsets, starting_offsets

log = logging.getLogger("atlasbus.stream_reader")

SWEEP_EVERY = 0.1
"""The source's sweep runs at most once per this share of ``sweepMinIdle`` (and 1 s)."""


class MicroBatchDriver:
    """One streaming query's offsets and what acts on them, for the life of its driver."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._available_now_target: StreamOffsets | None = None
        self._committed_seen: StreamOffsets | None = None
        # Each stream's newest ID when last asked, to notice a stream deleted (DEL) with
        # entries the query had not read yet.
        self._newest_seen: dict[str, EntryId] = {}
        self._pacer = TriggerPacer(options.pacing) if options.pacing is not None else None
        # What latest_offset learnt for latest_report, which Spark asks for right after it.
        self._latest_report: dict[str, object] | None = None
        self._swept_at: float | None = None
        # The starting position, before any batch: never a committed one, so never trimmed to.
        self._initial: StreamOffsets | None = None
        # Batch 0 of a start that moves (latest, group) ends where it starts and reads nothing:
        # latest_offset plans it so, and plan runs it so, replays included. Spark runs batch 0
        # before any other batch of a driver that was asked for its initial offset.
        self._batch_0_to_run = False
        # Where batch 0 of such a start ended, in this run or the one before a restart: the
        # query's start, which it has read nothing up to, so never trimmed to.
        self._pinned_end: StreamOffsets | None = None
        # minEntriesPerTrigger: the last count, reused while neither end moved (idle polls).
        self._counted: tuple[StreamOffsets, StreamOffsets, int] | None = None
        # Entries this query removed (trimConsumed, sweepDelete: all below its committed
        # position) since each stream's last plan: accounted for, never loss (mark_batch).
        self._removed_by_query: dict[str, int] = {}

    @property
    def _catalog(self) -> StreamCatalog:
        return StreamCatalog(self.options.endpoint)

    def initial_offset(self) -> StreamOffsets:
        """Where a query with no checkpoint starts (``startingOffsets``).

        Spark asks twice before batch 0 runs (to plan it, then to run it from): the first
        answer is kept, since ``latest`` or ``group`` may have moved in between, and batch 0
        run from a later start than it was planned from would skip the entries between.
        """
        if self._initial is None:
            catalog = self._catalog
            self._initial = with_baselines(catalog, starting_offsets(catalog, self.options))
            self._batch_0_to_run = self.options.starting.moves
        return self._initial

    def _is_initial(self, offsets: StreamOffsets) -> bool:
        """Whether ``offsets`` is where this driver's ``initial_offset`` started (positions:
        its recorded removals aside)."""
        return self._initial is not None and offsets.positions() == self._initial.positions()

    def prepare_available_now(self) -> None:
        """Record how far 'available now' reaches, so the query ends there."""
        self._available_now_target = StreamOffsets(
            latest_offsets(self._catalog, self.options, {}, max_entries=None)
        )

    def latest_offset(self, committed: StreamOffsets, max_entries: int | None) -> StreamOffsets:
        """The end of the batch after ``committed``: all available, or at most ``max_entries``.

        Spark asks for the next batch only once the previous one is committed, and it does not
        call commit after the last batch of an availableNow run: what follows a commit is done
        here too, once per committed position.
        """
        self.committed(committed)
        catalog = self._catalog
        self._sweep(catalog, committed)
        end = batch_end(
            catalog,
            self.options,
            committed,
            max_entries=max_entries,
            target=self._available_now_target,
        )
        self._report_deleted_streams(committed, end.infos)
        # Batch 0 of a start that moves reads nothing: a driver restarted before batch 0
        # commits runs it again from a new initial offset (later), and only an end equal to
        # the first start keeps the entries after that start for batch 1.
        plans_batch_0 = self._batch_0_to_run and self._is_initial(committed)
        chosen = committed
        if not plans_batch_0 and not self._holds_back(catalog, committed, end):
            chosen = mark_batch(
                catalog,
                self.options,
                committed,
                end.positions,
                infos=end.infos,
                walks=end.walks,
                removed_by_query=self._removed_by_query,
            )
            for stream in chosen:
                if chosen[stream] != committed.get(stream):  # a new plan counts them
                    self._removed_by_query.pop(stream, None)
        self._latest_report = latest_with_counts(
            catalog,
            self.options,
            infos=end.infos,
            behind=entries_after(committed, chosen, end.infos, end.walks),
        )
        return chosen

    def latest_report(self) -> dict[str, object]:
        """Each stream's newest ID (and Redis 7's entry count), for progress reports.

        With the batch's end offset beside it in the same report, it tells how many entries
        the query is behind (``atlasbus.operations.lag``). What ``latest_offset`` just learnt,
        else asked afresh.
        """
        report, self._latest_report = self._latest_report, None
        if report is None:
            report = latest_with_counts(self._catalog, self.options)
        return report

    def plan(self, start: StreamOffsets, end: StreamOffsets) -> list[ReadRange]:
        """The ranges a batch reads; the same offsets always give the same entries."""
        batch_0, self._batch_0_to_run = self._batch_0_to_run, False
        if batch_0 and self._is_initial(start):
            # Batch 0 of a start that moves, planned by latest_offset to read nothing, or
            # replayed after a restart from the new driver's own (later, or earlier) answer:
            # it ends at the query's start either way, and reads nothing. Spark runs batch 0
            # from the initial offset, and before any other batch of this driver.
            self._count_as_first_trigger()
            self._pinned_end = end.positions()
        if self._is_initial(start) and end.positions() == self._pinned_end:
            return []  # batch 0, however often Spark asks for its partitions
        report_recorded_losses(self.options, start, end)
        return list(plan_ranges(self.options, start, end))

    def committed(self, committed: StreamOffsets) -> None:
        """Act on a committed position, once: mirror ``group``, then ``trimConsumed``."""
        if not committed or committed.positions() == self._committed_seen:
            return
        self._mirror_group(committed)
        # The query's start: batch 0's end for a start that moves (after a restart, this
        # driver's own initial offset answered later than the start), else that answer.
        start = self._pinned_end
        if start is None and self._initial is not None:
            start = self._initial.positions()
        if self.options.trim_consumed and committed.positions() != start:
            for result in trim_consumed(self.options.endpoint, dict(committed)):
                self._count_removed(result.stream, result.removed)
                log.info(
                    "trimConsumed: %s trimmed below %s (%d removed, held by %s)",
                    result.stream,
                    result.point,
                    result.removed,
                    ", ".join(holder.describe() for holder in result.held_by) or "nobody",
                )
        self._committed_seen = committed.positions()

    def _count_as_first_trigger(self) -> None:
        """``minEntriesPerTrigger`` never holds the first trigger (as Kafka's source). For a
        ``latest`` start the empty batch 0 is that trigger, which would have found nothing new
        anyway; a ``group`` start's backlog is read at the next trigger, however small."""
        if self._pacer is not None and self.options.starting.kind == "latest":
            self._pacer.released_elsewhere()

    def _holds_back(self, catalog: StreamCatalog, committed: StreamOffsets, end: BatchEnd) -> bool:
        """``minEntriesPerTrigger``: too few new entries and ``maxTriggerDelay`` not yet up.

        An availableNow run is never held back: it must reach its target and stop.
        """
        if self._pacer is None or self._available_now_target is not None:
            return False
        enough = self._pacer.policy.min_entries
        start, upto = committed.positions(), StreamOffsets(end.positions)
        if self._counted is not None and self._counted[:2] == (start, upto):
            found = self._counted[2]
        else:
            found = new_entries_at_least(
                catalog, committed, end.positions, end.infos, end.walks, enough
            )
            self._counted = (start, upto, found)
        return self._pacer.hold(found)

    def _sweep(self, catalog: StreamCatalog, committed: StreamOffsets) -> None:
        """``sweepGroup``: dead-letter, then acknowledge, the group's retry-exhausted entries.

        Before the batch is planned, so planning sees what the sweep removed; at most once per
        ``SWEEP_EVERY`` of ``sweepMinIdle`` (and a second), since Spark calls latestOffset
        every few milliseconds while nothing is new. A stream without the group yet is skipped
        (the bus may create it later). ``sweepDelete`` deletes only entries the query has
        read (below its committed position): deleting one it has yet to read would be data
        loss; the others are acknowledged, and ``trimConsumed`` removes them once read. The
        letters' query columns stay empty: the driver does not know the query's ID.
        """
        policy = self.options.sweep
        if policy is None:
            return
        now = time.monotonic()
        every = max(1.0, policy.min_idle_ms / 1000 * SWEEP_EVERY)
        if self._swept_at is not None and now - self._swept_at < every:
            return
        self._swept_at = now
        streams = catalog.discover(self.options.subscription)
        if not streams:
            return
        assert self.options.dead_letter_table is not None  # parsing requires it
        # loaded only by a query that sweeps: it brings delta-rs, which would otherwise add
        # 60 ms to every query's start (Spark's runner process imports this module)
        from atlasbus.operations.reaper import sweep_retry_exhausted

        result = sweep_retry_exhausted(
            self.options.endpoint,
            streams,
            policy,
            self.options.dead_letter_table,
            topic_of=self.options.subscription.topic_of,
            require_group=False,
            delete_below=dict(committed.positions()),
        )
        for swept in result.streams:
            self._count_removed(swept.stream, swept.deleted)
        total = result.total
        if total.exhausted:
            log.info(
                "sweepGroup %s: %d retry-exhausted entries dead-lettered (%d already were), "
                "%d acknowledged, %d deleted",
                policy.group,
                total.dead_lettered,
                total.already_recorded,
                total.acked,
                total.deleted,
            )

    def _report_deleted_streams(
        self, committed: StreamOffsets, infos: Mapping[str, StreamInfo | None]
    ) -> None:
        """A stream gone (DEL) since the last trigger while it held entries not yet read.

        Its newest entry then present is what counts: IDs XDELed before (the newest ever
        generated may be one) were not there to lose.
        """
        for stream, info in infos.items():
            if info is not None:
                if info.last is not None:
                    self._newest_seen[stream] = info.last
                else:
                    self._newest_seen.pop(stream, None)
                continue
            newest = self._newest_seen.pop(stream, None)
            if stream in committed and newest is not None and newest > committed[stream]:
                on_data_loss(
                    LostEntries(stream, committed[stream], newest),
                    fail_on_data_loss=self.options.fail_on_data_loss,
                    dead_letter_table=self.options.dead_letter_table,
                    failover_possible=self.options.endpoint.is_sentinel,
                    topic=self.options.subscription.topic_of(stream),
                )

    def _count_removed(self, stream: str, removed: int) -> None:
        if removed:
            self._removed_by_query[stream] = self._removed_by_query.get(stream, 0) + removed

    def _mirror_group(self, committed: StreamOffsets) -> None:
        """Move ``group`` to the committed positions that changed since the last move.

        On Redis 7 a committed position carries the entries the stream had received up to it,
        given to Redis as the group's entries read, so ``XINFO GROUPS`` counts the group's lag.
        """
        if self.options.group is None:
            return
        entries_read = {
            stream: index
            for stream in committed
            if (index := committed.plan(stream).entries_read) is not None
        }
        self._catalog.move_group(
            dict(committed.positions()),
            self.options.group,
            previous=self._committed_seen,
            entries_read=entries_read,
        )
