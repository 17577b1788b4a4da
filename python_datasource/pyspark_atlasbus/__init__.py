"""The Spark adapter of atlasbus: ``format("atlasbus")`` for reads and writes.

Spark finds this package by its ``pyspark_`` name after ``pip install`` and registers
``DefaultSource``, so no ``spark.dataSource.register`` call is needed.

Also here: ``with_dead_letters`` (a ``foreachBatch`` wrapper that routes rejected rows to the
dead-letter table) and ``read_dead_letters`` (the table as a DataFrame), loaded on first use so
that registering the data source does not load delta-rs.

Every name is loaded on first use: the ``atlasbus`` command imports this package's
``demo`` and ``spark_home`` modules to register them, and must not load Spark to do so.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark_atlasbus.datasource import AtlasbusDataSource
    from pyspark_atlasbus.dead_letters import read_dead_letters, with_dead_letters

    DefaultSource = AtlasbusDataSource

__all__ = ["AtlasbusDataSource", "DefaultSource", "read_dead_letters", "with_dead_letters"]

_HOMES = {
    "AtlasbusDataSource": "pyspark_atlasbus.datasource",
    "DefaultSource": "pyspark_atlasbus.datasource",
    "read_dead_letters": "pyspark_atlasbus.dead_letters",
    "with_dead_letters": "pyspark_atlasbus.dead_letters",
}


def __getattr__(name: str) -> Any:
    """Spark's data source lookup asks for ``DefaultSource`` (``hasattr``): found here."""
    if name not in _HOMES:
        raise AttributeError(f"module 'pyspark_atlasbus' has no attribute {name!r}")
    import importlib

    home = importlib.import_module(_HOMES[name])
    value = getattr(home, "AtlasbusDataSource" if name == "DefaultSource" else name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
