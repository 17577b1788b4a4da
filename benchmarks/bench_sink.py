"""Sink throughput: Spark batch and streaming writes against raw pipelined XADD, in one run.

    python benchmarks/bench_sink.py --rows 1000000

Starts its own private redis-server. The input is written once to Parquet (two files, so two
write tasks on ``local[2]``); the batch sink reads it with ``spark.read``, the streaming sink
with ``spark.readStream`` (``Trigger.AvailableNow``), so both do the same work. The baselines
publish the same envelopes from two processes: redis-py pipelines (1000 XADD per round trip,
hiredis), and atlasbus's own publisher without Spark. Prints a table and writes
benchmarks/results/sink.json. Machines are shared and noisy: compare within one run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import redis
from installed_bytecode import compile_atlasbus
from run_report import benchmark_parser, write_report

from atlasbus.options.sink import parse_sink_options
from atlasbus.publishing.publisher import Publisher
from atlasbus.sandbox.redis_server import RedisServer

RESULTS = Path(__file__).parent / "results" / "sink.json"
TOPIC = "bench"
PREFIX = "atlas_bus"


def envelopes(start: int, stop: int) -> pa.RecordBatch:
    """The input rows: an envelope of about 420 bytes once published, like the bus's own."""
    numbers = range(start, stop)
    return pa.record_batch(
        {
            "priority": pa.array([n % 10 for n in numbers], pa.int32()),
            "payload": pa.array(
                [
                    json.dumps(
                        {
                            "order_id": n,
                            "customer": f"customer-{n % 9973}",
                            "note": "événement ✓",
                            "amount": round(n * 0.37, 2),
                            "items": [{"sku": f"SKU-{n % 997}", "qty": n % 5 + 1}],
                        },
                        ensure_ascii=False,
                    )
                    for n in numbers
                ]
            ),
            "tracing": pa.array(
                [[("trace_id", f"{n:032x}"), ("span_id", f"{n:016x}")] for n in numbers],
                pa.map_(pa.string(), pa.string()),
            ),
        }
    )


def write_input(path: Path, rows: int) -> None:
    """Two Parquet files of half the rows each: two tasks."""
    path.mkdir(parents=True)
    half = rows // 2
    for index, (start, stop) in enumerate(((0, half), (half, rows))):
        batches = [envelopes(s, min(s + 50_000, stop)) for s in range(start, stop, 50_000)]
        pq.write_table(pa.Table.from_batches(batches), path / f"part-{index}.parquet")


# --- baselines: two processes, no Spark ------------------------------------------------------


def _redis_py_worker(url: str, path: str, queue: Any) -> None:
    table = pq.read_table(path)
    client = redis.Redis.from_url(url)
    rows = table.to_pylist()
    stream = f"{PREFIX}:{TOPIC}"
    messages = [
        {
            "topic": TOPIC,
            "priority": str(row["priority"]),
            "payload": row["payload"],
            "correlation_id": os.urandom(16).hex(),
            "tracing": json.dumps(dict(row["tracing"]), ensure_ascii=False),
            "metadata": "{}",
            "delivery_attempts": "0",
            "enqueued_time": f"{time.time():.6f}",
        }
        for row in rows
    ]
    queue.get()  # start together
    started = time.perf_counter()
    for offset in range(0, len(messages), 1000):
        pipe = client.pipeline(transaction=False)
        for fields in messages[offset : offset + 1000]:
            pipe.xadd(stream, fields)
        pipe.execute()
    queue.put(time.perf_counter() - started)


def _atlasbus_worker(url: str, path: str, exactly_once: bool, queue: Any) -> None:
    batches = pq.read_table(path).to_batches(max_chunksize=10_000)
    options = parse_sink_options(
        {"url": url, "topic": TOPIC, "exactlyOnce": str(exactly_once).lower()}
    )
    marker = f"{PREFIX}:__atlasbus_sink__:bench:{os.getpid()}" if exactly_once else None
    queue.get()
    started = time.perf_counter()
    with Publisher(options, marker=marker) as publisher:
        for batch in batches:
            publisher.publish(batch)
    queue.put(time.perf_counter() - started)


def two_processes(target: Any, *args: Any) -> float:
    """Wall time of two processes that start publishing together, one input file each."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    files = sorted(str(p) for p in Path(args[1]).glob("*.parquet"))
    procs = [context.Process(target=target, args=(args[0], f, *args[2:], queue)) for f in files]
    for proc in procs:
        proc.start()
    time.sleep(max(3.0, 10 * len(files) * _rows_in(files) / 1_000_000))  # let both build input
    started = time.perf_counter()
    for _ in procs:
        queue.put(None)
    for proc in procs:
        proc.join()
    return time.perf_counter() - started


def _rows_in(files: list[str]) -> int:
    return int(pq.ParquetFile(files[0]).metadata.num_rows)


# --- Spark -----------------------------------------------------------------------------------


def spark_session() -> Any:
    from pyspark_atlasbus.session import local_session

    return local_session("atlasbus-bench-sink")


def spark_batch(spark: Any, url: str, path: Path, exactly_once: bool) -> float:
    df = spark.read.parquet(str(path))
    started = time.perf_counter()
    (
        df.write.format("atlasbus")
        .mode("append")
        .option("url", url)
        .option("topic", TOPIC)
        .option("exactlyOnce", str(exactly_once).lower())
        .save()
    )
    return time.perf_counter() - started


def spark_stream(spark: Any, url: str, path: Path, exactly_once: bool, checkpoint: str) -> float:
    schema = spark.read.parquet(str(path)).schema
    df = spark.readStream.schema(schema).parquet(str(path))
    started = time.perf_counter()
    query = (
        df.writeStream.format("atlasbus")
        .option("url", url)
        .option("topic", TOPIC)
        .option("exactlyOnce", str(exactly_once).lower())
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return elapsed


# --- the run -----------------------------------------------------------------------------------


def main() -> None:
    compile_atlasbus()
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2, help="runs per case; the best is kept")
    args = parser.parse_args()
    rows = args.rows
    load_before = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="atlasbus-bench-") as tmp, RedisServer() as server:
        data = Path(tmp) / "input"
        write_input(data, rows)
        client = redis.Redis.from_url(server.url)
        stream = f"{PREFIX}:{TOPIC}"

        def measured(name: str, run: Any) -> dict[str, Any]:
            client.delete(stream)
            elapsed = run()
            length = int(client.xlen(stream))
            if length != rows:
                raise RuntimeError(f"{name}: published {length} entries, expected {rows}")
            entry_bytes = sum(
                len(k) + len(v) for k, v in client.xrange(stream, count=1)[0][1].items()
            )
            client.delete(stream)
            for key in client.scan_iter(match=f"{PREFIX}:__atlasbus_sink__:*"):
                client.delete(key)
            result = {
                "name": name,
                "seconds": round(elapsed, 3),
                "rows_per_s": round(rows / elapsed),
            }
            result["entry_bytes"] = entry_bytes
            print(f"  {name:<44} {result['rows_per_s']:>9,} rows/s  ({elapsed:.2f} s)", flush=True)
            return result

        print(f"publishing {rows:,} rows; redis-server {server.binary}", flush=True)
        results = [
            measured(
                "redis-py pipelined XADD, 2 processes",
                lambda: two_processes(_redis_py_worker, server.url, str(data)),
            ),
            measured(
                "atlasbus publisher, no Spark, 2 processes, exactlyOnce=false",
                lambda: two_processes(_atlasbus_worker, server.url, str(data), False),
            ),
            measured(
                "atlasbus publisher, no Spark, 2 processes, exactlyOnce=true",
                lambda: two_processes(_atlasbus_worker, server.url, str(data), True),
            ),
        ]
        spark = spark_session()
        warm = Path(tmp) / "warm-up"
        write_input(warm, 20_000)
        spark_batch(spark, server.url, warm, True)  # warm up: Python workers, code paths
        spark_stream(spark, server.url, warm, True, str(Path(tmp) / "ck-warm-up"))
        client.delete(stream)
        runs = iter(range(1_000_000))
        for exactly_once in (False, True):
            results.append(
                measured(
                    f"Spark batch sink, exactlyOnce={str(exactly_once).lower()}",
                    lambda e=exactly_once: spark_batch(spark, server.url, data, e),
                )
            )
        for exactly_once in (False, True):
            results.append(
                measured(
                    f"Spark streaming sink, exactlyOnce={str(exactly_once).lower()}",
                    lambda e=exactly_once: spark_stream(  # a new checkpoint for every run
                        spark, server.url, data, e, str(Path(tmp) / f"ck-{next(runs)}")
                    ),
                )
            )
        spark.stop()

    by_name = {r["name"]: r["rows_per_s"] for r in results}
    raw = by_name["redis-py pipelined XADD, 2 processes"]
    batch_true = by_name["Spark batch sink, exactlyOnce=true"]
    batch_false = by_name["Spark batch sink, exactlyOnce=false"]
    stream_true = by_name["Spark streaming sink, exactlyOnce=true"]
    stream_false = by_name["Spark streaming sink, exactlyOnce=false"]
    summary = {
        "batch_sink_vs_redis_py": round(batch_true / raw, 2),
        "streaming_vs_batch": round(stream_true / batch_true, 3),
        "exactly_once_cost_batch": round(1 - batch_true / batch_false, 3),
        "exactly_once_cost_streaming": round(1 - stream_true / stream_false, 3),
    }
    print()
    print(f"{'what':<64} {'rows/s':>9}  {'x redis-py':>10}")
    for result in results:
        print(
            f"{result['name']:<64} {result['rows_per_s']:>9,}  {result['rows_per_s'] / raw:>10.2f}"
        )
    print()
    for key, value in summary.items():
        print(f"{key:<32} {value}")
    report = {"benchmark": "sink", "rows": rows, "results": results, "summary": summary}
    write_report(RESULTS, report, load_before, os.getloadavg())
    print(f"\nwritten to {RESULTS}")


if __name__ == "__main__":
    main()
