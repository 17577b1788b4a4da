"""atlasbus against the peer, spark-redis, reading the same stream on the same Redis in one run.

    python benchmarks/bench_peer.py [--rows 1000000] [--repeat 2]

spark-redis (RedisLabs) is the only other Structured Streaming source for Redis Streams. It
runs on Scala 2.12 and Spark 3.x, so it gets its own virtualenv with pyspark 3.5
(benchmarks/.peer-venv, git-ignored, created here on first use) and its jar from Maven Central
through Spark's resolver; none of its code is in this repository. Its side of the run is
``peer_spark_redis.py``, started in that virtualenv.

One private redis-server, one stream of --rows envelopes (envelope_stream.py's), then rounds of:

* atlasbus: ``readStream.format("atlasbus")`` -> noop sink, availableNow, ``local[2]``, its
  documented parallelism and batch-size options at their defaults (``maxEntriesPerPartition``
  250,000: 4 tasks for 1M entries; ``pageSize`` 1,000), every entry decoded as the contract
  says; and again with ``format=raw`` (the fields as a map of strings, as spark-redis gives);
* atlasbus tuned as spark-redis is: ``maxEntriesPerPartition`` half of --rows, one task per
  core (bench_source's ``one_task_per_core``), as ``stream.parallelism`` 2 is one consumer
  per core;
* Spark alone: the same query shape fed pre-built Arrow batches of decoded envelopes by a
  Python source that asks Redis nothing (bench_source.py's ceiling): what the Python Data
  Source path itself costs;
* spark-redis: ``readStream.format("redis")`` -> noop sink, availableNow, ``local[2]``, every
  field a string column, with ``stream.parallelism`` 2 (one consumer per core) and
  ``stream.read.batch.size`` 1,000 (as atlasbus's page), and at its defaults (1 consumer, 100
  entries per XREADGROUP).

Both JVMs stay up for the whole run and the contenders take turns, so each round sees the
same machine; round 0 warms both up and is not counted. Every run must read exactly --rows
rows. Reports rows/s end to end (start() to the end) and per batch (rows over the batch's
addBatch time), best of --repeat rounds, the ratios per round, and CPU seconds. Writes
benchmarks/results/peer.json and peer.png (peer-5M.json and peer-5M.png for --rows 5000000;
spark-redis's own log: peer-spark-redis.log).

With ``--pyspark-bytecode`` a second Spark session joins the rounds, in a process of its own
whose JVM runs from a SPARK_HOME whose pyspark.zip carries bytecode
(``pyspark_atlasbus.spark_home``, what ``local_session`` starts from by default; the
benchmark's own session starts from the installed pyspark as it is): atlasbus and Spark
alone run there too, so each round compares both SPARK_HOMEs and spark-redis on the same
machine; results go to peer-bytecode.json (peer-5M-bytecode.json).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_source import one_task_per_core, prebuilt_batch, spark_ceiling, spark_end_to_end
from cpu_meter import RedisCpu, SparkCpu
from envelope_stream import STREAM, publish
from installed_bytecode import compile_atlasbus
from run_report import benchmark_parser, chart_note, pyplot, results_for, save_chart, write_report
from served_process import ServedProcess
from session_process import ONE_TASK_PER_CORE, SparkSessionProcess

from pyspark_atlasbus.spark_home import bytecode_spark_home

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "peer.json"


PEER_VENV = HERE / ".peer-venv"
PEER_PYSPARK = "pyspark>=3.5,<3.6"
PEER_PACKAGE = "com.redislabs:spark-redis_2.12:3.0.0"  # peer_spark_redis.py's default


def peer_python() -> Path:
    """The peer's virtualenv's interpreter, made (pyspark 3.5 from PyPI) when missing."""
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {PEER_VENV} with {PEER_PYSPARK} ...", flush=True)
        subprocess.run(["python3", "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", PEER_PYSPARK], check=True)
    return python


class Peer:
    """spark-redis in its own virtualenv and JVM, kept up between runs (``--serve``)."""

    def __init__(self, url: str, rows: int, log: Path) -> None:
        host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        command = [
            str(peer_python()),
            str(HERE / "peer_spark_redis.py"),
            *("--host", host, "--port", port, "--stream", STREAM, "--rows", str(rows)),
            *("--checkpoints", tempfile.mkdtemp(prefix="atlasbus-bench-peer-"), "--serve"),
        ]
        self.served = ServedProcess(command, log, "spark-redis")

    def run(self, parallelism: int, batch_size: int) -> dict[str, Any]:
        return self.served.ask(f"{parallelism} {batch_size}")

    def close(self) -> None:
        self.served.close()


CONTENDERS: dict[str, tuple[str, Any]] = {
    "Spark alone: a Python source of pre-built batches": ("ceiling", {}),
    "atlasbus": ("atlasbus", {}),
    "atlasbus format=raw": ("atlasbus", {"format": "raw"}),
    "atlasbus, one task per core": ("atlasbus", ONE_TASK_PER_CORE),
    "spark-redis, parallelism 2, batch 1000": ("peer", (2, 1000)),
    "spark-redis defaults (1, 100)": ("peer", (1, 100)),
}
# with --pyspark-bytecode: the same queries in the session whose SPARK_HOME has the bytecode
BYTECODE_CONTENDERS: dict[str, tuple[str, Any]] = {
    "Spark alone, pyspark's bytecode in SPARK_HOME": ("bytecode", "Spark alone"),
    "atlasbus, pyspark's bytecode in SPARK_HOME": ("bytecode", "atlasbus"),
    "atlasbus, one task per core, pyspark's bytecode in SPARK_HOME": (
        "bytecode",
        ONE_TASK_PER_CORE,
    ),
}
PEER_NAME = "spark-redis, parallelism 2, batch 1000"


def paired_ratios(runs: dict[str, list[dict[str, Any]]], ours: str, theirs: str) -> list[float]:
    """``ours``'s end-to-end rate over ``theirs``'s, round by round (the warm-up left out)."""
    return [
        round(t["seconds"] / o["seconds"], 3)
        for o, t in zip(runs[ours], runs[theirs], strict=True)
        if not o["warm_up"]
    ]


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    measured = [r for r in runs if not r["warm_up"]]
    return min(measured, key=lambda r: r["seconds"])


def chart(rows_per_s: dict[str, tuple[float, float]], path: Path, rows: int) -> None:
    plt = pyplot()
    if plt is None:
        return

    labels = list(rows_per_s)
    end_to_end = [rows_per_s[k][0] / 1000 for k in labels]
    in_batch = [rows_per_s[k][1] / 1000 for k in labels]
    figure, axis = plt.subplots(figsize=(10, 1.2 + 0.55 * len(labels)))
    positions = range(len(labels))
    axis.barh([p + 0.2 for p in positions], end_to_end, 0.4, label="end to end")
    axis.barh([p - 0.2 for p in positions], in_batch, 0.4, label="per batch (addBatch)")
    for p, (e, b) in enumerate(zip(end_to_end, in_batch, strict=True)):
        axis.text(e, p + 0.2, f" {e:,.0f}k", va="center", fontsize=8)
        axis.text(b, p - 0.2, f" {b:,.0f}k", va="center", fontsize=8)
    axis.set_yticks(list(positions), labels, fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel(f"thousand rows/s, {rows:,} entries -> noop, local[2], availableNow (best run)")
    axis.set_title("atlasbus and spark-redis: same stream, same Redis, same run", fontsize=10)
    axis.set_xlim(0, max(in_batch + end_to_end) * 1.15)
    axis.legend(loc="center right", fontsize=8)
    save_chart(figure, path)


def main() -> None:
    compile_atlasbus()
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--redraw", action="store_true", help="only draw the chart from the JSON")
    parser.add_argument(
        "--pyspark-bytecode",
        action="store_true",
        help="run atlasbus's JVM from a SPARK_HOME whose pyspark.zip carries bytecode",
    )
    args = parser.parse_args()
    results = results_for(RESULTS, args.rows)
    if args.pyspark_bytecode:
        results = results.with_name(f"{results.stem}-bytecode{results.suffix}")
    if args.redraw:
        saved = json.loads(results.read_text())["rates"]
        rates = {k: (v["end_to_end"], v["per_batch"]) for k, v in saved.items()}
        chart(rates, results.with_suffix(".png"), args.rows)
        return
    os.environ["PYSPARK_PYTHON"] = sys.executable
    peer_python()

    from atlasbus.sandbox.redis_server import RedisServer

    server = RedisServer().start()
    contenders = {**CONTENDERS, **(BYTECODE_CONTENDERS if args.pyspark_bytecode else {})}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    bytecode_session = None
    try:
        print(f"publishing {args.rows:,} envelopes to {STREAM} ...", flush=True)
        publish(server.url, args.rows)
        load_before = os.getloadavg()
        peer = Peer(server.url, args.rows, RESULTS.with_name("peer-spark-redis.log"))
        from pyspark_atlasbus.session import local_session

        if args.pyspark_bytecode:
            bytecode_session = SparkSessionProcess(
                server.url,
                args.rows,
                bytecode_spark_home(),
                RESULTS.with_name("peer-session-bytecode.log"),
            )
        spark = local_session(
            "atlasbus-bench-peer", driver_memory="4g", delta=False, pyspark_bytecode=False
        )
        redis_cpu = RedisCpu(server.url)
        meter = SparkCpu.of(spark, redis_cpu)
        checkpoints = Path(tempfile.mkdtemp(prefix="atlasbus-bench-peer-"))
        batch_file = checkpoints / "prebuilt.arrow"
        prebuilt_batch(server.url, batch_file)
        for attempt in range(args.repeat + 1):  # round 0 warms both JVMs and the workers up
            for name, (who, how) in contenders.items():
                redis_before = redis_cpu.read()
                if who == "ceiling":
                    run = spark_ceiling(spark, batch_file, args.rows, checkpoints, meter).figures(
                        args.rows
                    )
                elif who == "atlasbus":
                    tuned = how == ONE_TASK_PER_CORE
                    options = one_task_per_core(args.rows) if tuned else how
                    run = spark_end_to_end(
                        spark, server.url, args.rows, checkpoints, meter, options
                    ).figures(args.rows)
                elif who == "bytecode":
                    assert bytecode_session is not None
                    run = bytecode_session.run(how)
                else:
                    assert isinstance(how, tuple)
                    run = peer.run(*how)
                    if run["rows"] != args.rows:
                        raise SystemExit(f"{name} read {run['rows']:,} rows, not {args.rows:,}")
                run["redis_cpu_s"] = redis_cpu.since(redis_before)
                run["warm_up"] = attempt == 0
                runs[name].append(run)
                print(
                    f"  round {attempt}, {name}: {args.rows / run['seconds']:,.0f}/s end to end, "
                    f"{args.rows / run['add_batch_s']:,.0f}/s in the batch"
                    f"{' (warm-up)' if attempt == 0 else ''}",
                    flush=True,
                )
        spark.stop()
        peer.close()
        load_after = os.getloadavg()
    finally:
        if bytecode_session is not None:
            bytecode_session.close()
        server.stop()

    figures = {name: best(rs) for name, rs in runs.items()}
    rates = {
        k: (args.rows / v["seconds"], args.rows / v["add_batch_s"]) for k, v in figures.items()
    }
    ours = rates["atlasbus"]
    print(f"\n{'what':<66}{'end to end':>12}{'per batch':>12}{'atlasbus x':>12}")
    for label, (end_to_end, in_batch) in rates.items():
        print(f"{label:<66}{end_to_end:>12,.0f}{in_batch:>12,.0f}{ours[0] / end_to_end:>12.2f}")
    print("(rows/s, best run; 'atlasbus x': atlasbus's end-to-end rate over the row's)")
    per_round = {
        name: paired_ratios(runs, name, PEER_NAME)
        for name in runs
        if name.startswith("atlasbus") and "format=raw" not in name
    }
    for name, ratios in per_round.items():
        print(f"{name} / spark-redis (2, 1000) end to end, per round: {ratios}")
    bytecode_name = "atlasbus, pyspark's bytecode in SPARK_HOME"
    paired_bytecode = per_round.get(bytecode_name, [])
    paired = per_round["atlasbus"]
    ceiling_name = "Spark alone: a Python source of pre-built batches"
    peer_vs_ceiling = paired_ratios(runs, PEER_NAME, ceiling_name)
    print(f"spark-redis (2, 1000) / Spark alone, end to end, per round: {peer_vs_ceiling}")
    report = {
        "benchmark": "peer",
        "rows": args.rows,
        "stream": STREAM,
        "peer_package": PEER_PACKAGE,
        "pyspark_bytecode": args.pyspark_bytecode,
        "rates": {
            k: {"end_to_end": round(e), "per_batch": round(b)} for k, (e, b) in rates.items()
        },
        "atlasbus_over_peer_end_to_end": round(ours[0] / rates[PEER_NAME][0], 3),
        "atlasbus_over_peer_per_batch": round(ours[1] / rates[PEER_NAME][1], 3),
        "atlasbus_over_peer_end_to_end_per_round": paired,
        "atlasbus_bytecode_over_peer_end_to_end_per_round": paired_bytecode,
        "over_peer_end_to_end_per_round": per_round,
        "peer_over_python_ceiling_end_to_end_per_round": peer_vs_ceiling,
        "runs": runs,
    }
    write_report(results, report, load_before, load_after)
    chart(rates, results.with_suffix(".png"), args.rows)
    print(f"results in {results}{chart_note(results.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
