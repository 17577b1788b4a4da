"""delta-spark and delta-rs on one dead-letter table: real Spark with the Delta Lake jars.

atlasbus writes its dead letters with delta-rs (executors need no JVM); users read and write
the same table with delta-spark. These tests prove the two agree: rows, schema and types;
app transactions each engine honours for the other; concurrent commits from both engines
(executor appends, a delta-spark append and OPTIMIZE) with no row lost or doubled; the
compacted table still read by both. They need the ``delta_spark`` fixture: in CI they fail
without the jars, elsewhere they skip saying why.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import redis
from deltalake import DeltaTable

from atlasbus.cli import dlq as dlq_cli
from atlasbus.dead_letters import (
    COLUMNS,
    PROCESSING,
    DeadLetter,
    DeadLetterTable,
    QueryContext,
    to_arrow,
)
from atlasbus.dead_letters.maintenance import compact, parquet_files_on_disk
from helpers import envelope, stream_reader
from pyspark_atlasbus.dead_letters import (
    read_dead_letters,
    stream_dead_letters,
    with_dead_letters,
)

pytestmark = [pytest.mark.spark, pytest.mark.delta_jars]

SCHEMA = (
    "struct<dead_letter_id:string,stage:string,reason:string,error:string,topic:string,"
    "stream:string,entry_id:string,correlation_id:string,priority:int,delivery_attempts:int,"
    "payload:string,fields:map<string,string>,query_id:string,query_name:string,"
    "batch_id:bigint,dead_lettered_at:timestamp,replay_count:int,last_replayed_at:timestamp,"
    "last_replay_entry_id:string>"
)
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = dlq_cli.main(["dlq", *argv])
    out, _ = capsys.readouterr()
    return code, out


def spark_rows(spark: Any, path: str) -> dict[str, dict[str, Any]]:
    """Every row delta-spark reads, by dead letter ID (all rows: a duplicate would show)."""
    rows = spark.read.format("delta").load(path).collect()
    assert len(rows) == len({r["dead_letter_id"] for r in rows})
    return {r["dead_letter_id"]: r.asDict() for r in rows}


def arrow_rows(path: str) -> dict[str, dict[str, Any]]:
    """What delta-rs reads, in the form Spark collects (maps as dicts, naive UTC times)."""
    out = {}
    for row in DeadLetterTable(path).to_arrow(all_rows=True).to_pylist():
        row["fields"] = None if row["fields"] is None else dict(row["fields"])
        for key in ("dead_lettered_at", "last_replayed_at"):
            if row[key] is not None:
                row[key] = row[key].astimezone(UTC).replace(tzinfo=None)
        out[row["dead_letter_id"]] = row
    return out


def test_a_table_atlasbus_wrote_is_read_and_appended_by_delta_spark_and_replayed(
    delta_spark: Any,
    r: redis.Redis,
    redis_url: str,
    prefix: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spark = delta_spark
    path = str(tmp_path / "dead_letters")
    stream = f"{prefix}:orders"
    good = r.xadd(stream, envelope("orders", 1)).decode()
    not_object = r.xadd(stream, {"payload": "[1]", "priority": "1"}).decode()
    word = r.xadd(stream, envelope("orders", 2, priority="high")).decode()
    # source-decode: a batch read routes the two malformed entries (on the executors)
    read = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "orders")
        .option("deadLetterTable", path)
        .load()
    )
    assert [row["id"] for row in read.collect()] == [good]
    # sink-publish: a row whose payload is not JSON
    (
        spark.createDataFrame(
            [("{bad", 4, "c3")], "payload string, priority int, correlation_id string"
        )
        .write.format("atlasbus")
        .mode("append")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topic", "payments")
        .option("deadLetterTable", path)
        .save()
    )
    # processing: a foreachBatch function's check fails for one row
    rows = spark.createDataFrame(
        [("orders", '{"n": 8}', 8), ("orders", '{"n": 9}', 9)],
        "topic string, payload string, priority int",
    )
    with_dead_letters(lambda df, batch_id: None, path, check="priority < 9")(rows, 7)
    # data-loss: what the driver records for a range trimmed unread
    DeadLetterTable(path).append(
        [DeadLetter.for_data_loss(stream=stream, after="1-0", upto="2-0", topic="orders", at=T0)]
    )

    native = read_dead_letters(spark, path)  # the jars are loaded: delta-spark reads it
    assert native.columns == list(COLUMNS)
    assert native.schema.simpleString() == SCHEMA
    assert spark_rows(spark, path) == arrow_rows(path)
    assert sorted((r["stage"], r["reason"], r["entry_id"]) for r in native.collect()) == sorted(
        [
            ("source-decode", "not-json-object", not_object),
            ("source-decode", "invalid-integer", word),
            ("sink-publish", "invalid-json", None),
            ("processing", "check-failed", None),
            ("data-loss", "entries-removed", "2-0"),
        ]
    )
    sql = spark.sql(
        f"SELECT stage, count(*) AS n FROM delta.`{path}` GROUP BY stage ORDER BY stage"
    )
    assert [(x["stage"], x["n"]) for x in sql.collect()] == [
        ("data-loss", 1),
        ("processing", 1),
        ("sink-publish", 1),
        ("source-decode", 2),
    ]
    before = DeltaTable(path).version()

    # delta-spark appends a dead letter under an app transaction, twice: written once
    manual = DeadLetter.for_entry(
        PROCESSING,
        "manual",
        "held back by the on-call engineer",
        stream=stream,
        entry_id=good,
        topic="orders",
        priority=3,
        payload='{"n": 1}',
        context=QueryContext(None, "ops", None),
        at=T0 + timedelta(hours=1),
    )
    letter = spark.createDataFrame(to_arrow([manual]))
    for _ in range(2):
        (
            letter.write.format("delta")
            .mode("append")
            .option("txnAppId", "ops-job")
            .option("txnVersion", 1)
            .save(path)
        )
    assert DeltaTable(path).version() == before + 1
    # delta-rs sees the row and honours delta-spark's app transaction ...
    table = DeadLetterTable(path)
    assert table.open().transaction_version("ops-job") == 1
    assert table.append([manual], app_id="ops-job", version=1) == 0
    assert arrow_rows(path)[manual.dead_letter_id]["reason"] == "manual"
    # ... and delta-spark honours delta-rs's: its write under an app ID delta-rs recorded at
    # that version is skipped
    held = DeadLetter.for_row(
        "held", "held", write_id="rs", row=0, stage=PROCESSING, at=T0 + timedelta(hours=2)
    )
    assert table.append([held], app_id="rs-job", version=5) == 1
    (
        spark.createDataFrame(to_arrow([held]))
        .write.format("delta")
        .mode("append")
        .option("txnAppId", "rs-job")
        .option("txnVersion", 5)
        .save(path)
    )
    assert spark.read.format("delta").load(path).count() == 7  # 5, manual, held: once each

    code, out = cli(capsys, "summary", "--table", path, "--by", "stage,reason")
    assert code == 0
    assert [line.split()[:3] for line in out.splitlines()[2:-1]] == [
        ["data-loss", "entries-removed", "1"],
        ["processing", "check-failed", "1"],
        ["processing", "held", "1"],
        ["processing", "manual", "1"],
        ["sink-publish", "invalid-json", "1"],
        ["source-decode", "invalid-integer", "1"],
        ["source-decode", "not-json-object", "1"],
    ]
    (manual_line,) = [line for line in out.splitlines() if " manual " in line]
    assert manual_line.split() == ["processing", "manual", "1", *["2024-05-01", "13:00:00"] * 2]
    assert out.splitlines()[-1] == "7 dead letter(s)"

    # a replay through the command line after delta-spark wrote: publishes, and records it
    code, out = cli(
        capsys,
        "replay",
        "--table",
        path,
        "--url",
        redis_url,
        "--stream-prefix",
        prefix,
        "--where",
        "reason IN ('manual', 'invalid-integer')",
    )
    assert code == 0, out
    assert out.splitlines()[-1] == (
        "replayed 2 dead letter(s); refused 0 already replayed (use --again), 0 not replayable"
    )
    replayed = r.xrange(stream, min=f"({word}")
    assert sorted(json.loads(f[b"payload"])["n"] for _, f in replayed) == [1, 2]
    after = spark_rows(spark, path)
    counts = {(row["reason"], row["replay_count"]) for row in after.values()}
    assert ("manual", 1) in counts
    assert ("invalid-integer", 1) in counts
    assert {row["replay_count"] for row in after.values() if row["reason"] == "manual"} == {1}
    assert after == arrow_rows(path)

    # time travel: the table as it was before delta-spark's append
    old = read_dead_letters(spark, path, version=before)
    assert old.count() == 5
    assert read_dead_letters(spark, path, version=before, engine="delta-rs").count() == 5


# Enough micro-batches (40 entries each) that the executors still commit while delta-spark's
# first commit is made (its snapshot of the growing log, its conflict checks): in a fresh
# session 600 entries were read before it, so nothing was concurrent.
ENTRIES = 1_500


def test_concurrent_commits_from_both_engines_lose_and_double_nothing(
    delta_spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """Executors append dead letters with delta-rs while a delta-spark job appends and OPTIMIZEs."""
    spark = delta_spark
    path = str(tmp_path / "dead_letters")
    stream = f"{prefix}:t"
    bad_ids = []
    pipe = r.pipeline(transaction=False)
    for n in range(ENTRIES):
        if n % 3 == 0:
            pipe.xadd(stream, {"payload": f"[{n}]", "priority": "1"})
        else:
            pipe.xadd(stream, envelope("t", n))
    ids = [i.decode() for i in pipe.execute()]
    bad_ids = [ids[n] for n in range(ENTRIES) if n % 3 == 0]
    DeadLetterTable(path).create()

    done = threading.Event()
    spark_letters: list[str] = []
    optimized = []
    errors: list[BaseException] = []

    def spark_job() -> None:
        try:
            # start once the executors have committed, so the two engines' commits interleave
            while DeltaTable(path).version() < 1 and not done.is_set():
                done.wait(0.05)
            version = 0
            while not done.is_set() or version < 6:
                letter = DeadLetter.for_row(
                    "manual", "by a spark job", write_id="ops", row=version, topic="t"
                )
                (
                    spark.createDataFrame(to_arrow([letter]))
                    .write.format("delta")
                    .mode("append")
                    .option("txnAppId", "ops")
                    .option("txnVersion", version)
                    .save(path)
                )
                spark_letters.append(letter.dead_letter_id)
                if version % 2 == 1:
                    result = spark.sql(f"OPTIMIZE delta.`{path}`").collect()[0]
                    optimized.append(result["metrics"]["numFilesRemoved"])
                version += 1
        except BaseException as exc:
            errors.append(exc)

    job = threading.Thread(target=spark_job)
    job.start()
    try:
        query = (
            stream_reader(
                spark,
                redis_url,
                prefix,
                topics="t",
                deadLetterTable=path,
                maxEntriesPerPartition="20",
                maxEntriesPerTrigger="40",
            )
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None
    finally:
        done.set()
        job.join(300)
    assert not errors, errors

    rows = spark.read.format("delta").load(path).select("dead_letter_id", "stage", "entry_id")
    by_id = Counter(row["dead_letter_id"] for row in rows.collect())
    assert set(by_id.values()) == {1}  # every dead letter exactly once
    entries = sorted(row["entry_id"] for row in rows.collect() if row["stage"] == "source-decode")
    assert entries == sorted(bad_ids)
    assert len(by_id) == len(bad_ids) + len(spark_letters)
    assert sum(optimized) > 0  # OPTIMIZE really rewrote files under the executors' appends
    assert DeltaTable(path).count() == len(by_id)
    # one history, the same on both engines
    spark_history = {
        row["version"]: row["operation"]
        for row in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    }
    rs_history = {c["version"]: c["operation"] for c in DeltaTable(path).history()}
    assert spark_history == rs_history
    assert sorted(spark_history) == list(range(len(spark_history)))
    operations = Counter(spark_history.values())
    assert operations["OPTIMIZE"] == len(optimized)
    engines = [
        "spark" if "Delta-Lake" in str(c.get("engineInfo", "")) else "delta-rs"
        for c in sorted(DeltaTable(path).history(), key=lambda c: c["version"])
    ]
    switches = sum(1 for a, b in pairwise(engines) if a != b)
    assert switches >= 2  # a delta-spark commit between executor commits: truly concurrent
    print(
        f"\nconcurrency figures: {len(bad_ids)} executor dead letters, {len(spark_letters)} "
        f"delta-spark appends, {len(optimized)} OPTIMIZE ({sum(optimized)} files rewritten), "
        f"{len(spark_history)} commits, the engine changing {switches} times"
    )


def test_compact_two_hundred_small_appends(
    delta_spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``atlasbus dlq compact``: fewer files, the same rows, delta-spark still reads it."""
    spark = delta_spark
    table = DeadLetterTable(tmp_path / "dead_letters")
    for i in range(200):
        table.append([DeadLetter.for_row("too-big", f"row {i}", write_id="w", row=i, at=T0)])
    before = spark_rows(spark, table.uri)
    assert len(before) == 200

    code, out = cli(capsys, "compact", "--table", table.uri, "--retain-hours", "0")

    assert code == 0
    assert out.splitlines() == [
        f"compacted {table.uri}: 200 live file(s) -> 1 (200 rewritten), 200 row(s), version 203",
        "vacuumed 200 file(s) removed more than 0 h ago",
        "note: --retain-hours 0 is below the table's 168 h: a reader of an older version (a "
        "stream far behind, time travel) has lost its files",
        "parquet files in the folder: 200 -> 1",
    ]
    assert spark_rows(spark, table.uri) == before
    assert arrow_rows(table.uri) == before
    assert spark.sql(f"DESCRIBE DETAIL delta.`{table.uri}`").first()["numFiles"] == 1
    # with the default retention nothing removed an hour ago is deleted
    code, out = cli(capsys, "compact", "--table", table.uri)
    assert out.splitlines()[1] == "vacuumed 0 file(s) removed more than 168 h ago"


def test_compact_is_safe_beside_delta_spark_optimize_history(
    delta_spark: Any, tmp_path: Path
) -> None:
    """delta-spark's OPTIMIZE and VACUUM on a table delta-rs compacted, and the reverse."""
    spark = delta_spark
    table = DeadLetterTable(tmp_path / "dead_letters")
    for i in range(12):
        table.append([DeadLetter.for_row("too-big", f"row {i}", write_id="w", row=i, at=T0)])
    metrics = spark.sql(f"OPTIMIZE delta.`{table.uri}`").first()["metrics"]
    assert (metrics["numFilesAdded"], metrics["numFilesRemoved"]) == (1, 12)
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM delta.`{table.uri}` RETAIN 0 HOURS").collect()
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert parquet_files_on_disk(table.uri) == 1
    table.append([DeadLetter.for_row("too-big", "late", write_id="w", row=99, at=T0)])
    result = compact(table.uri, retention_hours=0)
    assert (result.files_before, result.files_after, result.rows) == (2, 1, 13)
    assert read_dead_letters(spark, table.uri).count() == 13


def test_stream_of_new_dead_letters_for_alerting(delta_spark: Any, tmp_path: Path) -> None:
    """``stream_dead_letters``: each appended dead letter once; OPTIMIZE and replay skipped."""
    spark = delta_spark
    table = DeadLetterTable(tmp_path / "dead_letters")
    first = [DeadLetter.for_row("too-big", "x", write_id="a", row=i, at=T0) for i in range(3)]
    table.append(first)
    seen: list[str] = []

    def collect(frame: Any, batch_id: int) -> None:
        seen.extend(row["dead_letter_id"] for row in frame.collect())

    def drain() -> None:
        query = (
            stream_dead_letters(spark, table.uri)
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    drain()
    assert sorted(seen) == sorted(x.dead_letter_id for x in first)
    second = [DeadLetter.for_row("too-big", "y", write_id="b", row=0, at=T0)]
    table.append(second)
    spark.sql(f"OPTIMIZE delta.`{table.uri}`").collect()
    table.mark_replayed([first[0].dead_letter_id], ["9-0"])  # a MERGE: a change commit
    drain()
    assert sorted(seen) == sorted(x.dead_letter_id for x in [*first, *second])
