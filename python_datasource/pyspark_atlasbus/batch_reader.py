"""The batch reader (``spark.read``): one plan from ``startingOffsets`` to ``endingOffsets``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.options.source import SourceOptions
from atlasbus.planning.batch_plan import (
    mark_batch,
    plan_ranges,
    report_recorded_losses,
    with_baselines,
)
from atlasbus.planning.positions import ending_offsets, starting_offsets
from pyspark_atlasbus.partition import RangePartition, read_partition
from pyspark_atlasbus.user_errors import user_facing


class AtlasbusBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    @user_facing
    def partitions(self) -> Sequence[InputPartition]:
        """Resolve both ends now and plan the ranges; driver."""
        catalog = StreamCatalog(self.options.endpoint)
        # what Redis holds now is the read: nothing removed before it is loss
        start = with_baselines(catalog, starting_offsets(catalog, self.options, create_group=False))
        end = mark_batch(catalog, self.options, start, ending_offsets(catalog, self.options))
        report_recorded_losses(self.options, start, end)
        return [RangePartition(self.options, r) for r in plan_ranges(self.options, start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read exactly the planned range; executor."""
        return read_partition(partition)
