"""``atlasbus status``: streams, consumer groups and dead letters, from a terminal or a cron job.

The figures are ``atlasbus.operations.bus_status.bus_status``'s (where each comes from: that
module's docstring); ``atlasbus.cli.status_report`` renders them as a table (default),
``--json`` or ``--prometheus``. Runs in the command line's process; never starts Spark or a JVM,
which is why it lives in the core (``atlasbus.cli`` only registers it). Conventions (flags, errors
as one line with exit status 2, credentials never shown) are ``atlasbus dlq``'s: see cli/dlq.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from atlasbus.cli.common import (
    HelpFormatter,
    add_bus_flags,
    endpoint_from_flag,
    guarded,
    non_empty,
    positive,
)
from atlasbus.errors import AtlasbusError
from atlasbus.options.keys import DEFAULT_STREAM_PREFIX

if TYPE_CHECKING:
    from atlasbus.operations.bus_status import BusStatus

CLEAR_SCREEN = "\x1b[H\x1b[2J"


def register(subparsers: Any) -> None:
    """Add the ``status`` command to the ``atlasbus`` command line."""
    status = subparsers.add_parser(
        "status",
        formatter_class=HelpFormatter,
        help="streams, consumer groups, lag and dead letters at a glance",
        description="For every stream under the prefix (or the topics named): length, first "
        "and last entry, entries ever added (Redis 7); for each consumer group: consumers, "
        "pending entries, last-delivered ID, lag and the oldest pending entry's idle time; "
        "with --table, dead letters by stage and reason in the last hour and in all. A few "
        "round trips whatever the number of streams; no entry is read. Starts no Spark.",
    )
    add_bus_flags(
        status,
        prefix_help=f"the streams {{prefix}}:{{topic}} (default {DEFAULT_STREAM_PREFIX})",
        topics_help="comma-separated topics to show (default: every stream under the prefix)",
    )
    status.add_argument(
        "--table",
        type=non_empty,
        help="also count the dead letters of this dead-letter table (a path or a delta-rs URI)",
    )
    form = status.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print JSON (times ISO-8601 UTC)")
    form.add_argument(
        "--prometheus",
        action="store_true",
        help="print the Prometheus text exposition format (gauges named atlasbus_*), e.g. for "
        "node exporter's textfile collector",
    )
    status.add_argument(
        "--watch",
        type=_seconds,
        metavar="N",
        help="refresh every N seconds until interrupted (with --json: one document per line)",
    )
    status.add_argument(
        "--output",
        type=non_empty,
        metavar="FILE",
        help="write each report to FILE instead of standard output, replacing it atomically "
        "(a textfile collector never reads half a file)",
    )
    # Bounds --watch (tests, scripts): stop after this many reports.
    status.add_argument("--count", type=positive, help=argparse.SUPPRESS)
    status.set_defaults(run=run_status)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def run_status(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print the status once, or every ``--watch`` seconds; exit status 2 on an error."""
    out = out or sys.stdout
    try:
        return guarded(
            "atlasbus status",
            lambda: _status(args, out),
            # from delta-rs: a table or a store it cannot read
            store_errors=_table_errors() if args.table is not None else (),
            store_advice=f"cannot read the dead-letter table {args.table!r} (check --table)",
        )
    except KeyboardInterrupt:  # the way to stop --watch
        return 0


def _status(args: argparse.Namespace, out: TextIO) -> int:
    from atlasbus.operations.bus_status import bus_status

    endpoint = endpoint_from_flag(args.url)
    render = _renderer(args)
    reports = 0
    while True:
        status = bus_status(
            endpoint,
            stream_prefix=args.stream_prefix,
            topics=args.topics,
            dead_letter_table=args.table,
        )
        text = render(status)
        if args.output is not None:
            try:
                _replace(Path(args.output), text)
            except OSError as exc:
                raise AtlasbusError(
                    f"cannot write {args.output!r} (check --output): {exc.strerror or exc}"
                ) from None
        else:
            if args.watch is not None and not args.json and not args.prometheus:
                text = (CLEAR_SCREEN if out.isatty() else ("\n" if reports else "")) + text
            out.write(text)
            out.flush()
        reports += 1
        if args.watch is None or (args.count is not None and reports >= args.count):
            return 0
        time.sleep(args.watch)


def _table_errors() -> tuple[type[BaseException], ...]:
    """What reading ``--table`` raises: delta-rs's errors (loaded only with ``--table``)."""
    from deltalake.exceptions import DeltaError

    return (DeltaError, OSError)


def _renderer(args: argparse.Namespace) -> Callable[[BusStatus], str]:
    from atlasbus.cli.status_report import render_json, render_prometheus, render_table

    if args.json:
        indent = None if args.watch is not None else 2
        return lambda status: render_json(status, indent=indent)
    if args.prometheus:
        return render_prometheus
    return render_table


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, 0o644)  # mkstemp makes it 0600; the collector may be another user
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """``atlasbus status ...`` on its own (the ``atlasbus`` entry point is ``atlasbus.cli``)."""
    parser = argparse.ArgumentParser(prog="atlasbus")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
