"""The peer's side of bench_peer.py: spark-redis reading one Redis stream into a noop sink.

Runs in the peer's own virtualenv (pyspark 3.5, which spark-redis 3.1.0 supports: Scala 2.12,
Spark 3.x), never in atlasbus's; bench_peer.py creates that virtualenv and starts this script:

    benchmarks/.peer-venv/bin/python benchmarks/peer_spark_redis.py \
        --host 127.0.0.1 --port 6379 --stream bench:orders --rows 1000000 --repeat 2

spark-redis's jar comes from Maven Central through Spark's own resolver
(``spark.jars.packages``, cached in ~/.ivy2). The query is the one its documentation shows
(``readStream.format("redis")``, ``stream.keys``, a schema naming the stream's fields, ``_id``
for the entry ID), started from the stream's beginning (``stream.offsets`` at ``0-0``, as its
documentation says to process a stream from the start), with its documented options for
parallelism (``stream.parallelism``: consumers of one group, one Spark partition each) and
batch size (``stream.read.batch.size``: COUNT of each XREADGROUP), trigger availableNow, into
Spark's noop sink. Each repeat reads with a new consumer group, so each reads every entry.

Prints one JSON object on its last line: rows read (from the query's progress), seconds from
start() to the end, the micro-batches' addBatch time, per-batch rows and durations, and the
JVM's CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from cpu_meter import process_cpu

# The issue names 3.1.0 (June 2022, the latest release); the Maven Central this machine reaches
# lists 2.4.2 to 3.0.0 only (its maven-metadata.xml), so the newest it can have is the default.
PACKAGE = "com.redislabs:spark-redis_2.12:3.0.0"
FIELDS = (
    "topic",
    "priority",
    "payload",
    "correlation_id",
    "tracing",
    "metadata",
    "delivery_attempts",
    "enqueued_time",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--checkpoints", default="/tmp")
    parser.add_argument("--package", default=PACKAGE, help="spark-redis's Maven coordinate")
    parser.add_argument("--serve", action="store_true", help="runs asked for on stdin")
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql.types import StringType, StructField, StructType

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-peer-spark-redis")
        .config("spark.jars.packages", args.package)
        .config("spark.redis.host", args.host)
        .config("spark.redis.port", str(args.port))
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    schema = StructType([StructField(name, StringType()) for name in ("_id", *FIELDS)])

    if args.serve:
        # One run per line on stdin ("<parallelism> <batch size>"), one JSON line per run on
        # stdout, until stdin closes: bench_peer.py interleaves these runs with atlasbus's.
        print("READY", flush=True)
        for line in sys.stdin:
            parallelism, batch_size = (int(x) for x in line.split())
            run = run_once(spark, schema, args, parallelism, batch_size, jvm_pid)
            print("RESULT " + json.dumps(run), flush=True)
        spark.stop()
        return
    runs = []
    for attempt in range(args.repeat + 1):  # the first run warms the JVM up, as atlasbus's does
        run = run_once(spark, schema, args, args.parallelism, args.batch_size, jvm_pid)
        run["warm_up"] = attempt == 0
        runs.append(run)
        print(
            f"  spark-redis run {attempt}: {run['rows']:,} rows in {run['seconds']:.2f} s "
            f"({run['rows'] / run['seconds']:,.0f}/s){' (warm-up)' if attempt == 0 else ''}",
            flush=True,
        )
    spark.stop()
    print(json.dumps({"package": args.package, "pyspark": pyspark_version(), "runs": runs}))


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def run_once(
    spark: Any, schema: Any, args: Any, parallelism: int, batch_size: int, jvm_pid: int
) -> dict[str, Any]:
    """Read the whole stream once, with a new consumer group, into the noop sink."""
    group = f"bench-{uuid.uuid4().hex[:8]}"
    offsets = {"offsets": {args.stream: {"groupName": group, "offset": "0-0"}}}
    frame = (
        spark.readStream.format("redis")
        .option("stream.keys", args.stream)
        .option("stream.offsets", json.dumps(offsets))
        .option("stream.group.name", group)
        .option("stream.parallelism", parallelism)
        .option("stream.read.batch.size", batch_size)
        .schema(schema)
        .load()
    )
    checkpoint = Path(args.checkpoints) / f"peer-{uuid.uuid4().hex}"
    cpu_before = process_cpu(jvm_pid)
    started = time.perf_counter()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    cpu = process_cpu(jvm_pid) - cpu_before
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    batches = [
        {
            "rows": p["numInputRows"],
            "add_batch_ms": p["durationMs"].get("addBatch", 0),
            "trigger_ms": p["durationMs"].get("triggerExecution", 0),
        }
        for p in progress
    ]
    return {
        "parallelism": parallelism,
        "batch_size": batch_size,
        "rows": sum(b["rows"] for b in batches),
        "seconds": elapsed,
        "add_batch_s": sum(b["add_batch_ms"] for b in batches) / 1000,
        "jvm_cpu_s": cpu,
        "batches": batches,
    }


if __name__ == "__main__":
    main()
