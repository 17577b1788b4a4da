"""The batch reader (``spark.read``): one plan from ``startingOffsets`` to ``endingOffsets``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

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
from atlasbus.planning.pushdown import PushedBounds, pushed_offsets
from pyspark_atlasbus.partition import RangePartition, read_partition
from pyspark_atlasbus.user_errors import user_facing

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter


class AtlasbusBatchReader(DataSourceReader):
    """Reads every entry of ``(startingOffsets, endingOffsets]``; Spark filters the rows."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.bounds = PushedBounds()

    @user_facing
    def partitions(self) -> Sequence[InputPartition]:
        """Resolve both ends now and plan the ranges, within ``self.bounds``; driver."""
        catalog = StreamCatalog(self.options.endpoint)
        positions = starting_offsets(catalog, self.options, create_group=False)
        last = ending_offsets(catalog, self.options)
        if self.bounds.narrows:
            topic_of = {s: self.options.subscription.topic_of(s) for s in last}
            positions, last = pushed_offsets(catalog, self.bounds, positions, last, topic_of)
        # what Redis holds now is the read: nothing removed before it is loss
        start = with_baselines(catalog, positions)
        # a window is counted, so that removals outside it are never taken for its own
        end = mark_batch(catalog, self.options, start, last, count_ranges=True)
        report_recorded_losses(self.options, start, end)
        return [RangePartition(self.options, r) for r in plan_ranges(self.options, start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read exactly the planned range; executor."""
        return read_partition(partition)


class AtlasbusFilteringBatchReader(AtlasbusBatchReader):
    """The batch reader given Spark's filters (pyspark 4.1+ with filter pushdown on).

    Made only in Spark's filter-pushdown planning (``spark_features.planning_with_filters``):
    Spark refuses a reader with ``pushFilters`` when its setting is off.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Keep what narrows the read; hand back what Spark must still check; driver."""
        from pyspark_atlasbus.pushed_filters import push

        pushed = push(filters)
        self.bounds = pushed.bounds
        return pushed.to_spark
