"""atlasbus against the peer, spark-redis, reading the same stream on the same Redis in one run.

    python benchmarks/bench_peer.py [--rows 1000000] [--repeat 2]

spark-redis (RedisLabs) is the only other Structured Streaming source for Redis Streams. It
runs on Scala 2.12 and Spark 3.x, so it gets its own virtualenv with pyspark 3.5
(benchmarks/.peer-venv, git-ignored, created here on first use) and its jar from Maven Central
through Spark's resolver; none of its code is in this repository. Its side of the run is
``peer_spark_redis.py``, started in that virtualenv.

One private redis-server, one stream of --rows envelopes (bench_source.py's), then:

* atlasbus: ``readStream.format("atlasbus")`` -> noop sink, availableNow, ``local[2]``, its
  documented parallelism and batch-size options at their defaults (``maxEntriesPerPartition``
  250,000: 4 tasks for 1M entries; ``pageSize`` 1,000);
* spark-redis: ``readStream.format("redis")`` -> noop sink, availableNow, ``local[2]``, with
  ``stream.parallelism`` 2 (one consumer per core) and ``stream.read.batch.size`` 1,000 (as
  atlasbus's page), and again at its defaults (1 consumer, 100 entries per XREADGROUP).

Each is warmed up once in its own JVM and then measured --repeat times (best kept, all kept in
the JSON); every run must read exactly --rows rows. Reports rows/s end to end (start() to the
end) and per batch (rows over the batch's addBatch time), the ratios, and the CPU seconds of
each JVM, Python workers and redis-server. Writes benchmarks/results/peer.json and peer.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_source import (
    STREAM,
    STREAM_PREFIX,
    TOPIC,
    RedisCpu,
    SparkCpu,
    publish,
    spark_end_to_end,
)

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "peer.json"
CHART = RESULTS.with_suffix(".png")
PEER_VENV = HERE / ".peer-venv"
PEER_PYSPARK = "pyspark>=3.5,<3.6"


def peer_python() -> Path:
    """The peer's virtualenv's interpreter, made (pyspark 3.5 from PyPI) when missing."""
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {PEER_VENV} with {PEER_PYSPARK} ...", flush=True)
        subprocess.run(["python3", "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", PEER_PYSPARK], check=True)
    return python


def run_atlasbus(url: str, rows: int, repeat: int) -> list[dict[str, Any]]:
    from pyspark_atlasbus.session import local_session

    spark = local_session("atlasbus-bench-peer", driver_memory="4g")
    checkpoints = Path(tempfile.mkdtemp(prefix="atlasbus-bench-peer-"))
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    meter = SparkCpu(jvm_pid, RedisCpu(url))
    runs = []
    for attempt in range(repeat + 1):  # the first run warms the workers up
        run = spark_end_to_end(spark, url, rows, checkpoints, meter)
        runs.append(
            {
                "warm_up": attempt == 0,
                "rows": rows,  # spark_end_to_end checks the count
                "seconds": rows / run.rows_per_s,
                "add_batch_s": rows / run.in_batch_rows_per_s,
                "cpu": run.cpu.as_dict(),
            }
        )
        print(
            f"  atlasbus run {attempt}: {run.rows_per_s:,.0f}/s end to end"
            f"{' (warm-up)' if attempt == 0 else ''}",
            flush=True,
        )
    spark.stop()
    return runs


def run_peer(url: str, rows: int, repeat: int, parallelism: int, batch_size: int) -> dict[str, Any]:
    host_port = url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    redis_cpu = RedisCpu(url)
    before = redis_cpu.read()
    done = subprocess.run(
        [
            str(peer_python()),
            str(HERE / "peer_spark_redis.py"),
            *("--host", host, "--port", port, "--stream", STREAM, "--rows", str(rows)),
            *("--repeat", str(repeat), "--parallelism", str(parallelism)),
            *("--batch-size", str(batch_size), "--checkpoints", tempfile.mkdtemp()),
        ],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines = done.stdout.strip().splitlines()
    print("\n".join(lines[:-1]), flush=True)
    report: dict[str, Any] = json.loads(lines[-1])
    report["redis_cpu_s_all_runs"] = redis_cpu.since(before)
    for run in report["runs"]:
        if run["rows"] != rows:
            raise SystemExit(f"spark-redis read {run['rows']} rows, expected {rows}")
    return report


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    measured = [r for r in runs if not r["warm_up"]]
    return min(measured, key=lambda r: r["seconds"])


def chart(rows_per_s: dict[str, tuple[float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(rows_per_s)
    end_to_end = [rows_per_s[k][0] / 1000 for k in labels]
    in_batch = [rows_per_s[k][1] / 1000 for k in labels]
    figure, axis = plt.subplots(figsize=(8, 3.6))
    positions = range(len(labels))
    axis.barh([p + 0.2 for p in positions], end_to_end, 0.4, label="end to end")
    axis.barh([p - 0.2 for p in positions], in_batch, 0.4, label="per batch (addBatch)")
    for p, (e, b) in enumerate(zip(end_to_end, in_batch, strict=True)):
        axis.text(e, p + 0.2, f" {e:,.0f}k", va="center", fontsize=8)
        axis.text(b, p - 0.2, f" {b:,.0f}k", va="center", fontsize=8)
    axis.set_yticks(list(positions), labels, fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel("thousand rows/s, 1M entries -> noop, local[2] (best run)")
    axis.set_title("atlasbus and spark-redis on the same stream, same Redis, same run")
    axis.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    peer_python()

    from atlasbus.sandbox.redis_server import RedisServer

    server = RedisServer().start()
    try:
        print(f"publishing {args.rows:,} envelopes to {STREAM} ...", flush=True)
        publish(server.url, args.rows)
        load_before = os.getloadavg()
        atlasbus = run_atlasbus(server.url, args.rows, args.repeat)
        tuned = run_peer(server.url, args.rows, args.repeat, parallelism=2, batch_size=1000)
        defaults = run_peer(server.url, args.rows, args.repeat, parallelism=1, batch_size=100)
        load_after = os.getloadavg()
    finally:
        server.stop()

    figures = {
        "atlasbus (4 tasks, pageSize 1000)": best(atlasbus),
        "spark-redis (stream.parallelism 2, batch.size 1000)": best(tuned["runs"]),
        "spark-redis defaults (parallelism 1, batch.size 100)": best(defaults["runs"]),
    }
    rates = {
        k: (args.rows / v["seconds"], args.rows / v["add_batch_s"]) for k, v in figures.items()
    }
    ours = rates["atlasbus (4 tasks, pageSize 1000)"]
    print(f"\n{'what':<56}{'end to end':>12}{'per batch':>12}{'atlasbus x':>12}")
    for label, (end_to_end, in_batch) in rates.items():
        print(f"{label:<56}{end_to_end:>12,.0f}{in_batch:>12,.0f}{ours[0] / end_to_end:>12.2f}")
    print("(rows/s; 'atlasbus x': atlasbus's end-to-end rate over the row's)")
    report = {
        "benchmark": "peer",
        "rows": args.rows,
        "stream": f"{STREAM_PREFIX}:{TOPIC}",
        "atlasbus_rows_per_s": round(ours[0]),
        "atlasbus_in_batch_rows_per_s": round(ours[1]),
        "rates": {
            k: {"end_to_end": round(e), "per_batch": round(b)} for k, (e, b) in rates.items()
        },
        "atlasbus_over_peer_end_to_end": round(
            ours[0] / rates["spark-redis (stream.parallelism 2, batch.size 1000)"][0], 2
        ),
        "atlasbus_over_peer_per_batch": round(
            ours[1] / rates["spark-redis (stream.parallelism 2, batch.size 1000)"][1], 2
        ),
        "atlasbus_runs": atlasbus,
        "spark_redis_tuned": tuned,
        "spark_redis_defaults": defaults,
        "load_average_before_after": [round(x, 2) for x in (*load_before, *load_after)],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python benchmarks/bench_peer.py " + " ".join(sys.argv[1:]),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    chart(rates, CHART)
    print(f"results in {RESULTS}, chart in {CHART}")


if __name__ == "__main__":
    main()
