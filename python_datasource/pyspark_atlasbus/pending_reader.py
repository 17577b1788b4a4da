"""The batch reader of a group's pending entries (``spark.read`` with option ``pendingOf``).

The driver plans one partition per subscribed stream whose group has pending entries (one
pipelined XPENDING summary); each task pages through its stream's pending entries list on
the executor (``atlasbus.operations.pending``). A list can hold millions of entries, so it is never
gathered on the driver; the price is that each stream's list is read when its task runs,
not at planning: an entry acknowledged or delivered in between is absent or present
accordingly, and a retried task reads the list again as it then is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from atlasbus.operations.pending import PendingRead, plan_pending, read_pending
from atlasbus.options.source import SourceOptions
from atlasbus.planning.pushdown import PushedBounds
from pyspark_atlasbus.user_errors import user_facing

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter


class PendingPartition(InputPartition):
    """One stream's pending entries list and the options to read it (pickled to executors)."""

    def __init__(self, options: SourceOptions, read: PendingRead) -> None:
        super().__init__(read)
        self.options = options
        self.read = read

    def __repr__(self) -> str:
        r = self.read
        return f"PendingPartition({r.stream} group {r.group}, {r.planned} pending at planning)"


class AtlasbusPendingReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.bounds = PushedBounds()

    @user_facing
    def partitions(self) -> Sequence[InputPartition]:
        """One partition per stream with pending entries (within ``self.bounds``); driver."""
        reads = plan_pending(self.options, self.bounds)
        return [PendingPartition(self.options, read) for read in reads]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Page through one stream's pending entries list; executor."""
        if not isinstance(partition, PendingPartition):
            return iter(())  # Spark's stand-in partition when the plan has none
        return read_pending(partition.options, partition.read)


class AtlasbusFilteringPendingReader(AtlasbusPendingReader):
    """The pending reader given Spark's filters (pyspark 4.1+ with filter pushdown on): the
    same rules as a batch read's (``pushed_filters``), since a pending row's ``topic``,
    ``stream``, ``id`` and ``timestamp`` are its entry's ID's, deleted entries included."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Keep what narrows the lists; hand back what Spark must still check; driver."""
        from pyspark_atlasbus.pushed_filters import push

        pushed = push(filters)
        self.bounds = pushed.bounds
        return pushed.to_spark
