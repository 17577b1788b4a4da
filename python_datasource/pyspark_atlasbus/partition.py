"""The unit of work Spark ships to an executor: one planned range plus the options to read it."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

from atlasbus.planning import ReadRange
from atlasbus.source_options import SourceOptions


class RangePartition(InputPartition):  # type: ignore[misc]
    """Everything ``read()`` needs, because the reader that plans is not the one that reads."""

    def __init__(self, options: SourceOptions, read: ReadRange) -> None:
        super().__init__(read)
        self.options = options
        self.read = read

    def __repr__(self) -> str:
        r = self.read
        return f"RangePartition({r.stream} ({r.after}, {r.upto}])"
