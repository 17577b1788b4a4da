"""The ``atlasbus demo`` command: its sub-parser, and the run (which loads Spark) on demand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from pyspark_atlasbus.demo import args as _args
from pyspark_atlasbus.demo.common import EXIT_INTERRUPTED, DemoError


def register(subparsers: Any) -> None:
    """Add the ``demo`` command to the ``atlasbus`` command line."""
    _args.add_parser(subparsers).set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """The ``atlasbus demo`` command. Returns the exit status."""
    from pyspark_atlasbus.demo.pipeline import run_demo  # Redis, Spark, Delta: only to run

    try:
        return run_demo(args)
    except DemoError as exc:
        print(f"atlasbus demo: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the pipeline ran: nothing to summarise
        print("\natlasbus demo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    """``atlasbus demo ...`` on its own (the ``atlasbus`` entry point is ``atlasbus.cli``)."""
    parser = argparse.ArgumentParser(prog="atlasbus")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(["demo", *(sys.argv[1:] if argv is None else argv)])
    return int(args.run(args))
