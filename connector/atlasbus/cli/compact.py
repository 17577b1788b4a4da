"""``atlasbus dlq compact``: OPTIMIZE and VACUUM a Delta table with delta-rs, from a terminal.

Registered by ``atlasbus.cli.dlq`` (one call); the work is
``atlasbus.dead_letters.maintenance.compact``. Runs in the command's process; starts no Spark. Works
on any Delta table (the demo's events table too), though it is documented for the dead-letter table.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

from atlasbus.cli.common import HelpFormatter, non_empty

if TYPE_CHECKING:  # loaded when the command runs (delta-rs)
    from atlasbus.dead_letters.maintenance import CompactResult


def add_compact(commands: Any, guard: Any) -> None:
    """Add ``compact`` to the ``dlq`` subcommands; ``guard`` is dlq's error handler."""
    parser = commands.add_parser(
        "compact",
        formatter_class=HelpFormatter,
        help="compact the table's small files (OPTIMIZE), then delete old ones (VACUUM)",
        description="Rewrite the table's live files into few large ones (a Delta OPTIMIZE "
        "commit: rows, app transactions and streams reading the table are unaffected), then "
        "delete the files no version within --retain-hours needs (VACUUM). Safe while "
        "queries append dead letters. Readers on a version older than the retention (a stream "
        "far behind, time travel) lose their files: keep the default unless nothing reads old "
        "versions.",
    )
    parser.add_argument(
        "--table",
        type=non_empty,
        required=True,
        help="the Delta table: a path or a delta-rs URI",
    )
    parser.add_argument(
        "--retain-hours",
        type=_hours,
        help="keep files removed less than this many hours ago (default: the table's "
        "delta.deletedFileRetentionDuration, 168 unless set); 0 keeps none",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="also delete files no version references (left by failed writers); only when "
        "no writer is running",
    )
    parser.set_defaults(run=lambda args, out=None: guard(out or sys.stdout, lambda: _run(args)))


MAX_RETAIN_HOURS = 24 * 365 * 1000


def _hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_RETAIN_HOURS:  # NaN fails too; delta-rs takes whole hours as u64
        raise argparse.ArgumentTypeError(
            f"must be a number of hours from 0 to {MAX_RETAIN_HOURS} (1,000 years), got {text!r}"
        )
    return value


def _run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from atlasbus.dead_letters.maintenance import compact, parquet_files_on_disk

    out = out or sys.stdout
    local = "://" not in args.table
    on_disk = parquet_files_on_disk(args.table) if local else None
    result = compact(args.table, retention_hours=args.retain_hours, full=args.full)
    write_compact_report(args.table, result, out)
    if local:
        out.write(
            f"parquet files in the folder: {on_disk} -> {parquet_files_on_disk(args.table)}\n"
        )
    return 0


def write_compact_report(table: str, result: CompactResult, out: TextIO) -> None:
    out.write(
        f"compacted {table}: {result.files_before} live file(s) -> {result.files_after} "
        f"({result.files_rewritten} rewritten), {result.rows} row(s), version {result.version}\n"
    )
    out.write(
        f"vacuumed {result.files_vacuumed} file(s) removed more than "
        f"{result.retention_hours:g} h ago\n"
    )
    from deltalake import DeltaTable

    from atlasbus.dead_letters.maintenance import table_retention

    own = table_retention(DeltaTable(table)).total_seconds() / 3600
    if result.retention_hours < own:
        out.write(
            f"note: --retain-hours {result.retention_hours:g} is below the table's {own:g} h: "
            "a reader of an older version (a stream far behind, time travel) has lost its "
            "files\n"
        )
