"""``LagListener``: entries behind latest per stream, from each query's progress; driver.

Spark gives a Python source no custom metrics (no ``ReportsSourceMetrics``), so Kafka's
``avgOffsetsBehindLatest`` has no direct twin. Every progress report does carry the source's
``endOffset`` and ``latestOffset``, and on Redis 7 atlasbus puts each stream's entry count in both;
this listener turns them into entries behind latest (``atlasbus.operations.lag.entries_behind``),
logs them and hands them to a callback (a metrics exporter, an alert). Register it with
``spark.streams.addListener(LagListener())``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from atlasbus.operations.lag import entries_behind

log = logging.getLogger("atlasbus.lag")

LagCallback = Callable[[str, dict[str, int | None]], None]
"""Called with the query's name (its id when unnamed) and entries behind per stream."""


class LagListener(StreamingQueryListener):
    """Keeps, logs and forwards each query's entries behind latest per stream."""

    def __init__(self, on_lag: LagCallback | None = None) -> None:
        from pyspark_atlasbus.spark_features import (
            ADMISSION_CONTROL,
            ADMISSION_CONTROL_SINCE,
            SPARK_VERSION,
        )

        if not ADMISSION_CONTROL:  # said once, where the listener is made: never silent
            log.warning(
                "LagListener: pyspark %s puts no latest offset of a Python data source in "
                "progress reports (pyspark %s does), so there is no lag to report; a query's "
                "'group' shows its lag in XINFO GROUPS and `atlasbus status` instead",
                SPARK_VERSION,
                ADMISSION_CONTROL_SINCE,
            )
        self.on_lag = on_lag
        self.latest: dict[str, dict[str, int | None]] = {}
        """The last figures per query (name or id), per stream."""

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        query = progress.name or str(progress.id)
        behind: dict[str, int | None] = {}
        for source in progress.sources:
            figures = entries_behind(source.endOffset, source.latestOffset)
            if figures is not None:
                behind.update(figures)
        if not behind:
            return
        self.latest[query] = behind
        log.info(
            "query %s: entries behind latest: %s",
            query,
            ", ".join(f"{s}={'unknown' if n is None else n}" for s, n in sorted(behind.items())),
        )
        if self.on_lag is not None:
            self.on_lag(query, behind)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass
