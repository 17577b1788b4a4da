"""What users rely on, on whichever pyspark line is installed (4.0 up to the newest).

The main suite runs these on its line; ``.ci/run`` runs them again in a virtualenv of the oldest
supported pyspark and one of the newest, each with nothing but ``pip install .`` beside it (no
delta-spark: the dead-letter table is delta-rs's). Where a line lacks an API, the test asserts
what atlasbus does instead: the option refused at start with the version it needs, or the
documented fallback (docs/operations.md, "Spark lines").
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyspark
import pytest
import redis

from atlasbus.dead_letters import DeadLetterTable
from helpers import (
    BatchCollector,
    payload_numbers,
    publish,
    run_available_now,
    stream_reader,
)

LINE = tuple(int(part) for part in pyspark.__version__.split(".")[:2])
ADMISSION_CONTROL = LINE >= (4, 2)


def test_this_line_is_one_atlasbus_supports() -> None:
    assert LINE >= (4, 0), pyspark.__version__
    from pyspark_atlasbus.spark_features import ADMISSION_CONTROL as detected

    assert detected is ADMISSION_CONTROL
    from pyspark_atlasbus.spark_features import FILTER_PUSHDOWN

    if LINE >= (4, 2):
        assert FILTER_PUSHDOWN  # 4.0 has no DataSourceReader.pushFilters; 4.1 is not claimed
    elif LINE == (4, 0):
        assert not FILTER_PUSHDOWN


@pytest.mark.parametrize("pushdown_setting", ["true", "false"])
def test_a_filtered_batch_read_gives_exact_rows_with_spark_s_pushdown_setting_on_or_off(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, capsys: Any, pushdown_setting: str
) -> None:
    """On every line, with spark.sql.python.filterPushdown.enabled on or off, a filtered read
    gives the filtered rows; the filters are pushed where the line can (docs/options.md)."""
    from pyspark_atlasbus.spark_features import FILTER_PUSHDOWN

    ids = publish(r, prefix, "orders", 60)
    publish(r, prefix, "payments", 10)
    conf = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(conf, "false")
    spark.conf.set(conf, pushdown_setting)
    try:
        frame = (
            spark.read.format("atlasbus")
            .option("url", redis_url)
            .option("streamPrefix", prefix)
            .option("topics", "orders,payments")
            .option("filterPushdown", "true")
            .load()
            .where(f"topic = 'orders' and id = '{ids[7]}'")
        )
        rows = frame.select("id", "payload").collect()
        frame.explain("formatted")
    finally:
        spark.conf.set(conf, before)
    assert [row["id"] for row in rows] == [ids[7]]
    assert payload_numbers(rows) == [7]
    pushed = "EqualTo(topic,orders)" in capsys.readouterr().out
    assert pushed is (FILTER_PUSHDOWN and pushdown_setting == "true")


def test_a_batch_read_gives_exact_rows(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    ids = publish(r, prefix, "orders", 120)
    rows = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "orders")
        .load()
        .select("id", "payload", "error")
        .collect()
    )
    assert [row["id"] for row in rows] == ids
    assert payload_numbers(rows) == list(range(120))
    assert all(row["error"] is None for row in rows)


def test_a_time_window_given_as_options_reads_exactly_the_window(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """startingTimestamp (included) and endingTimestamp (excluded): no filter, no setting."""
    stream = f"{prefix}:orders"
    for ms in range(1_700_000_000_000, 1_700_000_000_100, 10):
        for seq in range(2):
            r.xadd(
                stream, {"topic": "orders", "payload": f'{{"n": {ms % 1000}}}'}, id=f"{ms}-{seq}"
            )
    rows = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "orders")
        .option("startingTimestamp", "1700000000020")
        .option("endingTimestamp", "1700000000050")
        .load()
        .select("id")
        .collect()
    )
    assert [row["id"] for row in rows] == [
        f"{ms}-{seq}"
        for ms in (1_700_000_000_020, 1_700_000_000_030, 1_700_000_000_040)
        for seq in (0, 1)
    ]


def test_a_streaming_read_restarted_on_its_checkpoint_reads_every_entry_once(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """The stream grows while each run reads it; the restart resumes where the first stopped."""
    checkpoint = str(tmp_path / "ck")
    published: list[str] = []
    collector = BatchCollector(columns=("id", "payload"))

    def run_while_publishing(start: int) -> None:
        query = (
            stream_reader(spark, redis_url, prefix, topics="orders")
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        try:
            for chunk in range(4):  # published while the query runs
                published.extend(publish(r, prefix, "orders", 25, start=start + 25 * chunk))
                query.processAllAvailable()
                time.sleep(0.2)
        finally:
            query.stop()

    published.extend(publish(r, prefix, "orders", 50))
    run_while_publishing(50)
    first_run = len(collector.rows)
    published.extend(publish(r, prefix, "orders", 30, start=150))  # while it is stopped
    run_while_publishing(180)
    ids = [row["id"] for row in collector.rows]
    assert first_run == 150
    assert ids == published
    assert payload_numbers(collector.rows) == list(range(280))


def test_the_sink_publishes_each_row_once_batch_and_streaming(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    frame = spark.createDataFrame(
        [(json.dumps({"n": n}), n % 3) for n in range(40)], "payload string, priority int"
    )
    (
        frame.write.format("atlasbus")
        .mode("append")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topic", "out")
        .save()
    )
    published = r.xrange(f"{prefix}:out")
    assert sorted(json.loads(f[b"payload"])["n"] for _, f in published) == list(range(40))
    assert sorted(int(f[b"priority"]) for _, f in published) == sorted(n % 3 for n in range(40))

    publish(r, prefix, "in", 60)
    checkpoint = str(tmp_path / "sink-ck")

    def copy() -> None:
        query = (
            stream_reader(spark, redis_url, prefix, topics="in")
            .selectExpr("payload", "'copied' AS topic")
            .writeStream.format("atlasbus")
            .option("url", redis_url)
            .option("streamPrefix", prefix)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None

    copy()
    publish(r, prefix, "in", 15, start=60)
    copy()  # the restart publishes only what is new
    copied = r.xrange(f"{prefix}:copied")
    assert [json.loads(f[b"payload"])["n"] for _, f in copied] == list(range(75))


def test_malformed_entries_go_to_the_dead_letter_table_and_the_rest_to_the_output(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    ids = publish(r, prefix, "orders", 10)
    bad = r.xadd(f"{prefix}:orders", {"topic": "orders", "payload": "{not json"}).decode()
    ids += publish(r, prefix, "orders", 5, start=10)
    table = str(tmp_path / "dead")
    collector = BatchCollector(columns=("id", "payload", "error"))
    frame = stream_reader(spark, redis_url, prefix, topics="orders", deadLetterTable=table)
    run_available_now(frame, str(tmp_path / "ck"), collector)
    assert [row["id"] for row in collector.rows] == ids
    letters = DeadLetterTable(table).to_arrow().to_pylist()
    assert [(row["entry_id"], row["stage"], row["reason"]) for row in letters] == [
        (bad, "source-decode", "invalid-json")
    ]


def test_available_now_reads_everything_there_is(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    ids = publish(r, prefix, "orders", 300)
    collector = BatchCollector(columns=("id",))
    frame = stream_reader(spark, redis_url, prefix, topics="orders")
    run_available_now(frame, str(tmp_path / "ck"), collector)
    assert [row["id"] for row in collector.rows] == ids


@pytest.mark.parametrize(
    "options",
    [
        {"maxEntriesPerTrigger": "100"},
        {"minEntriesPerTrigger": "50", "maxTriggerDelay": "2s"},
    ],
    ids=["maxEntriesPerTrigger", "minEntriesPerTrigger"],
)
def test_options_that_need_admission_control_work_or_are_refused_naming_the_version(
    spark: Any,
    r: redis.Redis,
    redis_url: str,
    prefix: str,
    tmp_path: Path,
    options: dict[str, str],
) -> None:
    ids = publish(r, prefix, "orders", 250)
    collector = BatchCollector(columns=("id",))
    frame = stream_reader(spark, redis_url, prefix, topics="orders", **options)
    if not ADMISSION_CONTROL:
        with pytest.raises(Exception) as refused:
            run_available_now(frame, str(tmp_path / "ck"), collector)
        name = next(iter(options))
        assert f"option '{name}'" in str(refused.value)
        assert (
            f"needs pyspark 4.2 or later (admission control for Python data sources), and "
            f"this Spark is pyspark {pyspark.__version__}"
        ) in str(refused.value)
        assert collector.rows == []
        return
    run_available_now(frame, str(tmp_path / "ck"), collector)
    assert [row["id"] for row in collector.rows] == ids
    if "maxEntriesPerTrigger" in options:
        assert collector.sizes() == [100, 100, 50]
    else:  # an availableNow run is never held back (its hold is in tests/test_pacing.py)
        assert collector.sizes() == [250]


def test_the_group_mirror_and_trim_consumed_follow_the_committed_position(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """Both act on the start of each next batch, which 4.0/4.1 do not hand the reader."""
    stream = f"{prefix}:orders"
    first = publish(r, prefix, "orders", 40)
    collector = BatchCollector(columns=("id",))
    query = (
        stream_reader(spark, redis_url, prefix, topics="orders", group="etl", trimConsumed="true")
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        query.processAllAvailable()
        second = publish(r, prefix, "orders", 30, start=40)
        query.processAllAvailable()
        (group,) = r.xinfo_groups(stream)
        mirrored = group["last-delivered-id"].decode()
        kept = [entry_id.decode() for entry_id, _ in r.xrange(stream)]
        third = publish(r, prefix, "orders", 5, start=70)
        query.processAllAvailable()
    finally:
        query.stop()
    assert [row["id"] for row in collector.rows] == first + second + third
    # processAllAvailable returns after a trigger found nothing new, which started from the
    # last batch's end: committed by then, so mirrored and trimmed to
    assert mirrored == second[-1]
    assert kept == [second[-1]]
    (group,) = r.xinfo_groups(stream)
    assert group["last-delivered-id"].decode() == third[-1]
    assert [entry_id.decode() for entry_id, _ in r.xrange(stream)] == [third[-1]]


def test_the_lag_listener_reports_lag_or_says_once_why_it_cannot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pyspark_atlasbus.lag import LagListener

    with caplog.at_level("WARNING", logger="atlasbus.lag"):
        LagListener()
    if ADMISSION_CONTROL:
        assert caplog.messages == []
    else:
        assert caplog.messages == [
            f"LagListener: pyspark {pyspark.__version__} puts no latest offset of a Python data "
            "source in progress reports (pyspark 4.2 does), so there is no lag to report; a "
            "query's 'group' shows its lag in XINFO GROUPS and `atlasbus status` instead"
        ]


def test_whether_spark_reads_a_filtered_scans_partitions_again_for_later_scans(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    """Why ``filterPushdown`` is off by default (docs/options.md, "Filtering batch reads"):
    on the lines that pass filters to Python data sources (4.1 to 4.3), Spark keeps the
    partitions a filtered scan planned on its DataFrame and reads them for the DataFrame's
    later unfiltered scans. The counts are asserted as each line gives them: when a new line
    stops doing this, this test fails, and the default can be turned on there."""
    from pyspark_atlasbus.spark_features import FILTER_PUSHDOWN

    publish(r, prefix, "orders", 30)
    publish(r, prefix, "payments", 20)
    conf = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(conf, "false")
    spark.conf.set(conf, "true")
    try:
        frame = (
            spark.read.format("atlasbus")
            .option("url", redis_url)
            .option("streamPrefix", prefix)
            .option("topics", "orders,payments")
            .option("filterPushdown", "true")
            .load()
        )
        counts = (frame.count(), frame.where("topic = 'orders'").count(), frame.count())
        fresh = spark.read.format("atlasbus").option("url", redis_url)
        fresh = fresh.option("streamPrefix", prefix).option("topics", "orders,payments").load()
        unpushed = (fresh.count(), fresh.where("topic = 'orders'").count(), fresh.count())
    finally:
        spark.conf.set(conf, before)
    assert unpushed == (50, 30, 50)
    assert counts == ((50, 30, 30) if FILTER_PUSHDOWN else (50, 30, 50))
