"""A Spark application in its own process, on a deployment the suite's session is not.

``connect``: ``SparkSession.builder.remote("local[2]")`` starts a local Spark Connect server
in the process that asks for it, which the suite's classic session cannot share. The client
imports no atlasbus module: the server finds the data source by its name (atlasbus installed
where its Python workers run), as on a real Connect deployment.

``cluster``: master ``local-cluster[2,1,1024]``, a standalone cluster of two workers whose
executors are JVMs of their own, each forking its own Python workers, as on a real cluster:
the driver plans, and what a task needs travels in its pickled partition.

Either way it writes through the sink (four tasks), reads the entries in a batch, runs a
streaming query (into a parquet sink) twice on one checkpoint with more entries written in
between, and sends a bad option; then prints one JSON line of what it saw.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    deployment, url, prefix, checkpoint, output = sys.argv[1:6]
    os.environ["PYSPARK_PYTHON"] = sys.executable  # before the JVM starts
    from pyspark.sql import SparkSession

    if deployment == "connect":
        spark = SparkSession.builder.remote("local[2]").getOrCreate()
    else:
        spark = (
            SparkSession.builder.master("local-cluster[2,1,1024]")
            .config("spark.python.daemon.module", "pyspark_atlasbus.worker_daemon")
            .getOrCreate()
        )
    seen: dict[str, object] = {"session": type(spark).__module__}
    if deployment == "cluster":  # executors register after the session starts: wait for both
        deadline = time.monotonic() + 120
        while (executors := registered_executors(spark)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        seen["executors"] = executors

    def publish(numbers: range) -> None:
        rows = [("orders", json.dumps({"n": n})) for n in numbers]
        frame = spark.createDataFrame(rows, "topic string, payload string").repartition(4)
        frame.write.format("atlasbus").mode("append").option("url", url).option(
            "streamPrefix", prefix
        ).save()

    def read_stream() -> list[str]:
        """Run the query until it has read what there is; every ID its parquet sink holds."""
        query = (
            spark.readStream.format("atlasbus")
            .option("url", url)
            .option("streamPrefix", prefix)
            .option("topics", "orders")
            .option("maxEntriesPerPartition", "40")  # several tasks, on both executors
            .load()
            .select("id")
            .writeStream.format("parquet")
            .option("path", output)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        return [row["id"] for row in spark.read.parquet(output).collect()]

    publish(range(100))
    batch = spark.read.format("atlasbus").option("url", url).option("streamPrefix", prefix)
    rows = batch.option("topics", "orders").load().select("id", "payload").collect()
    seen["batch"] = [[row["id"], row["payload"]] for row in rows]
    seen["first_run"] = read_stream()
    publish(range(100, 150))
    seen["both_runs"] = read_stream()
    try:
        spark.read.format("atlasbus").option("url", url).option("topics", "orders").option(
            "pageSize", "zero"
        ).load().collect()
    except Exception as exc:  # what the application gets for an error in the data source
        seen["error"] = [type(exc).__name__, str(exc)]
    if deployment == "cluster":
        seen["tasks_per_executor"] = tasks_per_executor(spark)
        seen["executors_with_atlasbus_daemon"] = executors_forking_from(
            "pyspark_atlasbus.worker_daemon"
        )
    seen["client_modules"] = sorted(
        name for name in sys.modules if name.split(".")[0] in ("atlasbus", "pyspark_atlasbus")
    )
    spark.stop()
    print(json.dumps(seen))


def registered_executors(spark: object) -> int:
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()  # type: ignore[attr-defined]
    return int(status.size()) - 1  # the driver is listed too


def tasks_per_executor(spark: object) -> dict[str, int]:
    """Tasks each executor ran, from the application's REST API (the Spark UI's)."""
    from urllib.request import urlopen

    context = spark.sparkContext  # type: ignore[attr-defined]
    address = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/executors"
    with urlopen(address, timeout=30) as reply:
        executors = json.load(reply)
    return {executor["id"]: executor["totalTasks"] for executor in executors}


def executors_forking_from(module: str) -> int:
    """How many executor JVMs started below this process run a Python daemon of ``module``.

    Linux's /proc. The driver's JVM is this process's child; the executors' JVMs are its
    children, each starting a daemon per worker environment. A forked Python worker keeps its
    daemon's command line, so only processes whose parent is a JVM count; the suite's own
    session, in another process tree, is not counted.
    """
    parents: dict[int, int] = {}
    named: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                parents[int(entry)] = int(file.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                if module.encode() in file.read().split(b"\0"):
                    named.add(int(entry))
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
    drivers = {pid for pid, parent in parents.items() if parent == os.getpid()}
    executors = {pid for pid, parent in parents.items() if parent in drivers}
    return len({parents[pid] for pid in named if parents[pid] in executors})


if __name__ == "__main__":
    main()
