"""The Spark adapter of atlasbus: ``format("atlasbus")`` for reads and writes.

Spark finds this package by its ``pyspark_`` name after ``pip install`` and registers
``DefaultSource``, so no ``spark.dataSource.register`` call is needed.

Also here: ``with_dead_letters`` (a ``foreachBatch`` wrapper that routes rejected rows to the
dead-letter table) and ``read_dead_letters`` (the table as a DataFrame), loaded on first use so
that registering the data source does not load delta-rs.
"""

from typing import Any

from pyspark_atlasbus.datasource import AtlasbusDataSource

DefaultSource = AtlasbusDataSource

__all__ = ["AtlasbusDataSource", "DefaultSource", "read_dead_letters", "with_dead_letters"]

_LAZY = ("read_dead_letters", "with_dead_letters")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from pyspark_atlasbus import dead_letters

        return getattr(dead_letters, name)
    raise AttributeError(f"module 'pyspark_atlasbus' has no attribute {name!r}")
