"""The unit of work Spark ships to an executor: one planned range plus the options to read it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from atlasbus.options.source import SourceOptions
from atlasbus.planning.batch_plan import ReadRange

if TYPE_CHECKING:
    from atlasbus.dead_letters import QueryContext


class RangePartition(InputPartition):
    """Everything ``read()`` needs, because the reader that plans is not the one that reads."""

    def __init__(self, options: SourceOptions, read: ReadRange) -> None:
        super().__init__(read)
        self.options = options
        self.read = read

    def __repr__(self) -> str:
        r = self.read
        return f"RangePartition({r.stream} ({r.after}, {r.upto}])"


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Read exactly the planned range (batch and stream readers alike); executor."""
    if not isinstance(partition, RangePartition):
        return iter(())  # Spark's stand-in partition when the plan has none: nothing to read
    # the decoder's modules load here, on executors: the driver's runner never needs them
    from atlasbus.reading.range_reader import read_range

    return read_range(partition.options, partition.read, context=_context(partition))


def _context(partition: RangePartition) -> QueryContext | None:
    """Who is reading, for dead letters; only looked up when they are routed to a table."""
    if partition.options.dead_letter_table is None:
        return None
    from pyspark_atlasbus.query_context import task_query_context

    return task_query_context()
