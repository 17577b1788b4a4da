"""Fresh Python workers: a session's first query, and a trigger after a minute without one.

    python benchmarks/bench_worker_start.py [--rows 200000] [--repeat 3] [--idle 65]

Spark forks an executor's Python workers from a daemon and ends a worker that has been idle for
a minute. A fresh worker imports atlasbus, redis-py, pandas (pyarrow imports it) and numba and
loads the compiled loops' machine code before it reads its first page. atlasbus's daemon
(``pyspark_atlasbus.worker_daemon``, ``spark.python.daemon.module``; ``local_session`` sets
it) loads all of that once, before it forks any worker.

Two Spark sessions, each in its own process, one per daemon (pyspark's own and atlasbus's),
read the same stream of --rows envelopes (envelope_stream.py's) on one private redis-server,
taking turns query by query, each into the noop sink with availableNow. Each round starts both
sessions afresh and runs in each: its first query (the daemon starts), a query at once after
it (warm workers), and a query after --idle seconds without one (Spark has ended the idle
workers). Reports per daemon and case the median and range of the batch's time (``addBatch``),
of the whole query and of the Python workers' CPU (the daemons' processes); writes
benchmarks/results/worker-start.json and worker-start.png (worker-start-1M.json and the like
for other --rows).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from envelope_stream import publish
from installed_bytecode import compile_atlasbus
from run_report import benchmark_parser, chart_note, pyplot, save_chart, write_report
from session_process import SparkSessionProcess

from pyspark_atlasbus.session import WORKER_DAEMON

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "worker-start.json"
DEFAULT_ROWS = 200_000  # one task: one fresh worker a trigger
DAEMON_SETTING = "spark.python.daemon.module"
DAEMONS = {
    "pyspark's daemon": "pyspark.daemon",
    "atlasbus's daemon": WORKER_DAEMON[DAEMON_SETTING],  # what local_session sets
}
CASES = ("first query of a session", "at once after it", "after a minute idle")
FIGURES = ("add_batch_s", "seconds", "workers_cpu_s")


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def chart(figures: dict[str, Any], path: Path, rows: int) -> None:
    plt = pyplot()
    if plt is None:
        return

    figure, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.38
    for axis, key, label in (
        (axes[0], "add_batch_s", "seconds in the batch (addBatch)"),
        (axes[1], "workers_cpu_s", "Python workers' CPU seconds"),
    ):
        for offset, daemon in enumerate(DAEMONS):
            spans = [figures[daemon][case][key] for case in CASES]
            medians = [s["median"] for s in spans]
            errors = [
                [s["median"] - s["min"] for s in spans],
                [s["max"] - s["median"] for s in spans],
            ]
            places = [i + (offset - 0.5) * width for i in range(len(CASES))]
            axis.bar(places, medians, width, yerr=errors, capsize=3, label=daemon)
            for x, m in zip(places, medians, strict=True):
                axis.text(x, m, f"{m:.2f}", ha="center", va="bottom", fontsize=7)
        axis.set_xticks(range(len(CASES)), CASES, fontsize=8)
        axis.set_ylabel(label + " (median, range)", fontsize=8)
        axis.legend(fontsize=8)
    figure.suptitle(f"{rows:,} entries: workers forked by pyspark's daemon or by atlasbus's")
    save_chart(figure, path)


def main() -> None:
    compile_atlasbus()
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle", type=float, default=65.0, help="seconds without a query")
    args = parser.parse_args()
    results = RESULTS
    if args.rows != DEFAULT_ROWS:
        size = f"{args.rows // 1_000_000}M" if args.rows % 1_000_000 == 0 else str(args.rows)
        results = RESULTS.with_name(f"{RESULTS.stem}-{size}{RESULTS.suffix}")

    from atlasbus.sandbox.redis_server import RedisServer

    server = RedisServer().start()
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        daemon: {case: [] for case in CASES} for daemon in DAEMONS
    }
    try:
        publish(server.url, args.rows)
        load_before = os.getloadavg()
        for attempt in range(args.repeat):
            order = list(DAEMONS) if attempt % 2 == 0 else list(DAEMONS)[::-1]
            sessions = {
                daemon: SparkSessionProcess(
                    server.url,
                    args.rows,
                    None,
                    RESULTS.with_name(f"worker-start-{DAEMONS[daemon]}.log"),
                    {DAEMON_SETTING: DAEMONS[daemon]},
                )
                for daemon in order
            }
            last_query: dict[str, float] = {}
            try:
                for case in CASES:
                    for daemon in order:
                        if case == CASES[2]:
                            time.sleep(max(0.0, args.idle - (time.time() - last_query[daemon])))
                        run = sessions[daemon].run("atlasbus")
                        last_query[daemon] = time.time()
                        figures = {
                            "add_batch_s": run["add_batch_s"],
                            "seconds": run["seconds"],
                            "workers_cpu_s": run["cpu"]["readers"],
                        }
                        runs[daemon][case].append(figures)
                        print(
                            f"  round {attempt + 1}, {case}, {daemon}: batch "
                            f"{figures['add_batch_s']:.2f} s, query {figures['seconds']:.2f} s, "
                            f"workers {figures['workers_cpu_s']:.2f} CPU-s",
                            flush=True,
                        )
            finally:
                for session in sessions.values():
                    session.close()
        load_after = os.getloadavg()
    finally:
        server.stop()

    figures = {
        daemon: {
            case: {key: summary([run[key] for run in runs[daemon][case]]) for key in FIGURES}
            for case in CASES
        }
        for daemon in DAEMONS
    }
    theirs, ours = DAEMONS
    ratios = {
        case: round(
            figures[ours][case]["add_batch_s"]["median"]
            / figures[theirs][case]["add_batch_s"]["median"],
            3,
        )
        for case in CASES
    }
    print(f"\n{'case, daemon':<50}{'batch (median, range)':>26}{'query':>10}{'workers CPU':>13}")
    for case in CASES:
        for daemon in DAEMONS:
            f = figures[daemon][case]
            batch = f["add_batch_s"]
            span = f"{batch['median']:.2f} ({batch['min']:.2f}-{batch['max']:.2f}) s"
            print(
                f"{case + ', ' + daemon:<50}{span:>26}{f['seconds']['median']:>8.2f} s"
                f"{f['workers_cpu_s']['median']:>11.2f} s"
            )
    print(f"batch time, atlasbus's daemon / pyspark's (medians): {ratios}")
    report = {
        "benchmark": "worker-start",
        "rows": args.rows,
        "idle_s": args.idle,
        "figures": figures,
        "batch_ratio_atlasbus_daemon_over_pysparks": ratios,
        "runs": runs,
    }
    write_report(results, report, load_before, load_after)
    chart(figures, results.with_suffix(".png"), args.rows)
    print(f"results in {results}{chart_note(results.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
