"""The dead-letter table on Delta Lake, written and read with delta-rs (no JVM needed).

Appends are idempotent twice over: a MERGE inserts only IDs the table does not hold yet (a
retried task adds nothing), and when the caller names its write with ``app_id``/``version``
(query and batch) the commit records a Delta app transaction, so a replayed batch is skipped
before any work. Concurrent writers are serialised by Delta's optimistic commits: the loser
of a race gets a commit conflict and re-runs its MERGE against the new version.

Runs wherever it is called (driver or executor); the object holds only the URI and storage
options, so it pickles.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from os import PathLike, fspath
from typing import Any, Final, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from atlasbus.dead_letters.record import DeadLetter, to_arrow
from atlasbus.dead_letters.schema import COLUMNS, DEAD_LETTER_SCHEMA
from atlasbus.errors import AtlasbusError

log = logging.getLogger("atlasbus.dead_letters")

MAX_COMMIT_ATTEMPTS: Final = 20
"""Attempts before a write gives up on a table other writers keep changing."""

_SAME_ID: Final = "t.dead_letter_id = s.dead_letter_id"

SUMMARY_BY: Final = ("topic", "stage", "reason")

_T = TypeVar("_T")


class DeadLetterTableError(AtlasbusError):
    """The dead-letter table is missing, has the wrong columns, or could not be written."""


class DeadLetterTable:
    """The dead-letter table at ``uri`` (a path or any URI delta-rs supports).

    ``storage_options`` are delta-rs's (for example ``AWS_REGION``); they are never logged.
    """

    def __init__(self, uri: str | PathLike[str], storage_options: Mapping[str, str] | None = None):
        self.uri = fspath(uri)
        self.storage_options = dict(storage_options) if storage_options else None

    def __repr__(self) -> str:
        return f"DeadLetterTable({self.uri!r})"

    # --- opening -------------------------------------------------------------------------------

    def exists(self) -> bool:
        return bool(DeltaTable.is_deltatable(self.uri, storage_options=self.storage_options))

    def open(self) -> DeltaTable:
        """The Delta table, checked to have the dead-letter columns; error if there is none."""
        try:
            table = DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            raise DeadLetterTableError(
                f"no dead-letter table at {self.uri!r}: it is created by the first dead letter "
                "written there; check the deadLetterTable option for a typo"
            ) from None
        self._check_columns(table)
        return table

    def create(self) -> DeltaTable:
        """Open the table, creating it with the contract's schema if it does not exist yet."""
        if not self.exists():
            try:
                DeltaTable.create(
                    self.uri,
                    DEAD_LETTER_SCHEMA,
                    mode="ignore",
                    name="atlasbus_dead_letters",
                    description="atlasbus dead letters: one row per entry or row not delivered",
                    storage_options=self.storage_options,
                )
                log.info("created dead-letter table %s", self.uri)
            except CommitFailedError:
                pass  # another writer created it first
        return self.open()

    def _check_columns(self, table: DeltaTable) -> None:
        have = set(table.schema().to_arrow().names)
        missing = [c for c in COLUMNS if c not in have]
        if missing:
            raise DeadLetterTableError(
                f"the Delta table at {self.uri!r} is not a dead-letter table: it lacks columns "
                f"{missing}; point deadLetterTable at a new path or an atlasbus dead-letter table"
            )

    # --- writing -------------------------------------------------------------------------------

    def append(
        self,
        records: Iterable[DeadLetter] | pa.Table,
        *,
        app_id: str | None = None,
        version: int | None = None,
    ) -> int:
        """Add the dead letters the table does not hold yet; return how many were added.

        With ``app_id`` and ``version`` (for example ``f"{query_id}/dead-letters"`` and the
        batch ID) a write whose version is not newer than the table's recorded one is skipped,
        and a successful write records it in the same commit.
        """
        if (app_id is None) != (version is None):
            raise ValueError("append needs app_id and version together, or neither")
        if version is not None and version < 0:
            raise ValueError(f"append version must be a non-negative integer, got {version}")
        data = _unique_ids(_as_table(records))
        if data.num_rows == 0:
            return 0
        properties = CommitProperties(
            app_transactions=[Transaction(app_id, version)]
            if app_id is not None and version is not None
            else None
        )

        def attempt() -> int:
            table = self.create()
            if app_id is not None and version is not None:
                done = table.transaction_version(app_id)
                if done is not None and done >= version:
                    log.info("dead letters of %s version %d already written", app_id, version)
                    return 0
            metrics = (
                table.merge(
                    data,
                    _SAME_ID,
                    source_alias="s",
                    target_alias="t",
                    commit_properties=properties,
                )
                .when_not_matched_insert_all()
                .execute()
            )
            return int(metrics["num_target_rows_inserted"])

        added = self._retry(attempt, "append")
        log.log(
            logging.INFO if added else logging.DEBUG,
            "dead-letter table %s: %d new of %d dead letters written",
            self.uri,
            added,
            data.num_rows,
        )
        return added

    def mark_replayed(
        self, ids: Sequence[str], entry_ids: Sequence[str], at: datetime | None = None
    ) -> int:
        """Record that dead letter ``ids[i]`` was re-published as entry ``entry_ids[i]``.

        Increments ``replay_count`` and sets ``last_replayed_at`` and ``last_replay_entry_id``.
        A row that already names that entry is left alone, so a retried call counts once.
        Returns the number of rows updated.
        """
        if len(ids) != len(entry_ids):
            raise ValueError(
                f"mark_replayed needs one entry ID per dead letter: {len(ids)} IDs, "
                f"{len(entry_ids)} entry IDs"
            )
        if not ids:
            return 0
        when = at or datetime.now(UTC)
        timestamp = DEAD_LETTER_SCHEMA.field("last_replayed_at").type
        source = pa.table(
            {
                "dead_letter_id": pa.array(ids, pa.string()),
                "last_replay_entry_id": pa.array(entry_ids, pa.string()),
                "last_replayed_at": pa.array([when] * len(ids), timestamp),
            }
        )

        def attempt() -> int:
            metrics = (
                self.open()
                .merge(source, _SAME_ID, source_alias="s", target_alias="t")
                .when_matched_update(
                    {
                        "replay_count": "t.replay_count + 1",
                        "last_replayed_at": "s.last_replayed_at",
                        "last_replay_entry_id": "s.last_replay_entry_id",
                    },
                    predicate="t.last_replay_entry_id IS NULL "
                    "OR t.last_replay_entry_id <> s.last_replay_entry_id",
                )
                .execute()
            )
            return int(metrics["num_target_rows_updated"])

        return self._retry(attempt, "mark_replayed")

    def _retry(self, attempt: Callable[[], _T], what: str) -> _T:
        """Run ``attempt`` again on a commit conflict, with jittered backoff."""
        for number in range(1, MAX_COMMIT_ATTEMPTS + 1):
            try:
                return attempt()
            except CommitFailedError as exc:
                if number == MAX_COMMIT_ATTEMPTS:
                    raise DeadLetterTableError(
                        f"dead-letter table {self.uri!r}: {what} still conflicted with other "
                        f"writers after {number} attempts: {exc}"
                    ) from exc
                log.debug("dead-letter table %s: %s conflicted (%s), retrying", self.uri, what, exc)
                time.sleep(min(2.0, 0.02 * 2**number) * random.uniform(0.5, 1.0))
        raise AssertionError("unreachable")

    # --- reading -------------------------------------------------------------------------------

    def to_arrow(self, filter: str | pc.Expression | None = None) -> pa.Table:
        """The dead letters, optionally filtered, as Arrow of exactly ``DEAD_LETTER_SCHEMA``.

        ``filter`` is either a SQL condition over the columns (``"stage = 'sink-publish'"``, as
        the command line's ``--where`` passes it) or a pyarrow compute expression.
        """
        sql = f"SELECT {', '.join(COLUMNS)} FROM dead_letters"
        if isinstance(filter, str):
            sql += f" WHERE {filter}"
        # DataFusion (Rust) rather than a pyarrow dataset scan: with the scan, runs that wrote
        # from several threads sometimes aborted at interpreter exit ("terminate called without
        # an active exception", cf. delta-rs#2184); none did in this form.
        reader = QueryBuilder().register("dead_letters", self.open()).execute(sql)
        data = _conform(pa.table(reader.read_all()))
        if data.num_rows == 0:  # one empty chunk, not none: pyspark's createDataFrame needs it
            return DEAD_LETTER_SCHEMA.empty_table()
        if filter is not None and not isinstance(filter, str):
            data = data.filter(filter)
        return data

    def to_pandas(self, filter: str | pc.Expression | None = None) -> Any:
        """The dead letters as a pandas DataFrame (``fields`` as lists of key/value pairs)."""
        return self.to_arrow(filter).to_pandas()

    def summary(
        self,
        by: Sequence[str] = SUMMARY_BY,
        freq: str | None = None,
        filter: str | pc.Expression | None = None,
    ) -> Any:
        """Counts of dead letters per ``by`` columns, and per ``freq`` window when given.

        ``freq`` is a pandas frequency (``"1h"``, ``"1D"``); windows start at
        ``window_start``. Columns: ``by``..., [``window_start``], ``count``,
        ``first_dead_lettered_at``, ``last_dead_lettered_at``; missing values form their own
        group, so every dead letter is counted.
        """
        unknown = [c for c in by if c not in COLUMNS]
        if unknown:
            raise ValueError(f"cannot summarise by {unknown}: valid columns are {list(COLUMNS)}")
        frame = self.to_arrow(filter).select(list(dict.fromkeys([*by, "dead_lettered_at"])))
        df = frame.to_pandas()
        keys = list(by)
        if freq is not None:
            df["window_start"] = df["dead_lettered_at"].dt.floor(freq)
            keys.append("window_start")
        if not keys:
            df["_all"] = 0
            keys = ["_all"]
        grouped = df.groupby(keys, dropna=False, sort=True)["dead_lettered_at"]
        result = grouped.agg(
            count="size", first_dead_lettered_at="min", last_dead_lettered_at="max"
        ).reset_index()
        return result.drop(columns=["_all"], errors="ignore")

    def version(self) -> int:
        return int(self.open().version())


def _as_table(records: Iterable[DeadLetter] | pa.Table) -> pa.Table:
    if isinstance(records, pa.Table):
        return _conform(records)
    return to_arrow(records)


def _conform(data: pa.Table) -> pa.Table:
    """``data`` with exactly the contract's columns, order and types."""
    missing = [c for c in COLUMNS if c not in data.column_names]
    if missing:
        raise ValueError(f"dead letters lack columns {missing}; expected {list(COLUMNS)}")
    return data.select(list(COLUMNS)).cast(DEAD_LETTER_SCHEMA)


def _unique_ids(data: pa.Table) -> pa.Table:
    """The first row of each ``dead_letter_id``: a MERGE source must not repeat a key."""
    ids = data.column("dead_letter_id")
    if pc.count_distinct(ids).as_py() == data.num_rows:
        return data
    seen: set[str] = set()
    keep = []
    for value in ids.to_pylist():
        keep.append(value not in seen)
        seen.add(value)
    return data.filter(pa.array(keep, pa.bool_()))
