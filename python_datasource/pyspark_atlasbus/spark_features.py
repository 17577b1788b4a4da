"""What the installed pyspark's Python Data Source API offers, and what atlasbus does without it.

atlasbus runs beside every pyspark from 4.0 on and never moves the user's Spark. The API grew:

- 4.1: ``DataSourceStreamArrowWriter`` (the streaming sink receives Arrow batches). On 4.0 the
  sink's writer is a ``DataSourceArrowWriter`` with the streaming ``commit``/``abort``, which
  4.0's worker drives by duck typing and feeds Arrow batches all the same.
- 4.2: admission control for Python stream readers (``latestOffset(start, limit)``,
  ``getDefaultReadLimit``), ``SupportsTriggerAvailableNow`` and ``reportLatestOffset``. On
  4.0/4.1 Spark calls ``latestOffset()`` with no start, so the reader tracks its own
  (``AtlasbusStreamReader``); options that need admission control are refused at start, naming
  the version (``require_spark_for``); ``trigger(availableNow=True)`` reads everything
  available in one micro-batch; progress reports carry no latest offset, so ``LagListener``
  has nothing to report.
- 4.2: ``DataSourceReader.pushFilters`` (filter pushdown for batch reads), used only when the
  session sets ``spark.sql.python.filterPushdown.enabled`` (default false). Spark refuses a
  read whose reader overrides ``pushFilters`` while that setting is off, so the data source
  hands out its filtering reader only inside the planning step Spark runs when it is on
  (``planning_with_filters``); otherwise, and on 4.0/4.1, a batch read reads as before.

Imported on the driver and on executors; the names below stand in for the missing classes, so
the same code loads on every line. docs/operations.md has the compatibility table.
"""

from __future__ import annotations

import sys

import pyspark
from pyspark.sql.datasource import DataSourceReader

from atlasbus.errors import ConfigurationError
from atlasbus.options import keys
from atlasbus.options.source import SourceOptions

__all__ = [
    "ADMISSION_CONTROL",
    "ADMISSION_CONTROL_SINCE",
    "FILTER_PUSHDOWN",
    "FILTER_PUSHDOWN_CONF",
    "SPARK_VERSION",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
    "planning_with_filters",
    "require_spark_for",
]

SPARK_VERSION = pyspark.__version__

try:  # pyspark 4.2 and later
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # pyspark 4.0, 4.1
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in: 4.0/4.1 pass no read limit."""

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: 4.0/4.1 pass no read limit."""

    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: 4.0/4.1 pass no read limit."""

        def __init__(self, max_rows: int) -> None:
            self.max_rows = max_rows

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: 4.0/4.1 run ``availableNow`` as one micro-batch of all there is."""

        def prepareForTriggerAvailableNow(self) -> None:
            """Not called by 4.0/4.1."""


ADMISSION_CONTROL_SINCE = "4.2"
"""The first pyspark whose Python stream readers get admission control."""


FILTER_PUSHDOWN = hasattr(DataSourceReader, "pushFilters")
"""Whether this pyspark lets a batch reader take filters (4.1 and later)."""

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
"""Spark's setting that turns filter pushdown to Python data sources on (default false)."""

_PUSHDOWN_PLANNER = "data_source_pushdown_filters"
"""The module of pyspark's worker that creates the reader and calls ``pushFilters``
(``pyspark.sql.worker.data_source_pushdown_filters``); Spark runs it only with
``FILTER_PUSHDOWN_CONF`` on."""


def planning_with_filters() -> bool:
    """Whether ``DataSource.reader`` is being called by Spark's filter-pushdown planning.

    Driver, in Spark's planning worker. Spark gives a reader filters only there, and
    refuses elsewhere a reader whose class overrides ``pushFilters`` when
    ``FILTER_PUSHDOWN_CONF`` is off: so the filtering reader is made here only. Looked up on
    the call stack (the worker calls ``reader()`` from its own ``_main``); when not found
    (a later pyspark that renamed it), reads stay unfiltered, as on 4.0, never wrong.
    """
    if not FILTER_PUSHDOWN:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        file = frame.f_code.co_filename
        if name.endswith(_PUSHDOWN_PLANNER) or file.endswith(f"{_PUSHDOWN_PLANNER}.py"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def require_spark_for(options: SourceOptions) -> None:
    """Refuse, when the streaming query starts, options this pyspark cannot honour; driver.

    They would be silently ignored otherwise: without admission control Spark never tells the
    reader how far a micro-batch may go, nor lets it hold one back.
    """
    if ADMISSION_CONTROL:
        return
    given = []
    if options.max_entries_per_trigger is not None:
        given.append(f"'{keys.MAX_ENTRIES_PER_TRIGGER}'")
    if options.pacing is not None:
        given.append(f"'{keys.MIN_ENTRIES_PER_TRIGGER}' (and '{keys.MAX_TRIGGER_DELAY}')")
    if given:
        them = "it" if len(given) == 1 else "them"
        raise ConfigurationError(
            f"option {' and '.join(given)} needs pyspark {ADMISSION_CONTROL_SINCE} or later "
            f"(admission control for Python data sources), and this Spark is pyspark "
            f"{SPARK_VERSION}: leave {them} out (each micro-batch then reads all that is new), "
            f"or run the query on pyspark {ADMISSION_CONTROL_SINCE} or later"
        )
