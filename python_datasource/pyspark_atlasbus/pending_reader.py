"""The batch reader of a group's pending entries (``spark.read`` with option ``pendingOf``).

The driver plans one partition per subscribed stream whose group has pending entries (one
pipelined XPENDING summary); each task pages through its stream's pending entries list on
the executor (``atlasbus.operations.pending``). A list can hold millions of entries, so it is never
gathered on the driver; the price is that each stream's list is read when its task runs,
not at planning: an entry acknowledged or delivered in between is absent or present
accordingly, and a retried task reads the list again as it then is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from atlasbus.operations.pending import PendingRead, plan_pending, read_pending
from atlasbus.options.source import SourceOptions
from pyspark_atlasbus.user_errors import user_facing


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

    @user_facing
    def partitions(self) -> Sequence[InputPartition]:
        """One partition per stream with pending entries; driver."""
        return [PendingPartition(self.options, read) for read in plan_pending(self.options)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Page through one stream's pending entries list; executor."""
        if not isinstance(partition, PendingPartition):
            return iter(())  # Spark's stand-in partition when the plan has none
        return read_pending(partition.options, partition.read)
