"""The sink writers' abort (pyspark_atlasbus.writer), with writes made to raise in Spark.

A failed batch write is not resumed (a rerun is a new write, with a new write ID), so its abort
deletes the markers of the tasks that finished. A failed micro-batch is replayed under the same
query and batch IDs, so the streaming writer's abort keeps every marker for the replay to use.

Spark hands the writers Arrow batches of ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows:
set to 5 here, so a task publishes its first five rows (and records them in its marker) before
the batch holding the bad row makes it fail.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import completed_tasks, publish, stream_reader, wait_until

BAD_ROW = 7  # of 10 in the failing task: rows 0-4 are published first
ROW_ERROR = f"cannot publish row {BAD_ROW} (topic 't'): column 'payload' is not a JSON object"


@pytest.fixture
def small_arrow_batches(spark: Any) -> Iterator[None]:
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "5")
    yield
    spark.conf.set(key, before)


def markers(r: redis.Redis, prefix: str) -> dict[str, bytes]:
    """Every marker key under the prefix and its value (a registry hash shows as b"hash")."""
    keys = sorted(k.decode() for k in r.scan_iter(match=f"{prefix}:__atlasbus_sink__:*"))
    return {key: (r.get(key) if r.type(key) == b"string" else r.type(key)) or b"" for key in keys}


@pytest.mark.usefixtures("small_arrow_batches")
def test_a_failed_batch_write_deletes_the_markers_of_the_tasks_that_finished(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str
) -> None:
    release = f"{prefix}:release"

    def rows(batches: Iterator[Any]) -> Iterator[Any]:
        """Partition 0: three good rows. Partition 1 waits until partition 0 has finished, then
        has ten rows, row 7 not a JSON object."""
        import pyarrow as pa
        import redis as redis_client

        for batch in batches:
            for part in batch.column("id").to_pylist():
                if part == 0:
                    payloads = [json.dumps({"n": n}) for n in range(3)]
                else:
                    # no socket timeout: redis-py's default (5 s) would cut the 120 s wait short
                    with redis_client.Redis.from_url(redis_url, socket_timeout=None) as client:
                        client.blpop([release], timeout=120)
                    payloads = [
                        '"not an object"' if n == BAD_ROW else json.dumps({"n": 100 + n})
                        for n in range(10)
                    ]
                yield pa.record_batch({"payload": pa.array(payloads)})

    frame = spark.range(0, 2, numPartitions=2).mapInArrow(rows, "payload string")
    group = f"abort-{prefix}"
    finished: dict[str, bytes] = {}

    def release_when_partition_0_is_done() -> None:
        """Spark handles task ends one at a time, in order: once partition 0's is seen, its
        commit message is the driver's before partition 1 can fail."""
        try:
            wait_until(lambda: completed_tasks(spark, group) >= 1)
            finished.update(markers(r, prefix))
        finally:
            r.rpush(release, "go")

    # the write runs in the test's thread (the data source is looked up in its session)
    spark.sparkContext.setJobGroup(group, "a batch write that fails")
    helper = threading.Thread(target=release_when_partition_0_is_done)
    helper.start()
    try:
        with pytest.raises(Exception, match="not a JSON object") as caught:
            (
                frame.write.format("atlasbus")
                .mode("append")
                .option("url", redis_url)
                .option("streamPrefix", prefix)
                .option("topic", "t")
                .save()
            )
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        r.rpush(release, "go")
        helper.join(timeout=300)
    assert [key.rsplit(":", 1)[1] for key in finished] == ["0"]
    assert next(iter(finished.values())).startswith(b"3:")

    assert ROW_ERROR in str(caught.value)
    left = markers(r, prefix)
    # the finished task's marker went with the abort; the failed task's was not given to it
    # (Spark passes no message for a failed task) and is left to its TTL
    assert [key.rsplit(":", 1)[1] for key in left] == ["1"]
    assert next(iter(left.values())).startswith(b"5:")
    assert sorted(json.loads(f[b"payload"])["n"] for _, f in r.xrange(f"{prefix}:t")) == [
        0,
        1,
        2,
        100,
        101,
        102,
        103,
        104,
    ]


@pytest.mark.usefixtures("small_arrow_batches")
def test_a_failed_micro_batch_keeps_its_markers_for_the_replay(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    publish(r, prefix, "in", 10)
    source = stream_reader(spark, redis_url, prefix, topics="in").selectExpr(
        f"if(get_json_object(payload, '$.n') = {BAD_ROW}, '\"not an object\"', payload) as payload"
    )
    query = (
        source.writeStream.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topic", "t")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="not a JSON object"):
        query.awaitTermination(300)
    assert ROW_ERROR in str(query.exception())
    left = markers(r, prefix)
    assert list(left) == [f"{prefix}:__atlasbus_sink__:q{query.id}:0:0"]  # query, batch 0, task 0
    assert left[f"{prefix}:__atlasbus_sink__:q{query.id}:0:0"].startswith(b"5:")
    assert [json.loads(f[b"payload"])["n"] for _, f in r.xrange(f"{prefix}:t")] == list(range(5))
