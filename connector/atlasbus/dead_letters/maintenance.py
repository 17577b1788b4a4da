"""Table maintenance with delta-rs: compact small files (OPTIMIZE), then delete old ones (VACUUM).

Why: every executor append of dead letters, and every micro-batch the demo writes, is its own
small parquet file; a first demo run left 116 files for 595 dead letters. ``compact`` rewrites
the live files into few large ones (a commit with ``dataChange=false``, so rows, app
transactions and streams reading the table are unaffected) and then vacuums the files no
version within the retention still needs.

Safe beside writers: compaction only removes the files it read, so concurrent appends (delta-rs
executors, delta-spark jobs) do not conflict with it; a concurrent replay MERGE rewriting one of
those files does, and the compaction is run again on the new version. Vacuum deletes only files
removed from the table more than ``retention_hours`` ago: a query or reader still on an older
version than that (a stream far behind, time travel) loses its files, which is why the default
is the table's own ``delta.deletedFileRetentionDuration`` (Delta's default: 7 days).

Runs wherever it is called (the ``atlasbus dlq compact`` command, the demo's driver); needs no
JVM. delta-spark's ``OPTIMIZE``/``VACUUM`` do the same on a cluster (docs/dead-letters.md).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from os import PathLike, fspath
from typing import Final

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from atlasbus.errors import AtlasbusError

log = logging.getLogger("atlasbus.dead_letters")

DEFAULT_RETENTION: Final = timedelta(days=7)
"""Delta's default ``delta.deletedFileRetentionDuration``, used when the table sets none."""

_ATTEMPTS: Final = 10


class CompactError(AtlasbusError):
    """The table could not be compacted (missing, or conflicting writers never let it commit)."""


@dataclass(frozen=True)
class CompactResult:
    """What ``compact`` did: live files before and after, files deleted, rows (unchanged)."""

    files_before: int
    files_after: int
    files_rewritten: int
    files_vacuumed: int
    rows: int
    version: int
    retention_hours: float


def table_retention(table: DeltaTable) -> timedelta:
    """The table's ``delta.deletedFileRetentionDuration`` (``interval 7 days``), else 7 days."""
    text = table.metadata().configuration.get("delta.deletedFileRetentionDuration")
    if not text:
        return DEFAULT_RETENTION
    parts = text.replace("interval", "").split()
    if len(parts) != 2:
        return DEFAULT_RETENTION
    amount, unit = float(parts[0]), parts[1].rstrip("s").lower()
    seconds = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
    return timedelta(seconds=amount * seconds.get(unit, 86400))


def compact(
    uri: str | PathLike[str],
    *,
    retention_hours: float | None = None,
    target_size: int | None = None,
    full: bool = False,
    storage_options: Mapping[str, str] | None = None,
) -> CompactResult:
    """Compact the Delta table at ``uri`` and vacuum what the retention allows.

    ``retention_hours``: keep files removed less than this long ago (default: the table's
    ``delta.deletedFileRetentionDuration``, 7 days unless set); 0 deletes every file the latest
    version does not use, which is only safe when nothing reads an older version. A retention
    below the table's own is honoured (the caller asked for it) and logged.
    ``target_size`` is delta-rs's (default 100 MiB). ``full`` also deletes files in the folder
    that no version references (a failed task's output, Spark's empty schema file), as old as
    the retention: with 0 only when no writer is running, since a commit in flight has written
    its files but not yet named them. Returns the figures.
    """
    path = fspath(uri)
    options = dict(storage_options) if storage_options else None
    if retention_hours is not None and retention_hours < 0:
        raise ValueError(f"retention_hours must be 0 or more, got {retention_hours}")
    try:
        table = DeltaTable(path, storage_options=options)
    except TableNotFoundError:
        raise CompactError(f"no Delta table at {path!r}: check the path") from None
    before = len(table.file_uris())
    rewritten = 0
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            metrics = table.optimize.compact(target_size=target_size)
            rewritten += int(metrics.get("numFilesRemoved", 0))
            break
        except CommitFailedError as exc:
            if attempt == _ATTEMPTS:
                raise CompactError(
                    f"compacting {path!r} conflicted with other writers {attempt} times: {exc}; "
                    "run it again when fewer replays run"
                ) from exc
            time.sleep(0.05 * attempt * random.uniform(0.5, 1.0))
            table = DeltaTable(path, storage_options=options)
    table = DeltaTable(path, storage_options=options)
    present = _files_on_disk(path) if "://" not in path else set()
    own = table_retention(table)
    hours = own.total_seconds() / 3600 if retention_hours is None else float(retention_hours)
    if hours * 3600 < own.total_seconds():
        log.info(
            "vacuuming %s with a retention of %g h, below the table's %g h: readers on a "
            "version older than that lose their files",
            path,
            hours,
            own.total_seconds() / 3600,
        )
    # delta-rs takes whole hours; round up so nothing younger than asked is deleted
    whole = int(hours) if hours == int(hours) else int(hours) + 1
    vacuumed = table.vacuum(
        retention_hours=whole, dry_run=False, enforce_retention_duration=False, full=full
    )
    if "://" not in path:  # delta-rs lists files an earlier vacuum deleted too: count real ones
        vacuumed = [f for f in vacuumed if f in present]
    table = DeltaTable(path, storage_options=options)
    result = CompactResult(
        files_before=before,
        files_after=len(table.file_uris()),
        files_rewritten=rewritten,
        files_vacuumed=len(vacuumed),
        rows=int(table.count()),
        version=int(table.version()),
        retention_hours=float(whole),
    )
    log.info("compacted %s: %s", path, result)
    return result


def _files_on_disk(path: str) -> set[str]:
    """Every data file under a local table's folder, both as delta-rs's vacuum names it
    (relative, or absolute as in its first runs) so its list can be checked against it."""
    found: set[str] = set()
    for folder, folders, names in os.walk(path):
        folders[:] = [f for f in folders if f != "_delta_log"]
        for name in names:
            full = os.path.join(folder, name)
            found.update((full, os.path.relpath(full, path)))
    return found


def parquet_files_on_disk(path: str | PathLike[str]) -> int:
    """Parquet files under a local table's folder (live or not): what a user sees with ``ls``."""
    count = 0
    for _folder, folders, names in os.walk(fspath(path)):
        folders[:] = [f for f in folders if f != "_delta_log"]  # checkpoints are parquet too
        count += sum(1 for name in names if name.endswith(".parquet"))
    return count
