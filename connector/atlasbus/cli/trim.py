"""``atlasbus trim``: trim the bus's streams to what every consumer group consumed.

The command-line face of ``atlasbus.operations.retention.trim_consumed`` with no query position:
only the consumer groups Redis knows hold entries back (a streaming query counts through its
``group`` option). Talks to Redis only, never starts Spark, which is why it lives in the core
(``atlasbus.cli`` only registers it). ``--dry-run`` says what would go and removes nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from atlasbus.cli.common import (
    HelpFormatter,
    add_bus_flags,
    endpoint_from_flag,
    format_table,
    guarded,
    subscription_from_flags,
)
from atlasbus.operations.retention import DRY_RUN_COUNT_LIMIT

if TYPE_CHECKING:
    from atlasbus.model.entry_id import EntryId
    from atlasbus.operations.retention import TrimResult

PROG = "atlasbus trim"


def register(subparsers: Any) -> None:
    """Add the ``trim`` command to the ``atlasbus`` command line."""
    trim = subparsers.add_parser(
        "trim",
        formatter_class=HelpFormatter,
        help="trim streams to what every consumer group consumed",
        description="Trim each stream {prefix}:{topic} (XTRIM MINID) up to the oldest position "
        "any consumer group still needs: each group's last-delivered entry and its oldest "
        "pending (unacknowledged) entry are kept, and everything after them. A stream without "
        "consumer groups is left alone. A streaming query holds entries back only through its "
        "'group' option. Prints, per stream, the trim point, what goes and which group holds "
        "it back.",
    )
    add_bus_flags(
        trim,
        topics_help="comma-separated topics to trim (default: every stream under the prefix)",
    )
    trim.add_argument(
        "--dry-run",
        action="store_true",
        help="say what would be trimmed; remove nothing. Counts exactly up to "
        f"{DRY_RUN_COUNT_LIMIT:,} entries on either side of the trim point; past that, "
        "'>=N' is a lower bound",
    )
    trim.set_defaults(run=run_trim)


def run_trim(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Exit status 0 when done (also when nothing went), 2 on an error (one line on stderr)."""
    out = out or sys.stdout
    return guarded(PROG, lambda: _trim(args, out))


def _trim(args: argparse.Namespace, out: TextIO) -> int:
    endpoint = endpoint_from_flag(args.url)
    subscription = subscription_from_flags(args)
    from atlasbus.bus.stream_catalog import StreamCatalog
    from atlasbus.operations.retention import trim_consumed

    streams = StreamCatalog(endpoint).discover(subscription)
    positions: dict[str, EntryId | None] = dict.fromkeys(streams)
    results = trim_consumed(endpoint, positions, dry_run=args.dry_run)
    write_report(results, out, prefix=args.stream_prefix, dry_run=args.dry_run)
    return 0


def write_report(results: Sequence[TrimResult], out: TextIO, *, prefix: str, dry_run: bool) -> None:
    """One row per stream: the trim point, what goes, what is left, who holds it back."""
    if not results:
        out.write(f"no streams under prefix {prefix!r}\n")
        return
    headers = [
        "stream",
        "trim point",
        "would remove" if dry_run else "removed",
        "would keep" if dry_run else "kept",
        "held back by",
    ]
    rows = [_row(result) for result in results]
    out.write(format_table(headers, rows))
    total = sum(r.removed for r in results)
    at_least = "at least " if any(not r.exact for r in results) else ""
    touched = sum(1 for r in results if r.removed)
    verb = "would remove" if dry_run else "removed"
    out.write(f"{verb} {at_least}{total} entries from {touched} of {len(results)} stream(s)\n")


def _row(result: TrimResult) -> list[str]:
    if not result.exists:
        return [result.stream, "-", "0", "0", "no such stream"]
    if result.point is None:
        return [result.stream, "-", "0", str(result.remaining), "no consumer group: left alone"]
    removed = str(result.removed) if result.exact else f">={result.removed}"
    remaining = str(result.remaining) if result.exact else f"<={result.remaining}"
    holders = ", ".join(h.describe() for h in result.held_by)
    return [result.stream, str(result.point), removed, remaining, holders]


def main(argv: Sequence[str] | None = None) -> int:
    """``atlasbus trim ...`` on its own (the ``atlasbus`` entry point is ``atlasbus.cli``)."""
    parser = argparse.ArgumentParser(prog="atlasbus")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
