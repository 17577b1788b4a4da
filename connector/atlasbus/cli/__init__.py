"""The ``atlasbus`` command line: ``status``, ``trim``, ``dlq ...``, and, from the Spark
adapter, ``demo`` and ``spark-home``.

Each command group lives in its own module and registers its sub-parser here. Registering
imports nothing heavy (no Spark, no Delta Lake, no Arrow): each command loads what it needs
when it runs, so ``atlasbus status`` starts in a fraction of a second
(``benchmarks/bench_cli_start.py``). The Spark adapter's commands are found by module name,
so the core does not import the adapter.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
from collections.abc import Sequence

from atlasbus.version import __version__

# Modules with a ``register(subparsers)``, in the order ``--help`` lists them: the Spark
# adapter's (installed with the core, in the same wheel) and the core's.
_COMMANDS = (
    "pyspark_atlasbus.demo.command",
    "atlasbus.cli.dlq",
    "atlasbus.cli.status",
    "atlasbus.cli.trim",
    "pyspark_atlasbus.spark_home",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atlasbus",
        description="Spark Structured Streaming connector for the ATLAS bus on Redis Streams.",
    )
    parser.add_argument("--version", action="version", version=f"atlasbus {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _COMMANDS:
        importlib.import_module(module).register(commands)
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
