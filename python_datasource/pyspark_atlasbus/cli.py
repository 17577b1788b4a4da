"""The ``atlasbus`` command line: ``demo``, ``status``, ``trim``, ``dlq ...`` and ``spark-home``.

Each command group lives in its own module and registers its sub-parser here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from atlasbus import __version__


def build_parser() -> argparse.ArgumentParser:
    from atlasbus import dlq_cli, status_cli, trim_cli
    from pyspark_atlasbus import demo, spark_home

    parser = argparse.ArgumentParser(
        prog="atlasbus",
        description="Spark Structured Streaming connector for the ATLAS bus on Redis Streams.",
    )
    parser.add_argument("--version", action="version", version=f"atlasbus {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo.register(commands)
    dlq_cli.register(commands)
    status_cli.register(commands)
    trim_cli.register(commands)
    spark_home.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
