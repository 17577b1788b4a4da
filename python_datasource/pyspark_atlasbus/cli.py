"""The ``atlasbus`` command line: ``demo``, ``status``, ``trim``, ``dlq ...`` and ``spark-home``.

Each command group lives in its own module and registers its sub-parser here.
"""

from __future__ import annotations

import argparse
import difflib
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
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        refuse_unknown(parser, args, unknown)
    return int(args.run(args) or 0)


def refuse_unknown(
    parser: argparse.ArgumentParser, args: argparse.Namespace, unknown: list[str]
) -> None:
    """Exit 2 with the usage of the subcommand that was given flags it does not take, and
    the closest flag it does take ("did you mean"); argparse alone shows the top level's."""
    chosen = _chosen_subcommand(parser, args)
    flags = [flag for action in chosen._actions for flag in action.option_strings]
    wrong = unknown[0].split("=", 1)[0]
    close = difflib.get_close_matches(wrong, flags, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    chosen.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")


def _chosen_subcommand(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The innermost subcommand's parser ``args`` was parsed with (argparse keeps its
    sub-parsers in ``_actions``, unchanged since Python 3.2)."""
    current = parser
    while True:
        subcommands = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subcommands[0].dest, None) if subcommands else None
        if not subcommands or name not in subcommands[0].choices:
            return current
        current = subcommands[0].choices[name]


if __name__ == "__main__":
    sys.exit(main())
