"""The dead-letter table on real Delta tables (delta-rs, under tmp_path); no Spark needed."""

from __future__ import annotations

import hashlib
import logging
import pickle
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import redis
from deltalake import DeltaTable, write_deltalake

from atlasbus.dead_letters import (
    COLUMNS,
    DATA_LOSS,
    DEAD_LETTER_SCHEMA,
    PROCESSING,
    SINK_PUBLISH,
    SOURCE_DECODE,
    DeadLetter,
    DeadLetterTable,
    DeadLetterTableError,
    QueryContext,
    dead_letter_id,
    sink_write_id,
    split_decoded,
)
from atlasbus.dead_letters.sink import rejected_rows
from atlasbus.decoding.decoder import decode_envelopes
from atlasbus.model.conversions import int32_or_none, text_or_none
from atlasbus.publishing.encoder import Rejection

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def entry_letter(
    entry_id: str, *, stream: str = "atlas_bus:orders", at: datetime = T0, reason: str = "bad"
) -> DeadLetter:
    return DeadLetter.for_entry(
        SOURCE_DECODE,
        reason,
        "missing field 'payload'",
        stream=stream,
        entry_id=entry_id,
        topic=stream.rsplit(":", 1)[-1],
        fields={"priority": "5"},
        context=QueryContext("q-1", "orders-to-lake", 3),
        at=at,
    )


def ids_of(table: DeadLetterTable) -> list[str]:
    return sorted(table.to_arrow().column("dead_letter_id").to_pylist())


@pytest.fixture
def dlq(tmp_path: Path) -> DeadLetterTable:
    return DeadLetterTable(tmp_path / "dead_letters")


# --- creation and schema -------------------------------------------------------------------------


def test_created_on_first_append_with_the_contract_schema(dlq: DeadLetterTable) -> None:
    assert not dlq.exists()
    assert dlq.append([entry_letter("1-0")]) == 1
    assert dlq.exists()
    stored = pa.schema(DeltaTable(dlq.uri).schema().to_arrow())  # as the Delta log has it
    assert stored.names == list(COLUMNS)
    assert stored.equals(DEAD_LETTER_SCHEMA)  # types and nullability, column by column
    assert dlq.to_arrow().schema.equals(DEAD_LETTER_SCHEMA)
    assert DEAD_LETTER_SCHEMA.field("fields").type == pa.map_(pa.string(), pa.string())
    assert DEAD_LETTER_SCHEMA.field("dead_lettered_at").type == pa.timestamp("us", tz="UTC")
    assert DEAD_LETTER_SCHEMA.field("batch_id").type == pa.int64()


def test_create_is_idempotent_and_reading_a_missing_table_names_it(
    dlq: DeadLetterTable,
) -> None:
    with pytest.raises(DeadLetterTableError, match=r"no dead-letter table at .*dead_letters"):
        dlq.to_arrow()
    dlq.create()
    dlq.create()
    assert dlq.version() == 0
    assert dlq.to_arrow().num_rows == 0


def test_the_table_object_pickles_for_executors(tmp_path: Path) -> None:
    table = DeadLetterTable(tmp_path / "t", storage_options={"AWS_REGION": "eu-west-1"})
    copy = pickle.loads(pickle.dumps(table))
    assert (copy.uri, copy.storage_options) == (table.uri, table.storage_options)


def test_a_delta_table_with_other_columns_is_refused(tmp_path: Path) -> None:
    write_deltalake(tmp_path / "other", pa.table({"x": [1]}))
    with pytest.raises(DeadLetterTableError, match=r"lacks columns \['dead_letter_id'"):
        DeadLetterTable(tmp_path / "other").append([entry_letter("1-0")])


def test_protocol_stays_readable_by_delta_spark_4(dlq: DeadLetterTable) -> None:
    """delta-spark 4.x reads reader <= 3 and writes writer <= 7; we keep to the legacy (1, 2)
    with no table features, which every delta-spark since 1.0 handles, through every operation."""
    letter = entry_letter("1-0")
    dlq.append([letter], app_id="q-1/dead-letters", version=0)
    dlq.mark_replayed([letter.dead_letter_id], ["9-0"])
    protocol = dlq.open().protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    assert protocol.reader_features is None
    assert protocol.writer_features is None
    config = dlq.open().metadata().configuration
    assert not any(
        k.startswith(("delta.columnMapping", "delta.enableDeletionVectors")) for k in config
    )


# --- the ID rule ---------------------------------------------------------------------------------


def test_ids_follow_the_documented_rule() -> None:
    def sha(*parts: str) -> str:
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()

    assert entry_letter("5-1").dead_letter_id == sha(SOURCE_DECODE, "atlas_bus:orders", "5-1")
    write_id = sink_write_id("q-1", 7, 2)
    row = DeadLetter.for_row("too-big", "x", write_id=write_id, row=4)
    assert row.stage == SINK_PUBLISH
    assert row.dead_letter_id == sha(SINK_PUBLISH, "q-1/7/2", "4")
    lost = DeadLetter.for_data_loss(stream="atlas_bus:orders", after="1-0", upto="9-3")
    assert lost.dead_letter_id == sha(DATA_LOSS, "atlas_bus:orders", "1-0", "9-3")
    assert lost.entry_id == "9-3" and lost.fields == {"after": "1-0", "upto": "9-3"}
    # time and query are not part of the identity: a retry on another day is the same letter
    later = entry_letter("5-1", at=T0 + timedelta(days=1))
    assert later.dead_letter_id == entry_letter("5-1").dead_letter_id
    assert dead_letter_id(PROCESSING, "s", "5-1") != dead_letter_id(SOURCE_DECODE, "s", "5-1")


def test_unknown_stage_is_refused_with_the_valid_ones() -> None:
    with pytest.raises(
        ValueError, match=r"'decode' is not a valid dead-letter stage.*source-decode"
    ):
        dead_letter_id("decode", "s", "1-0")  # type: ignore[arg-type]


# --- idempotent appends --------------------------------------------------------------------------


def test_the_same_dead_letters_twice_are_recorded_once(dlq: DeadLetterTable) -> None:
    first = [entry_letter(f"1-{i}") for i in range(3)]
    assert dlq.append(first) == 3
    version = dlq.version()
    retried = [entry_letter(f"1-{i}", at=T0 + timedelta(minutes=5)) for i in range(3)]
    assert dlq.append(retried) == 0
    assert dlq.version() == version  # nothing new: no commit at all
    assert ids_of(dlq) == sorted(d.dead_letter_id for d in first)
    assert set(dlq.to_arrow().column("dead_lettered_at").to_pylist()) == {T0}  # first one kept
    # another set (another writer meeting the same entries and a new one): a new append, and
    # reads still show one row per dead letter, the first recorded
    assert dlq.append([*retried, entry_letter("1-3")]) == 4
    assert dlq.to_arrow().num_rows == 4
    assert dlq.to_arrow(all_rows=True).num_rows == 7
    first_ids = {d.dead_letter_id for d in first}
    kept = dlq.to_arrow().to_pylist()
    assert {r["dead_lettered_at"] for r in kept if r["dead_letter_id"] in first_ids} == {T0}


def test_repeats_within_one_append_are_recorded_once(dlq: DeadLetterTable) -> None:
    assert dlq.append([entry_letter("1-0"), entry_letter("1-0"), entry_letter("1-1")]) == 2
    assert dlq.to_arrow().num_rows == 2


def test_a_replayed_batch_is_skipped_by_its_app_transaction(dlq: DeadLetterTable) -> None:
    app_id = "q-1/dead-letters"
    assert dlq.append([entry_letter("1-0")], app_id=app_id, version=7) == 1
    version = dlq.version()
    assert DeltaTable(dlq.uri).transaction_version(app_id) == 7
    # a replay of batch 7 (even with different rows) and an older batch add nothing, no commit
    assert dlq.append([entry_letter("2-0")], app_id=app_id, version=7) == 0
    assert dlq.append([entry_letter("2-0")], app_id=app_id, version=6) == 0
    assert dlq.version() == version
    # another query's transactions are its own
    assert dlq.append([entry_letter("2-0")], app_id="q-2/dead-letters", version=7) == 1
    assert dlq.append([entry_letter("3-0")], app_id=app_id, version=8) == 1
    assert DeltaTable(dlq.uri).transaction_version(app_id) == 8
    assert dlq.to_arrow().num_rows == 3


def test_app_id_and_version_go_together(dlq: DeadLetterTable) -> None:
    with pytest.raises(ValueError, match="app_id and version together"):
        dlq.append([entry_letter("1-0")], app_id="q")
    with pytest.raises(ValueError, match="non-negative"):
        dlq.append([entry_letter("1-0")], app_id="q", version=-1)


def _raw_page(r: redis.Redis, stream: str) -> list[list[object]]:
    """An XRANGE reply in the shape the source decodes: [id, [field, value, ...]] as bytes."""
    return [[eid, [x for kv in fields.items() for x in kv]] for eid, fields in r.xrange(stream)]


def test_poison_entries_are_recorded_once_even_after_a_replayed_batch(
    r: redis.Redis, prefix: str, dlq: DeadLetterTable
) -> None:
    stream = f"{prefix}:orders"
    r.xadd(stream, {"topic": "orders", "priority": "1", "payload": '{"n": 1}'}, id="1-0")
    r.xadd(stream, {"topic": "orders", "priority": "x", "payload": '{"n": 2}'}, id="2-0")
    r.xadd(stream, {"topic": "orders", "priority": "3"}, id="3-0")
    r.xadd(stream, {"topic": "orders", "priority": "4", "payload": '{"n": 4}'}, id="4-0")

    def run_batch(context: QueryContext, *, app_id: str | None) -> tuple[pa.RecordBatch, int]:
        page = decode_envelopes(
            _raw_page(r, stream), topic="orders", stream=stream, include_raw_fields=False
        )
        good, letters = split_decoded(page, context=context)
        version = context.batch_id if app_id is not None else None
        return good, dlq.append(letters, app_id=app_id, version=version)

    context = QueryContext("q-1", "orders", 0)
    good, added = run_batch(context, app_id=None)  # as the source does: keyed by the letters
    assert good.column("id").to_pylist() == ["1-0", "4-0"]
    assert added == 2
    _, added_on_replay = run_batch(context, app_id=None)  # same batch after a crash
    _, added_new_query = run_batch(QueryContext("q-2", "orders", 0), app_id=None)  # new checkpoint
    assert (added_on_replay, added_new_query) == (0, 0)

    rows = sorted(dlq.to_arrow().to_pylist(), key=lambda row: row["entry_id"])
    assert [(x["entry_id"], x["stage"], x["reason"], x["query_id"]) for x in rows] == [
        ("2-0", SOURCE_DECODE, "malformed-entry", "q-1"),
        ("3-0", SOURCE_DECODE, "malformed-entry", "q-1"),
    ]
    assert rows[0]["payload"] == '{"n": 2}' and rows[0]["priority"] is None
    assert "priority" in rows[0]["error"]
    assert dict(rows[1]["fields"]) == {"topic": "orders", "priority": "3"}
    assert rows[1]["priority"] == 3 and "payload" in rows[1]["error"]
    assert rows[1]["topic"] == "orders" and rows[1]["stream"] == stream


def test_sink_dead_letters_are_recorded_once_when_a_task_is_retried(dlq: DeadLetterTable) -> None:
    context = QueryContext("q-1", "publish", 12)

    def task(partition_id: int, rows: Sequence[str], at: datetime) -> int:
        write_id = sink_write_id(context.query_id, context.batch_id, partition_id)
        letters = [
            DeadLetter.for_row(
                "message-too-large",
                "payload is 300000 bytes, maxMessageBytes is 262144",
                write_id=write_id,
                row=position,
                topic="orders",
                payload=payload,
                context=context,
                at=at,
            )
            for position, payload in enumerate(rows)
        ]
        return dlq.append(letters)

    assert task(0, ['{"a": 1}', '{"a": 2}'], T0) == 2
    assert task(0, ['{"a": 1}', '{"a": 2}'], T0 + timedelta(seconds=30)) == 0  # the retry
    assert task(1, ['{"a": 1}'], T0) == 1  # another partition's row is another dead letter
    table = dlq.to_arrow()
    assert table.num_rows == 3
    assert set(table.column("stage").to_pylist()) == {SINK_PUBLISH}
    assert set(table.column("batch_id").to_pylist()) == {12}


# --- concurrent writers --------------------------------------------------------------------------


def test_concurrent_appends_from_two_writers_lose_and_duplicate_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Appends under different app IDs never conflict: delta-rs rebases the later one itself."""
    caplog.set_level(logging.DEBUG, logger="atlasbus.dead_letters")
    uri = tmp_path / "dead_letters"  # not created yet: both writers race to create it too
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def writer(offset: int) -> None:
        table = DeadLetterTable(uri)  # each writer its own object, as on two executors
        try:
            start.wait()
            for batch in range(6):  # ids overlap between the writers by half
                table.append([entry_letter(f"{batch}-{j}") for j in range(offset, offset + 4)])
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(k * 2,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    expected = sorted(entry_letter(f"{b}-{j}").dead_letter_id for b in range(6) for j in range(6))
    assert ids_of(DeadLetterTable(uri)) == expected
    # no append conflicted with the other writer's appends; only racing to create the table
    # can (an append planned on the other writer's fresh table sees its metadata commit)
    conflicts = [m for m in caplog.messages if "conflicted" in m]
    assert len(conflicts) <= 1 and all("Metadata changed" in m for m in conflicts), conflicts
    # one commit per append, after the creation; racing creators sometimes both commit the
    # schema (delta-rs's create with mode="ignore"), which is harmless
    assert DeadLetterTable(uri).version() in (12, 13)


# --- reading -------------------------------------------------------------------------------------


@pytest.fixture
def filled(dlq: DeadLetterTable) -> DeadLetterTable:
    letters = [
        entry_letter("1-0", stream="atlas_bus:orders", at=T0, reason="malformed-entry"),
        entry_letter(
            "2-0",
            stream="atlas_bus:orders",
            at=T0 + timedelta(minutes=10),
            reason="malformed-entry",
        ),
        entry_letter(
            "3-0",
            stream="atlas_bus:orders",
            at=T0 + timedelta(hours=1, minutes=5),
            reason="malformed-entry",
        ),
        entry_letter(
            "1-0",
            stream="atlas_bus:payments",
            at=T0 + timedelta(minutes=20),
            reason="malformed-entry",
        ),
        DeadLetter.for_row(
            "message-too-large", "too big", write_id="w", row=0, topic="orders", at=T0
        ),
        DeadLetter.for_data_loss(
            stream="atlas_bus:orders", after="3-0", upto="7-0", at=T0 + timedelta(hours=2)
        ),
    ]
    dlq.append(letters)
    return dlq


def test_summary_counts_by_topic_stage_and_reason(filled: DeadLetterTable) -> None:
    summary = filled.summary()
    assert list(summary.columns) == [
        "topic",
        "stage",
        "reason",
        "count",
        "first_dead_lettered_at",
        "last_dead_lettered_at",
    ]
    counts = {
        (row.topic if isinstance(row.topic, str) else None, row.stage, row.reason): row.count
        for row in summary.itertuples()
    }
    assert counts == {
        ("orders", SOURCE_DECODE, "malformed-entry"): 3,
        ("orders", SINK_PUBLISH, "message-too-large"): 1,
        ("payments", SOURCE_DECODE, "malformed-entry"): 1,
        (None, DATA_LOSS, "entries-removed"): 1,  # no topic is a group too: all are counted
    }
    orders = summary[(summary.topic == "orders") & (summary.stage == SOURCE_DECODE)].iloc[0]
    assert orders.first_dead_lettered_at == T0
    assert orders.last_dead_lettered_at == T0 + timedelta(hours=1, minutes=5)


def test_summary_over_time_windows(filled: DeadLetterTable) -> None:
    summary = filled.summary(by=("stage",), freq="1h")
    assert [(row.stage, row.window_start, row.count) for row in summary.itertuples()] == [
        (DATA_LOSS, T0 + timedelta(hours=2), 1),
        (SINK_PUBLISH, T0, 1),
        (SOURCE_DECODE, T0, 3),
        (SOURCE_DECODE, T0 + timedelta(hours=1), 1),
    ]
    assert filled.summary(by=()).iloc[0]["count"] == 6
    with pytest.raises(ValueError, match=r"cannot summarise by \['topc'\]"):
        filled.summary(by=("topc",))


def test_filters_as_sql_or_arrow_expressions(filled: DeadLetterTable) -> None:
    sql = filled.to_arrow("stage = 'source-decode' AND topic = 'orders'")
    expr = filled.to_arrow((pc.field("stage") == SOURCE_DECODE) & (pc.field("topic") == "orders"))
    assert sorted(sql.column("entry_id").to_pylist()) == ["1-0", "2-0", "3-0"]
    assert sql.schema == expr.schema == DEAD_LETTER_SCHEMA
    assert sorted(expr.column("entry_id").to_pylist()) == ["1-0", "2-0", "3-0"]


def test_pandas_view(filled: DeadLetterTable) -> None:
    df = filled.to_pandas("stage = 'data-loss'")
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == 1
    row = df.iloc[0]
    assert (row.stream, row.entry_id, row.reason) == ("atlas_bus:orders", "7-0", "entries-removed")
    assert dict(row.fields) == {"after": "3-0", "upto": "7-0"}
    assert row.dead_lettered_at == T0 + timedelta(hours=2)
    assert row.replay_count == 0


# --- replay bookkeeping --------------------------------------------------------------------------


def test_mark_replayed_counts_each_replay_once(dlq: DeadLetterTable) -> None:
    a, b = entry_letter("1-0"), entry_letter("2-0")
    dlq.append([a, b])
    t1, t2 = T0 + timedelta(days=1), T0 + timedelta(days=2)
    assert dlq.mark_replayed([a.dead_letter_id], ["100-0"], t1) == 1
    assert dlq.mark_replayed([a.dead_letter_id], ["100-0"], t2) == 0  # a retried call
    assert dlq.mark_replayed([a.dead_letter_id, b.dead_letter_id], ["200-0", "200-1"], t2) == 2
    rows = {x["entry_id"]: x for x in dlq.to_arrow().to_pylist()}
    assert (rows["1-0"]["replay_count"], rows["1-0"]["last_replayed_at"]) == (2, t2)
    assert rows["1-0"]["last_replay_entry_id"] == "200-0"
    assert (rows["2-0"]["replay_count"], rows["2-0"]["last_replay_entry_id"]) == (1, "200-1")
    assert dlq.mark_replayed(["no-such-id"], ["300-0"]) == 0
    with pytest.raises(ValueError, match="one entry ID per dead letter: 1 IDs, 2 entry IDs"):
        dlq.mark_replayed(["x"], ["1-0", "2-0"])


# --- the columns a dead letter makes of loose values ---------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (5, 5),
        ("7", 7),
        (" -3 ", -3),
        ("high", None),
        ("", None),
        (2**31 - 1, 2**31 - 1),
        (2**31, None),
        (str(-(2**31)), -(2**31)),
        (-(2**31) - 1, None),
        ([1], None),
    ],
)
def test_int32_or_none(value: object, expected: int | None) -> None:
    assert int32_or_none(value) == expected


def test_text_or_none() -> None:
    assert (text_or_none(None), text_or_none("a"), text_or_none(3)) == (None, "a", "3")


def test_sink_dead_letters_keep_out_of_range_counts_in_fields_only() -> None:
    batch = pa.record_batch(
        {
            "topic": pa.array(["orders", "orders"]),
            "payload": pa.array([{"n": 1}, {"n": 2}], pa.struct([("n", pa.int64())])),
            "priority": pa.array([3, 4], pa.int32()),
            "delivery_attempts": pa.array([1, 2**40], pa.int64()),
        }
    )
    rejections = [Rejection(row=11, topic="orders", column="payload", reason="is too big")]
    (letter,) = rejected_rows(
        batch, rejections, row_base=10, write_id="w/1/0", context=QueryContext("q", None, 1), at=T0
    )
    assert (letter.priority, letter.delivery_attempts, letter.payload) == (4, None, '{"n":2}')
    assert letter.fields == {"topic": "orders", "priority": "4", "delivery_attempts": str(2**40)}
