"""The dead-letter table on Delta Lake, written and read with delta-rs (no JVM needed).

Appending is a plain Delta append: no MERGE, no scan of the table, so its cost does not grow
with the table (measured in docs/benchmarks.md). It is made idempotent by a Delta app
transaction (a ``txn`` action in the same commit): every append names its write with an
``app_id`` and a ``version``, checks ``DeltaTable.transaction_version(app_id)`` first, and
writes nothing when that version (or a later one) is recorded. Callers that know their query
and batch pass ``app_id``/``version`` (``f"{query_id}/processing"``, the batch ID; the sink
passes its task's write ID and row position); without them the ``app_id`` is a hash of the
dead letters' deterministic IDs and the version 0, so the same dead letters are never appended
twice, with or without a query (batch reads, the driver's data-loss letters).

Concurrency: two appends under different app IDs touch disjoint files and read nothing, so
delta-rs's conflict check lets both commit (it rebases the loser on the new version itself).
Two appends under the same app ID (a task and its speculative or zombie copy) conflict in
delta-rs ("concurrent transaction"); the loser re-checks the app transaction and adds
nothing. A row is thus written once per app ID. The same ``dead_letter_id`` can still reach
the table twice under two different app IDs (two queries reading the same bad entry, or a
checkpoint deleted and the entries read again); reads (``to_arrow``, ``to_pandas``,
``summary``, the command line, replay) show one row per ID, the first recorded.

Replay claims dead letters with a conditional MERGE before publishing them
(``claim_for_replay``), so two replays at once publish each dead letter once: see replay.py.

Runs wherever it is called (driver or executor); the object holds only the URI and storage
options, so it pickles.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from os import PathLike, fspath
from typing import Any, Final, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from atlasbus.dead_letters.record import DeadLetter, to_arrow
from atlasbus.dead_letters.schema import COLUMNS, DEAD_LETTER_SCHEMA
from atlasbus.errors import AtlasbusError
from atlasbus.option_names import named

log = logging.getLogger("atlasbus.dead_letters")

MAX_COMMIT_ATTEMPTS: Final = 20
"""Attempts before a write gives up on real conflicts (appends under different app IDs do not
conflict; a replay's MERGE does with a concurrent commit, and re-runs)."""

CONTENT_APP_ID_PREFIX: Final = "atlasbus/dead-letters/"

_SAME_ID: Final = "t.dead_letter_id = s.dead_letter_id"

SUMMARY_BY: Final = ("topic", "stage", "reason")

_T = TypeVar("_T")


class DeadLetterTableError(AtlasbusError):
    """The dead-letter table is missing, has the wrong columns, or could not be written."""


class DeadLetterTable:
    """The dead-letter table at ``uri`` (a path or any URI delta-rs supports).

    ``storage_options`` are delta-rs's (for example ``AWS_REGION``); they are never logged.
    ``version`` opens the table as it was at that Delta version (time travel, for reading).
    """

    def __init__(
        self,
        uri: str | PathLike[str],
        storage_options: Mapping[str, str] | None = None,
        *,
        version: int | None = None,
    ):
        self.uri = fspath(uri)
        self.storage_options = dict(storage_options) if storage_options else None
        self.at_version = version

    def __repr__(self) -> str:
        return f"DeadLetterTable({self.uri!r})"

    # --- opening -------------------------------------------------------------------------------

    def exists(self) -> bool:
        return bool(DeltaTable.is_deltatable(self.uri, storage_options=self.storage_options))

    def open(self) -> DeltaTable:
        """The Delta table, checked to have the dead-letter columns; error if there is none."""
        try:
            table = DeltaTable(
                self.uri, version=self.at_version, storage_options=self.storage_options
            )
        except TableNotFoundError:
            raise DeadLetterTableError(
                f"no dead-letter table at {self.uri!r}: it is created by the first dead letter "
                f"written there; check {named('dead letter table')} for a typo"
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
                f"{missing}; {named('where to point the dead letter table')}"
            )

    # --- writing -------------------------------------------------------------------------------

    def append(
        self,
        records: Iterable[DeadLetter] | pa.Table,
        *,
        app_id: str | None = None,
        version: int | None = None,
    ) -> int:
        """Append the dead letters in one commit, unless this write is already recorded.

        The write is named by ``app_id`` and ``version`` (for example
        ``f"{query_id}/processing"`` and the batch ID): when the table records that app ID at
        ``version`` or later, nothing is written. Without them the app ID is a hash of the
        letters' IDs (``content_app_id``) and the version 0. Returns the rows written (0 when
        skipped); an empty append makes no commit.
        """
        if (app_id is None) != (version is None):
            raise ValueError("append needs app_id and version together, or neither")
        if version is not None and version < 0:
            raise ValueError(f"append version must be a non-negative integer, got {version}")
        data = _unique_ids(_as_table(records))
        if data.num_rows == 0:
            return 0
        if app_id is None or version is None:
            app_id, version = content_app_id(data.column("dead_letter_id").to_pylist()), 0
        name, at = app_id, version
        properties = CommitProperties(app_transactions=[Transaction(name, at)])

        def attempt() -> int:
            table = self.create()
            done = table.transaction_version(name)
            if done is not None and done >= at:
                log.info("dead letters of %s version %d already written", name, at)
                return 0
            write_deltalake(table, data, mode="append", commit_properties=properties)
            return int(data.num_rows)

        added = self._retry(attempt, "append")
        log.log(
            logging.INFO if added else logging.DEBUG,
            "dead-letter table %s: %d dead letter(s) written (%s, version %d)",
            self.uri,
            added,
            name,
            at,
        )
        return added

    def claim_for_replay(
        self,
        expected: Mapping[str, int],
        claim: str,
        at: datetime | None = None,
        *,
        not_after: datetime | None = None,
    ) -> list[str]:
        """Claim dead letters for one replay run; return the IDs this call claimed.

        ``expected`` maps each dead letter ID to the ``replay_count`` the caller read. In one
        conditional MERGE, every row of those IDs whose ``replay_count`` is still that value
        gets ``replay_count + 1``, ``last_replayed_at`` and ``last_replay_entry_id = claim``
        (``claim`` is unique to the run, see replay.py). Two runs claiming the same row
        rewrite the same file, so Delta lets only one commit; the other re-runs its MERGE on
        the new version, where the count no longer matches. A row is therefore claimed by
        exactly one run, whatever the timing.

        ``not_after`` (the latest ``dead_lettered_at`` among the rows to claim) narrows what
        the MERGE reads, so files appended meanwhile by executors (dead letters recorded after
        the caller read the table) are outside it and do not make the claim conflict.
        """
        if not expected:
            return []
        when = at or datetime.now(UTC)
        timestamp = DEAD_LETTER_SCHEMA.field("last_replayed_at").type
        source = pa.table(
            {
                "dead_letter_id": pa.array(list(expected), pa.string()),
                "expected_count": pa.array(list(expected.values()), pa.int32()),
                "claim": pa.array([claim] * len(expected), pa.string()),
                "claimed_at": pa.array([when] * len(expected), timestamp),
            }
        )

        same = _SAME_ID
        if not_after is not None:
            same += f" AND t.dead_lettered_at <= '{_sql_timestamp(not_after)}'"

        def attempt() -> list[str]:
            table = self.open()
            (
                table.merge(source, same, source_alias="s", target_alias="t")
                .when_matched_update(
                    {
                        "replay_count": "t.replay_count + 1",
                        "last_replayed_at": "s.claimed_at",
                        "last_replay_entry_id": "s.claim",
                    },
                    predicate="t.replay_count = s.expected_count",
                )
                .execute()
            )
            # the table object is now at our commit (or unchanged if nothing matched): rows
            # naming our claim are ours, since no other run can write our claim
            return _ids_where(table, "last_replay_entry_id", claim)

        return self._retry(attempt, "claim_for_replay")

    def finish_replay(
        self,
        ids: Sequence[str],
        entry_ids: Sequence[str],
        claim: str,
        at: datetime | None = None,
        *,
        not_after: datetime | None = None,
    ) -> int:
        """Record the entries a replay run published for the rows it claimed with ``claim``.

        Sets ``last_replay_entry_id`` (and ``last_replayed_at``) on the rows of ``ids[i]``
        still holding ``claim``; ``replay_count`` was already counted by the claim. A retried
        call changes nothing more. Returns the rows updated.
        """
        source = _replayed_rows("finish_replay", ids, entry_ids, at, claim=claim)
        if source is None:
            return 0

        same = _SAME_ID
        if not_after is not None:  # as in claim_for_replay: not conflicting with appends
            same += f" AND t.dead_lettered_at <= '{_sql_timestamp(not_after)}'"

        def attempt() -> int:
            metrics = (
                self.open()
                .merge(source, same, source_alias="s", target_alias="t")
                .when_matched_update(
                    {
                        "last_replayed_at": "s.last_replayed_at",
                        "last_replay_entry_id": "s.last_replay_entry_id",
                    },
                    predicate="t.last_replay_entry_id = s.claim",
                )
                .execute()
            )
            return int(metrics["num_target_rows_updated"])

        return self._retry(attempt, "finish_replay")

    def mark_replayed(
        self, ids: Sequence[str], entry_ids: Sequence[str], at: datetime | None = None
    ) -> int:
        """Record that dead letter ``ids[i]`` was re-published as entry ``entry_ids[i]``.

        Increments ``replay_count`` and sets ``last_replayed_at`` and ``last_replay_entry_id``.
        A row that already names that entry is left alone, so a retried call counts once.
        Returns the number of rows updated. (``replay_dead_letters`` claims first and uses
        ``claim_for_replay``/``finish_replay``; this is for code that publishes by itself.)
        """
        source = _replayed_rows("mark_replayed", ids, entry_ids, at)
        if source is None:
            return 0

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
        """Run ``attempt`` again on a commit conflict, with jittered backoff.

        An append meets one only against a concurrent commit under its own app ID (it then
        finds the app transaction recorded and writes nothing); a MERGE (replay) meets one
        whenever another commit landed while it ran, and re-runs on the new version.
        """
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

    def to_arrow(
        self, filter: str | pc.Expression | None = None, *, all_rows: bool = False
    ) -> pa.Table:
        """The dead letters, optionally filtered, as Arrow of exactly ``DEAD_LETTER_SCHEMA``.

        ``filter`` is either a SQL condition over the columns (``"stage = 'sink-publish'"``, as
        the command line's ``--where`` passes it) or a pyarrow compute expression. One row per
        ``dead_letter_id`` (the first recorded) unless ``all_rows``: the table holds an ID
        twice only when two writers under different app IDs recorded it (module docstring).
        """
        columns = ", ".join(COLUMNS)
        if all_rows:
            sql = f"SELECT {columns} FROM dead_letters"
            if isinstance(filter, str):
                sql += f" WHERE {filter}"
        else:
            sql = (
                f"SELECT {columns} FROM (SELECT {columns}, row_number() OVER (PARTITION BY "
                "dead_letter_id ORDER BY dead_lettered_at, query_id, batch_id) AS _atlasbus_n "
                "FROM dead_letters) WHERE _atlasbus_n = 1"
            )
            if isinstance(filter, str):
                sql += f" AND ({filter})"
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
        nested = [c for c in by if pa.types.is_nested(DEAD_LETTER_SCHEMA.field(c).type)]
        if nested:
            groupable = [
                c for c in COLUMNS if not pa.types.is_nested(DEAD_LETTER_SCHEMA.field(c).type)
            ]
            raise ValueError(
                f"cannot summarise by {nested}: they hold maps or lists; group by columns of "
                f"single values: {groupable}"
            )
        repeated = sorted({c for c in by if list(by).count(c) > 1})
        if repeated:
            raise ValueError(f"cannot summarise by {repeated} twice: name each column once")
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


def content_app_id(ids: Iterable[str]) -> str:
    """The app ID of an append that names no write: a hash of its dead letters' sorted IDs."""
    digest = hashlib.sha256("\n".join(sorted(set(ids))).encode()).hexdigest()
    return CONTENT_APP_ID_PREFIX + digest


def _sql_timestamp(when: datetime) -> str:
    """A UTC timestamp literal DataFusion compares with the ``timestamp`` columns."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ids_where(table: DeltaTable, column: str, value: str) -> list[str]:
    """The distinct dead letter IDs of the rows of ``table`` (as loaded) where column = value."""
    quoted = value.replace("'", "''")
    sql = (
        f"SELECT DISTINCT dead_letter_id FROM dead_letters WHERE {column} = '{quoted}' "
        "ORDER BY dead_letter_id"
    )
    reader = QueryBuilder().register("dead_letters", table).execute(sql)
    return [str(v) for v in pa.table(reader.read_all()).column("dead_letter_id").to_pylist()]


def _replayed_rows(
    what: str,
    ids: Sequence[str],
    entry_ids: Sequence[str],
    at: datetime | None,
    *,
    claim: str | None = None,
) -> pa.Table | None:
    """The MERGE source recording that ``ids[i]`` was published as ``entry_ids[i]``."""
    if len(ids) != len(entry_ids):
        raise ValueError(
            f"{what} needs one entry ID per dead letter: {len(ids)} IDs, {len(entry_ids)} entry IDs"
        )
    if not ids:
        return None
    when = at or datetime.now(UTC)
    timestamp = DEAD_LETTER_SCHEMA.field("last_replayed_at").type
    columns = {
        "dead_letter_id": pa.array(ids, pa.string()),
        "last_replay_entry_id": pa.array(entry_ids, pa.string()),
        "last_replayed_at": pa.array([when] * len(ids), timestamp),
    }
    if claim is not None:
        columns["claim"] = pa.array([claim] * len(ids), pa.string())
    return pa.table(columns)


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
    """The first row of each ``dead_letter_id``: one append records an ID once."""
    ids = data.column("dead_letter_id")
    if pc.count_distinct(ids).as_py() == data.num_rows:
        return data
    seen: set[str] = set()
    keep = []
    for value in ids.to_pylist():
        keep.append(value not in seen)
        seen.add(value)
    return data.filter(pa.array(keep, pa.bool_()))
