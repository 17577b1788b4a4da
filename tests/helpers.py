"""Test helpers that publish like the bus does (pipelined XADD of envelopes) and read back."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import redis

from atlasbus.decoding.cut_pages import ColumnPage, PairPage

# The envelope's field names, in the order publishers write them (docs/wire-format.md).
WIRE = (
    b"topic",
    b"priority",
    b"payload",
    b"correlation_id",
    b"tracing",
    b"metadata",
    b"delivery_attempts",
    b"enqueued_time",
)


def envelope(topic: str, index: int, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "topic": topic,
        "priority": str(index % 10),
        "payload": json.dumps({"n": index, "topic": topic, "note": "événement ✓"}),
        "correlation_id": uuid.uuid4().hex,
        "tracing": json.dumps({"trace_id": f"trace-{index}"}),
        "metadata": "{}",
        "delivery_attempts": "0",
        "enqueued_time": f"{time.time():.6f}",
    }
    fields.update(overrides)
    return fields


def publish(
    r: redis.Redis, prefix: str, topic: str, count: int, *, start: int = 0, chunk: int = 1000
) -> list[str]:
    """Publish ``count`` envelopes numbered from ``start``; returns their entry IDs in order."""
    ids: list[str] = []
    stream = f"{prefix}:{topic}"
    for offset in range(start, start + count, chunk):
        pipe = r.pipeline(transaction=False)
        for index in range(offset, min(offset + chunk, start + count)):
            pipe.xadd(stream, envelope(topic, index))
        ids.extend(i.decode() for i in pipe.execute())
    return ids


def payload_numbers(rows: list[Any]) -> list[int]:
    return [json.loads(row["payload"])["n"] for row in rows]


class BatchCollector:
    """A foreachBatch function that keeps each micro-batch's rows, in order, on the driver."""

    def __init__(self, columns: tuple[str, ...] = ("topic", "id", "payload", "error")) -> None:
        self.columns = columns
        self.batches: list[tuple[int, list[Any]]] = []

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.batches.append((batch_id, frame.select(*self.columns).collect()))

    @property
    def rows(self) -> list[Any]:
        return [row for _, rows in self.batches for row in rows]

    def sizes(self) -> list[int]:
        return [len(rows) for _, rows in self.batches if rows]


def stream_reader(spark: Any, redis_url: str, prefix: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("atlasbus").option("url", redis_url).option("streamPrefix", prefix)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_available_now(frame: Any, checkpoint: str, collector: BatchCollector) -> Any:
    query = (
        frame.writeStream.foreachBatch(collector)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    return query


def run_until_idle(frame: Any, checkpoint: str, collector: BatchCollector) -> None:
    """Run a query with the default trigger until it has read all there is, then stop it."""
    query = (
        frame.writeStream.foreachBatch(collector).option("checkpointLocation", checkpoint).start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def redis_major(r: redis.Redis) -> int:
    """The server's major version: Redis 7 counts entries added and records deleted IDs."""
    return int(str(r.info("server")["redis_version"]).split(".")[0])


def column_page_of(entries: list[Any]) -> ColumnPage | None:
    """The page as ``atlasbus.decoding.kernels.cut_one_layout`` cuts it, when its entries share one layout."""
    names = list(entries[0][1][0::2])
    if len(set(names)) != len(names) or any(list(f[0::2]) != names for _, f in entries):
        return None
    columns = {
        name: pa.array([f[2 * i + 1] for _, f in entries], pa.binary())
        for i, name in enumerate(names)
    }
    return ColumnPage(pa.array([e[0] for e in entries], pa.binary()), names, columns)


def pair_page_of(entries: list[Any]) -> PairPage:
    """The page as ``atlasbus.decoding.kernels.cut_any_layout`` cuts it, whatever its entries' layouts."""
    counts = [len(flat) // 2 for _, flat in entries]
    return PairPage(
        pa.array([entry_id for entry_id, _ in entries], pa.binary()),
        pa.array(np.concatenate([[0], np.cumsum(counts, dtype=np.int32)]), pa.int32()),
        pa.array([name for _, flat in entries for name in flat[0::2]], pa.binary()),
        pa.array([value for _, flat in entries for value in flat[1::2]], pa.binary()),
    )


def raw_fields_of_pages(entries: list[Any]) -> list[Any]:
    """The ``fields`` maps of a page read with ``format=raw`` from its names and values (and,
    for a one-layout page, from its columns too), after checking that they are valid Arrow and
    that its entry lists read the same."""
    from atlasbus.decoding.decoder import decode_raw

    expected = decode_raw(entries, topic="t", stream="s:t").to_pylist()
    columns = column_page_of(entries)
    pages = [pair_page_of(entries)] if columns is None else [pair_page_of(entries), columns]
    for page in pages:
        batch = decode_raw(page, topic="t", stream="s:t")
        batch.validate(full=True)
        assert batch.to_pylist() == expected
    return list(batch.column("fields").to_pylist())


def wait_until(condition: Callable[[], bool], timeout: float = 120) -> None:
    """Poll ``condition`` every 50 ms until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def completed_tasks(spark: Any, group: str) -> int:
    """Tasks finished in the running stages, once a job of ``group`` runs (nothing else runs
    in this process meanwhile)."""
    tracker = spark.sparkContext.statusTracker()
    if not tracker.getJobIdsForGroup(group):
        return 0
    stages = [tracker.getStageInfo(stage) for stage in tracker.getActiveStageIds()]
    return sum(stage.numCompletedTasks for stage in stages if stage is not None)
