"""``atlasbus demo``: a whole pipeline on your laptop in one command.

Starts a private redis-server in a temporary folder (unless ``--url`` or ``$REDIS_URL`` names a
server), runs one streaming query (``format("atlasbus")`` with the source's ``deadLetterTable``
-> ``foreachBatch`` appending the good events to a Delta table with delta-rs), then publishes
realistic ATLAS traffic (atlasbus.sandbox.traffic: checkout flows over three topics, about 1%
malformed). A progress line shows entries published, read, written, dead-lettered and the lag;
the summary at the end is counted from the tables themselves.

The modules, one concern each:

- ``args``: the command line (options, help, examples);
- ``pipeline``: the run itself, in order (Redis, Spark, query, traffic, drain, summary);
- ``server``: the Redis used (embedded or ``--url``) and its counts from ``XINFO``;
- ``publisher``: the traffic thread;
- ``writer``: the ``foreachBatch`` Delta writer and the tally the progress shows;
- ``progress``: the progress display;
- ``summary``: the summary and the next-step commands;
- ``signals``: Ctrl-C and SIGTERM;
- ``common``: names the modules share.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from pyspark_atlasbus.demo import args as _args
from pyspark_atlasbus.demo.common import (
    EXIT_INTERRUPTED,
    GROUP,
    QUERY_NAME,
    STREAM_PREFIX,
    DemoError,
)
from pyspark_atlasbus.demo.pipeline import run_demo

__all__ = ["GROUP", "QUERY_NAME", "STREAM_PREFIX", "DemoError", "main", "register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``demo`` command to the ``atlasbus`` command line."""
    _args.add_parser(subparsers).set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """The ``atlasbus demo`` command. Returns the exit status."""
    try:
        return run_demo(args)
    except DemoError as exc:
        print(f"atlasbus demo: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the pipeline ran: nothing to summarise
        print("\natlasbus demo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    """``atlasbus demo ...`` on its own (the ``atlasbus`` entry point is pyspark_atlasbus.cli)."""
    parser = argparse.ArgumentParser(prog="atlasbus")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(["demo", *(sys.argv[1:] if argv is None else argv)])
    return int(args.run(args))
