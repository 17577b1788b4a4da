"""A streaming query's start, with pyspark compiled at each start and with its bytecode.

    python benchmarks/bench_start.py [--rows 100000] [--repeat 8]

Spark starts a fresh Python interpreter for each streaming query's source runner and puts
``$SPARK_HOME/python/lib/pyspark.zip`` first on its path; pip's pyspark ships that zip without
bytecode, so the runner compiles pyspark every time. ``pyspark_atlasbus.spark_home`` builds a
SPARK_HOME that mirrors the installed one but for a pyspark.zip that carries bytecode (what
``local_session`` starts from by default).

Two Spark sessions run side by side, each in its own process: one with the installed
SPARK_HOME, one with the mirror. They take turns, query by query, on the same stream of
--rows envelopes (envelope_stream.py's) on one private redis-server, each query into the noop
sink with availableNow: atlasbus, and Spark alone (a Python source of pre-built batches that
asks Redis nothing). Round 0 warms both up and is not counted. Reports, per session and query,
the median and range of the start (start() to the first micro-batch) and of the whole query;
writes benchmarks/results/start.json and start.png.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from envelope_stream import publish
from installed_bytecode import compile_atlasbus
from run_report import benchmark_parser, chart_note, pyplot, save_chart, write_report
from session_process import QUERIES, SparkSessionProcess

from pyspark_atlasbus.spark_home import bytecode_spark_home

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "start.json"
HOMES = ("pyspark.zip as installed", "pyspark.zip with bytecode")


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def chart(report: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return

    figure, axis = plt.subplots(figsize=(9, 3.5))
    labels, medians, lows, highs = [], [], [], []
    for query in QUERIES:
        for home in HOMES:
            start = report["figures"][home][query]["start_s"]
            labels.append(f"{query}, {home}")
            medians.append(start["median"])
            lows.append(start["median"] - start["min"])
            highs.append(start["max"] - start["median"])
    positions = range(len(labels))
    axis.barh(list(positions), medians, xerr=[lows, highs], capsize=3)
    for p, m in zip(positions, medians, strict=True):
        axis.text(m, p, f" {m:.2f} s", va="center", fontsize=8)
    axis.set_yticks(list(positions), labels, fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel("seconds from start() to the first micro-batch (median, range)")
    axis.set_title("A streaming query's start: pyspark compiled each time, or its bytecode")
    save_chart(figure, path)


def main() -> None:
    compile_atlasbus()
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=8)
    args = parser.parse_args()

    from atlasbus.sandbox.redis_server import RedisServer

    mirror = bytecode_spark_home()
    server = RedisServer().start()
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        home: {query: [] for query in QUERIES} for home in HOMES
    }
    sessions: dict[str, SparkSessionProcess] = {}
    try:
        publish(server.url, args.rows)
        load_before = os.getloadavg()
        logs = RESULTS.parent
        sessions[HOMES[0]] = SparkSessionProcess(
            server.url, args.rows, None, logs / "start-installed.log"
        )
        sessions[HOMES[1]] = SparkSessionProcess(
            server.url, args.rows, mirror, logs / "start-bytecode.log"
        )
        for attempt in range(args.repeat + 1):  # round 0 warms both sessions up
            order = HOMES if attempt % 2 == 0 else HOMES[::-1]
            for query in QUERIES:
                for home in order:
                    run = sessions[home].run(query)
                    figures = {"start_s": run["start_s"], "seconds": run["seconds"]}
                    print(
                        f"  round {attempt}, {query}, {home}: start {figures['start_s']:.2f} s, "
                        f"query {figures['seconds']:.2f} s{' (warm-up)' if attempt == 0 else ''}",
                        flush=True,
                    )
                    if attempt:
                        runs[home][query].append(figures)
        load_after = os.getloadavg()
    finally:
        for session in sessions.values():
            session.close()
        server.stop()

    figures = {
        home: {
            query: {
                key: summary([run[key] for run in runs[home][query]])
                for key in ("start_s", "seconds")
            }
            for query in QUERIES
        }
        for home in HOMES
    }
    print(f"\n{'query, SPARK_HOME':<44}{'start (median, range)':>26}{'whole query':>14}")
    for query in QUERIES:
        for home in HOMES:
            start = figures[home][query]["start_s"]
            whole = figures[home][query]["seconds"]["median"]
            span = f"{start['median']:.2f} ({start['min']:.2f}-{start['max']:.2f}) s"
            print(f"{query + ', ' + home:<44}{span:>26}{whole:>12.2f} s")
    saved = {
        query: round(
            figures[HOMES[0]][query]["start_s"]["median"]
            - figures[HOMES[1]][query]["start_s"]["median"],
            3,
        )
        for query in QUERIES
    }
    print(f"start saved by the bytecode (median against median): {saved}")
    report = {
        "benchmark": "start",
        "rows": args.rows,
        "rounds": args.repeat,
        "figures": figures,
        "start_saved_s": saved,
        "runs": runs,
    }
    write_report(RESULTS, report, load_before, load_after)
    chart(report, RESULTS.with_suffix(".png"))
    print(f"results in {RESULTS}{chart_note(RESULTS.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
