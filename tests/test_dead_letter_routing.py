"""Dead-letter routing on real Redis, Spark and Delta tables: source, data loss, sink."""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis

from atlasbus.dead_letters import (
    DATA_LOSS,
    SINK_PUBLISH,
    SOURCE_DECODE,
    DeadLetterTable,
    dead_letter_id,
    sink_write_id,
)
from atlasbus.dead_letters.sink import SinkDeadLetters
from atlasbus.decoding.decoder import decode_envelope_page
from atlasbus.model.entry_id import EntryId
from atlasbus.options.sink import parse_sink_options
from atlasbus.publishing.publisher import Publisher, marker_key
from cases import MALFORMED, raw_map
from helpers import BatchCollector, envelope, publish, redis_major, stream_reader

pytestmark = pytest.mark.spark

# the decoder's reason code for each malformed kind of cases.MALFORMED
REASONS = {
    "payload not JSON": "invalid-json",
    "payload an array": "not-json-object",
    "payload a string": "not-json-object",
    "payload missing": "missing-field",
    "priority missing": "missing-field",
    "priority not numeric": "invalid-integer",
    "payload not UTF-8": "invalid-utf8",
    "tracing not JSON": "invalid-json",
    "tracing an array": "not-json-object",
    "metadata not JSON": "invalid-json",
    "delivery_attempts not integer": "invalid-integer",
    "enqueued_time not a number": "invalid-timestamp",
    "enqueued_time past year 9999": "invalid-timestamp",
}


def rows_by_id(table: DeadLetterTable) -> dict[str, dict[str, Any]]:
    return {row["dead_letter_id"]: row for row in table.to_arrow().to_pylist()}


def expected_error(entry_id: str, fields: dict[Any, Any]) -> str:
    """What the decoder says about the entry, exactly."""
    return _decoded_alone(entry_id, fields)[0]


def expected_reason(name: str, entry_id: str, fields: dict[Any, Any]) -> str:
    """The reason code: pinned here for the kinds listed in REASONS, else the decoder's."""
    return REASONS.get(name) or _decoded_alone(entry_id, fields)[1]


def _decoded_alone(entry_id: str, fields: dict[Any, Any]) -> tuple[str, str]:
    flat = []
    for key, value in fields.items():
        flat += [k.encode() if isinstance(k, str) else k for k in (key, value)]
    page = decode_envelope_page(
        [[entry_id.encode(), flat]], topic="t", stream="s", include_raw_fields=False
    )
    assert page.reasons is not None
    return str(page.batch.column("error")[0].as_py()), str(page.reasons[0])


class FailAfterReading(BatchCollector):
    """Reads the batch (so the source has run), then fails: the batch is not committed."""

    def __call__(self, frame: Any, batch_id: int) -> None:
        super().__call__(frame, batch_id)
        raise RuntimeError("downstream failed")


# --- source --------------------------------------------------------------------------------------


def test_source_sends_every_malformed_kind_to_the_table_once_across_a_replayed_batch(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    stream = f"{prefix}:t"
    good_ids = [r.xadd(stream, envelope("t", 0)).decode()]
    poison: dict[str, tuple[str, dict[Any, Any]]] = {}
    for name, fields, _ in MALFORMED:
        poison[name] = (r.xadd(stream, fields).decode(), fields)
        good_ids.append(r.xadd(stream, envelope("t", len(good_ids))).decode())
    table = DeadLetterTable(tmp_path / "dlq")
    checkpoint = str(tmp_path / "ck")

    def start(collector: BatchCollector) -> Any:
        frame = stream_reader(
            spark, redis_url, prefix, topics="t", deadLetterTable=str(tmp_path / "dlq")
        )
        return (
            frame.writeStream.queryName(f"poison_{prefix}")
            .foreachBatch(collector)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )

    failing = FailAfterReading()
    first = start(failing)
    with pytest.raises(Exception, match="downstream failed"):
        first.awaitTermination(300)
    assert [row["id"] for row in failing.rows] == good_ids  # good rows only, poison left out
    assert table.to_arrow().num_rows == len(MALFORMED)
    version = table.version()

    collector = BatchCollector()
    second = start(collector)  # the restart replays batch 0: same entries, same dead letters
    second.awaitTermination(300)
    assert [batch_id for batch_id, _ in collector.batches] == [0]
    assert [row["id"] for row in collector.rows] == good_ids
    assert all(row["error"] is None for row in collector.rows)
    assert table.version() == version  # the replay added nothing, not even an empty commit

    letters = rows_by_id(table)
    assert len(letters) == len(MALFORMED)
    for name, (entry_id, fields) in poison.items():
        letter = letters[dead_letter_id(SOURCE_DECODE, stream, entry_id)]
        assert (letter["stage"], letter["reason"]) == (
            SOURCE_DECODE,
            expected_reason(name, entry_id, fields),
        ), name
        assert letter["error"] == expected_error(entry_id, fields), name
        assert dict(letter["fields"]) == raw_map(fields), name
        assert (letter["topic"], letter["stream"], letter["entry_id"]) == ("t", stream, entry_id)
        assert (letter["query_id"], letter["query_name"], letter["batch_id"]) == (
            str(first.id),
            f"poison_{prefix}",
            0,
        ), name
        assert letter["replay_count"] == 0
    by_name = {
        name: letters[dead_letter_id(SOURCE_DECODE, stream, i)] for name, (i, _) in poison.items()
    }
    assert by_name["priority not numeric"]["payload"] == MALFORMED[5][1]["payload"]
    assert by_name["priority not numeric"]["priority"] is None
    assert by_name["payload missing"]["payload"] is None
    assert by_name["payload missing"]["priority"] == 1


def test_batch_read_routes_malformed_entries_without_a_query(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    stream = f"{prefix}:t"
    good = r.xadd(stream, envelope("t", 1)).decode()
    bad = r.xadd(stream, {"payload": "[1]", "priority": "1"}).decode()
    rows = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "t")
        .option("deadLetterTable", str(tmp_path / "dlq"))
        .load()
        .collect()
    )
    assert [row["id"] for row in rows] == [good]
    (letter,) = DeadLetterTable(tmp_path / "dlq").to_arrow().to_pylist()
    assert (letter["entry_id"], letter["reason"], letter["error"]) == (
        bad,
        "not-json-object",
        "field 'payload' is not a JSON object: '[1]'",
    )
    assert (letter["query_id"], letter["query_name"], letter["batch_id"]) == (None, None, None)


# --- data loss -----------------------------------------------------------------------------------


def test_each_lost_range_becomes_one_data_loss_dead_letter(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    stream = f"{prefix}:orders"
    first_ids = publish(r, prefix, "orders", 100)
    checkpoint = str(tmp_path / "ck")
    dlq = str(tmp_path / "dlq")

    def run() -> BatchCollector:
        collector = BatchCollector()
        query = (
            stream_reader(
                spark,
                redis_url,
                prefix,
                topics="orders",
                failOnDataLoss="false",
                deadLetterTable=dlq,
            )
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        return collector

    run()
    assert not DeadLetterTable(dlq).exists()  # nothing lost, nothing recorded

    unread = publish(r, prefix, "orders", 100, start=100)
    r.xtrim(stream, maxlen=40, approximate=False)  # the last-read entry and 60 unread ones go
    collector = run()
    assert [row["id"] for row in collector.rows] == unread[60:]
    upto = str(EntryId.parse(unread[60]).predecessor())
    (letter,) = DeadLetterTable(dlq).to_arrow().to_pylist()
    assert letter["dead_letter_id"] == dead_letter_id(DATA_LOSS, stream, first_ids[-1], upto)
    assert (letter["stage"], letter["reason"], letter["topic"], letter["stream"]) == (
        DATA_LOSS,
        "entries-removed",
        "orders",
        stream,
    )
    counted = "60 entries" if redis_major(r) >= 7 else "entries"  # 6.2 keeps no counts
    assert letter["error"] == (
        f"stream '{stream}': {counted} after {first_ids[-1]} up to {upto} were removed "
        "(trimmed or deleted) before the query read them"
    )
    assert (letter["entry_id"], dict(letter["fields"])) == (
        upto,
        {"after": first_ids[-1], "upto": upto},
    )
    assert letter["payload"] is None

    run()  # nothing new: still one dead letter
    assert DeadLetterTable(dlq).to_arrow().num_rows == 1


# --- sink ----------------------------------------------------------------------------------------

MIXED = [
    ('{"n": 0}', 1, "c0", {"k": "v"}),
    ('["a"]', 2, "c1", None),
    ('{"n": 2}', 3, "c2", None),
    ("{bad", 4, "c3", {"t": "1"}),
    (None, 5, "c4", None),
    ('{"n": 5}', 6, "c5", None),
    (json.dumps({"big": "x" * 500}), 7, "c6", None),
]
MIXED_SCHEMA = "payload string, priority int, correlation_id string, tracing map<string,string>"


def test_batch_sink_publishes_good_rows_and_records_the_others(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    dlq = tmp_path / "dlq"
    (
        spark.createDataFrame(MIXED, MIXED_SCHEMA)
        .coalesce(1)
        .write.format("atlasbus")
        .mode("append")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topic", "mix")
        .option("maxMessageBytes", "400")
        .option("deadLetterTable", str(dlq))
        .save()
    )
    published = [json.loads(f[b"payload"]) for _, f in r.xrange(f"{prefix}:mix")]
    assert published == [{"n": 0}, {"n": 2}, {"n": 5}]
    letters = sorted(DeadLetterTable(dlq).to_arrow().to_pylist(), key=lambda x: x["priority"])
    assert [
        (x["stage"], x["reason"], x["topic"], x["priority"], x["correlation_id"]) for x in letters
    ] == [
        (SINK_PUBLISH, "not-json-object", "mix", 2, "c1"),
        (SINK_PUBLISH, "invalid-json", "mix", 4, "c3"),
        (SINK_PUBLISH, "null-payload", "mix", 5, "c4"),
        (SINK_PUBLISH, "too-big", "mix", 7, "c6"),
    ]
    assert letters[0]["error"] == (
        "cannot publish row 1 (topic 'mix'): column 'payload' is not a JSON object (got a JSON "
        "array): '[\"a\"]'"
    )
    assert letters[2]["error"] == "cannot publish row 4 (topic 'mix'): column 'payload' is null"
    assert letters[3]["error"].startswith(
        "cannot publish row 6 (topic 'mix'): column 'payload' is too big: the message would be"
    )
    assert [x["payload"] for x in letters] == ['["a"]', "{bad", None, MIXED[6][0]]
    assert dict(letters[1]["fields"]) == {
        "priority": "4",
        "correlation_id": "c3",
        "tracing": '{"t":"1"}',
    }
    assert {x["query_id"] for x in letters} == {None}


def mixed_batch(start: int, stop: int, bad: set[int]) -> pa.RecordBatch:
    payloads = ["[0]" if n in bad else json.dumps({"n": n}) for n in range(start, stop)]
    return pa.record_batch({"payload": pa.array(payloads)})


def test_retried_sink_task_records_each_rejected_row_once_and_publishes_each_good_row_once(
    redis_url: str, r: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    dlq = str(tmp_path / "dlq")
    options = parse_sink_options(
        {"url": redis_url, "streamPrefix": prefix, "topic": "t", "deadLetterTable": dlq}
    )
    marker = marker_key(options, "wretry", 0)
    write_id = sink_write_id("wretry", None, 0)
    bad = {3, 1500, 2999}
    # attempt 1 publishes the first batch, then its executor is lost
    with (
        pytest.raises(RuntimeError),
        Publisher(options, marker=marker, rejects=SinkDeadLetters(dlq, write_id)) as attempt,
    ):
        attempt.publish(mixed_batch(0, 2000, bad))
        raise RuntimeError("executor lost")
    assert (attempt.published, attempt.dead_lettered) == (1998, 2)
    # attempt 2 sees the same rows, cut into batches differently
    with Publisher(options, marker=marker, rejects=SinkDeadLetters(dlq, write_id)) as retry:
        retry.publish(mixed_batch(0, 1000, bad))
        retry.publish(mixed_batch(1000, 3000, bad))
    assert (retry.skipped, retry.published, retry.dead_lettered) == (2000, 999, 1)
    numbers = Counter(json.loads(f[b"payload"])["n"] for _, f in r.xrange(f"{prefix}:t"))
    assert numbers == Counter(n for n in range(3000) if n not in bad)
    letters = DeadLetterTable(dlq).to_arrow().to_pylist()
    assert sorted(x["dead_letter_id"] for x in letters) == sorted(
        dead_letter_id(SINK_PUBLISH, write_id, row) for row in bad
    )
    # a third attempt that re-does everything without the marker adds no dead letter twice
    with Publisher(options, marker=None, rejects=SinkDeadLetters(dlq, write_id)) as again:
        again.publish(mixed_batch(0, 3000, bad))
    assert DeadLetterTable(dlq).to_arrow().num_rows == 3
    # not even as hidden duplicates: each rejected row is stored once
    assert DeadLetterTable(dlq).to_arrow(all_rows=True).num_rows == 3


def test_streaming_sink_names_query_and_batch_in_its_dead_letters(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    publish(r, prefix, "in", 10)
    dlq = str(tmp_path / "dlq")
    query = (
        stream_reader(spark, redis_url, prefix, topics="in")
        .selectExpr(
            "if(get_json_object(payload, '$.n') % 4 = 1, '[1]', payload) as payload",
            "'out' as topic",
        )
        .writeStream.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("deadLetterTable", dlq)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    assert sorted(json.loads(f[b"payload"])["n"] for _, f in r.xrange(f"{prefix}:out")) == [
        0,
        2,
        3,
        4,
        6,
        7,
        8,
    ]
    letters = DeadLetterTable(dlq).to_arrow().to_pylist()
    write_id = sink_write_id(str(query.id), 0, 0)
    assert sorted(x["dead_letter_id"] for x in letters) == sorted(
        dead_letter_id(SINK_PUBLISH, write_id, row) for row in (1, 5, 9)
    )
    assert {(x["query_id"], x["batch_id"], x["reason"]) for x in letters} == {
        (str(query.id), 0, "not-json-object")
    }


# --- cost: one plain append per task that met a bad entry ------------------------------------------


def test_two_hundred_batches_with_a_bad_entry_each_cost_one_commit_each_and_nothing_on_rerun(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """200 micro-batches' tasks (core reader), each meeting one malformed entry among 20."""
    from atlasbus.dead_letters import QueryContext
    from atlasbus.options.source import parse_source_options
    from atlasbus.planning.batch_plan import ReadRange
    from atlasbus.reading.range_reader import read_range

    stream, batches, per_batch = f"{prefix}:orders", 200, 20
    pipe = r.pipeline(transaction=False)
    for b in range(batches):
        for j in range(per_batch):
            fields = envelope("orders", b * per_batch + j)
            if j == 7:
                fields["priority"] = "not-a-number"
            pipe.xadd(stream, fields, id=f"{b + 1}-{j + 1}")
    pipe.execute()
    uri = tmp_path / "dlq"
    options = parse_source_options(
        {"url": redis_url, "streamPrefix": prefix, "topics": "orders", "deadLetterTable": str(uri)}
    )
    dlq = DeadLetterTable(uri)

    def task(b: int) -> int:
        """Batch b's one task: entries (b-0, (b+1)-max]; returns the good rows it passed on."""
        read = ReadRange(stream, "orders", EntryId(b, 2**63), EntryId(b + 1, 2**63))
        context = QueryContext("q-cost", "cost", b)
        return sum(batch.num_rows for batch in read_range(options, read, context=context))

    def version() -> int:
        return dlq.version() if dlq.exists() else -1

    seconds: list[float] = []
    for b in range(batches):
        before, started = version(), time.perf_counter()
        assert task(b) == per_batch - 1
        seconds.append(time.perf_counter() - started)
        assert version() - before == (2 if before == -1 else 1)  # creation + one append
    assert dlq.to_arrow(all_rows=True).num_rows == batches
    assert sorted(dlq.to_arrow().column("entry_id").to_pylist()) == sorted(
        f"{b + 1}-8" for b in range(batches)
    )
    # flat: the second hundred tasks cost about what the first did (one checkpoint cycle each;
    # the MERGE this replaced went from 24 to 116 ms per append over 60 commits)
    first, second = statistics.median(seconds[:100]), statistics.median(seconds[100:])
    print(f"median task: first 100 {first * 1000:.1f} ms, next 100 {second * 1000:.1f} ms")
    assert second < 3 * first, (first, second)

    # every task again (retries, a replayed query): no commit, no row
    settled = version()
    for b in range(batches):
        assert task(b) == per_batch - 1
    assert version() == settled
    assert dlq.to_arrow(all_rows=True).num_rows == batches


def test_pages_decoded_one_by_one_are_joined_into_batches_in_order(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """23,000 entries in pages of 1,000: batches of 10,000, 10,000 and 3,000 entries, each
    batch's malformed entries (on several of its pages) recorded in one append before it."""
    from atlasbus.dead_letters import QueryContext
    from atlasbus.options.source import parse_source_options
    from atlasbus.planning.batch_plan import ReadRange
    from atlasbus.reading.range_reader import TARGET_BATCH_ROWS, read_range

    stream, total = f"{prefix}:orders", 23_000
    bad = {i for i in range(1, total + 1) if i % 997 == 0 or i in (1, 10_000, 10_001, total)}
    pipe = r.pipeline(transaction=False)
    for i in range(1, total + 1):
        fields = envelope("orders", i)
        if i in bad:
            fields["priority"] = "not-a-number"
        pipe.xadd(stream, fields, id=f"{i}-0")
    pipe.execute()
    whole = ReadRange(stream, "orders", EntryId(0, 0), EntryId(2**63, 0))
    plain = {"url": redis_url, "streamPrefix": prefix, "topics": "orders", "pageSize": "1000"}
    assert TARGET_BATCH_ROWS == 10_000

    batches = list(read_range(parse_source_options(plain), whole))
    assert [b.num_rows for b in batches] == [10_000, 10_000, 3_000]
    rows = pa.Table.from_batches(batches)
    assert rows.column("id").to_pylist() == [f"{i}-0" for i in range(1, total + 1)]
    errors = rows.column("error").to_pylist()
    assert [i for i, error in enumerate(errors, 1) if error is not None] == sorted(bad)
    assert rows.column("priority").to_pylist() == [
        None if i in bad else i % 10 for i in range(1, total + 1)
    ]

    uri = tmp_path / "dlq"
    routed = parse_source_options({**plain, "deadLetterTable": str(uri)})
    dlq = DeadLetterTable(uri)
    versions: list[int] = []
    good: list[pa.RecordBatch] = []
    for batch in read_range(routed, whole, context=QueryContext("q", "pages", 0)):
        versions.append(dlq.version())  # the batch's letters are committed before it is seen
        good.append(batch)
    bounds = ((0, 10_000), (10_000, 20_000), (20_000, total))
    assert [b.num_rows for b in good] == [
        hi - lo - sum(1 for i in bad if lo < i <= hi) for lo, hi in bounds
    ]
    assert pa.Table.from_batches(good).column("id").to_pylist() == [
        f"{i}-0" for i in range(1, total + 1) if i not in bad
    ]
    assert versions == [1, 2, 3]  # version 0 creates the table; each batch appends once
    assert sorted(dlq.to_arrow().column("entry_id").to_pylist()) == sorted(f"{i}-0" for i in bad)
