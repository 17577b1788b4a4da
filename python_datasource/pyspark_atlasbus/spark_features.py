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

Imported on the driver and on executors; the names below stand in for the missing classes, so
the same code loads on every line. docs/operations.md has the compatibility table.
"""

from __future__ import annotations

import pyspark

from atlasbus.errors import ConfigurationError
from atlasbus.options import keys
from atlasbus.options.source import SourceOptions

__all__ = [
    "ADMISSION_CONTROL",
    "ADMISSION_CONTROL_SINCE",
    "SPARK_VERSION",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
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
