"""Names the demo's parts share: its streams, consumer group, query, exit codes and error type."""

from __future__ import annotations

from atlasbus.sandbox.traffic import TOPICS

STREAM_PREFIX = "atlasbus_demo"
STREAMS = tuple(f"{STREAM_PREFIX}:{topic}" for topic in TOPICS)
WARM_UP_STREAM = f"{STREAM_PREFIX}:warmup"
"""Holds one entry for a moment: Spark reads it before the query starts, then it is deleted."""
GROUP = "atlasbus-demo"
QUERY_NAME = "atlasbus_demo"
EVENTS_APP_ID = "atlasbus-demo-events"
DRAIN_TIMEOUT_S = 60.0
STOP_DRAIN_TIMEOUT_S = 10.0
"""After Ctrl-C: how long the query may take to read what was published before it stops."""
EXIT_INTERRUPTED = 130


class DemoError(Exception):
    """A problem the user can fix; the message says how. Printed without a traceback."""
