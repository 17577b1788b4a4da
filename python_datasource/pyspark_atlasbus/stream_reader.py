"""The micro-batch stream reader: Spark's calls handed to the core's ``MicroBatchDriver``.

``initialOffset``/``latestOffset``/``partitions``/``commit`` run on the driver, where the
``MicroBatchDriver`` (``atlasbus.driver.micro_batch``) keeps the query's state; this class
turns Spark's offset dicts and read limits into its terms. ``read`` runs on executors from a
pickled copy, so it uses only what its partition carries.

pyspark 4.2 and later call ``latestOffset(start, limit)``; 4.0 and 4.1 call ``latestOffset()``
with no start (``spark_features``), and the reader tracks where the next micro-batch starts as
Spark's own wrapper of simple readers does on those lines: ``initialOffset``'s answer before
anything else, then the end of the last ``partitions`` call (a restart's first call is
``partitions(E, E)`` with the offset log's newest end) or of its own last answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from atlasbus.driver.micro_batch import MicroBatchDriver
from atlasbus.model.offsets import StreamOffsets
from atlasbus.options.source import SourceOptions
from pyspark_atlasbus.partition import RangePartition, read_partition
from pyspark_atlasbus.spark_features import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark_atlasbus.user_errors import user_facing


class AtlasbusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.driver = MicroBatchDriver(options)
        # pyspark 4.0/4.1, which give latestOffset no start: where the next batch starts.
        self._next_start: dict[str, object] | None = None

    @user_facing
    def initialOffset(self) -> dict[str, object]:
        """Where a query with no checkpoint starts (``startingOffsets``); driver."""
        return self.driver.initial_offset().to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_entries_per_trigger is not None:
            return ReadMaxRows(self.options.max_entries_per_trigger)
        return ReadAllAvailable()

    @user_facing
    def prepareForTriggerAvailableNow(self) -> None:
        """Record how far 'available now' reaches, so the query ends there; driver."""
        self.driver.prepare_available_now()

    @user_facing
    def latestOffset(
        self, start: dict[str, object] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, object]:
        """The next batch's end: all available, or at most ``maxEntriesPerTrigger``; driver.

        pyspark 4.0/4.1 give neither ``start`` nor ``limit`` (see the module docstring).
        """
        max_entries = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if start is None:
            start = self._next_start if self._next_start is not None else self.initialOffset()
            self._next_start = answer = self._latest_from(start, max_entries)
            return answer
        return self._latest_from(start, max_entries)

    def _latest_from(self, start: dict[str, object], max_entries: int | None) -> dict[str, object]:
        committed = StreamOffsets.from_dict(start, what="start offset")
        return self.driver.latest_offset(committed, max_entries).to_dict()

    @user_facing
    def reportLatestOffset(self) -> dict[str, object]:
        """Each stream's newest ID (and Redis 7's entry count), shown in progress; driver.

        With the batch's end offset beside it in the same report, it tells how many entries
        the query is behind (``pyspark_atlasbus.lag.LagListener``).
        """
        return self.driver.latest_report()

    @user_facing
    def partitions(
        self, start: dict[str, object], end: dict[str, object]
    ) -> Sequence[InputPartition]:
        """Plan the batch's ranges; the same offsets always give the same entries; driver."""
        first = StreamOffsets.from_dict(start, what="start offset")
        last = StreamOffsets.from_dict(end, what="end offset")
        self._next_start = end
        return [RangePartition(self.options, r) for r in self.driver.plan(first, last)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read exactly the planned range; executor."""
        return read_partition(partition)

    @user_facing
    def commit(self, end: dict[str, object]) -> None:
        """Act on a committed batch: mirror ``group``, then ``trimConsumed``; driver."""
        self.driver.committed(StreamOffsets.from_dict(end, what="committed offset"))
