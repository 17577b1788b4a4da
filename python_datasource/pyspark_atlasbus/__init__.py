"""The Spark adapter of atlasbus: ``format("atlasbus")`` for reads and writes.

Spark finds this package by its ``pyspark_`` name after ``pip install`` and registers
``DefaultSource``, so no ``spark.dataSource.register`` call is needed.
"""

from pyspark_atlasbus.datasource import AtlasbusDataSource

DefaultSource = AtlasbusDataSource

__all__ = ["AtlasbusDataSource", "DefaultSource"]
