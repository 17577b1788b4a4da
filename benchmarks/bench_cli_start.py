"""How long the ``atlasbus`` command takes to start, beside Python's own start in the same run.

    python benchmarks/bench_cli_start.py [--repeat 15]

Times, as the median of ``--repeat`` fresh processes each (wall seconds, from fork to exit):

* ``python -c pass``: the interpreter alone, the floor;
* ``atlasbus --version``, ``atlasbus status --help`` and ``atlasbus dlq show --help``: the
  command line and its sub-parsers (``atlasbus.cli``), nothing heavy loaded;
* ``atlasbus status`` against a private redis-server holding one stream: a whole command,
  redis-py's import and the round trips included;
* ``import pyspark_atlasbus.datasource``: the Spark adapter, which every command imported
  when the entry point lived there (pyspark's import alone).

Prints a table and writes benchmarks/results/cli-start.json.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from run_report import benchmark_parser, write_report

RESULTS = Path(__file__).parent / "results" / "cli-start.json"


def cases(url: str) -> dict[str, list[str]]:
    python = sys.executable
    return {
        "python -c pass": [python, "-c", "pass"],
        "atlasbus --version": [python, "-m", "atlasbus.cli", "--version"],
        "atlasbus status --help": [python, "-m", "atlasbus.cli", "status", "--help"],
        "atlasbus dlq show --help": [python, "-m", "atlasbus.cli", "dlq", "show", "--help"],
        "atlasbus status (a private Redis)": [
            python, "-m", "atlasbus.cli", "status", "--url", url, "--stream-prefix", "bench"
        ],
        "import pyspark_atlasbus.datasource": [
            python, "-c", "import pyspark_atlasbus.datasource"
        ],
    }  # fmt: skip


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    import redis

    from atlasbus.sandbox.redis_server import RedisServer

    load_before = os.getloadavg()
    with RedisServer() as server:
        redis.Redis.from_url(server.url).xadd("bench:orders", {"payload": "{}"})
        commands = cases(server.url)
        for command in commands.values():  # warm the file cache and bytecode, uncounted
            timed(command)
        runs: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):  # in turns, so a busy moment falls on every case alike
            for name, command in commands.items():
                runs[name].append(timed(command))
    floor = statistics.median(runs["python -c pass"])
    report: dict[str, Any] = {"median_s": {}, "runs_s": runs}
    print(f"{'command':<38} {'median s':>9} {'over python':>12}")
    for name, seconds in runs.items():
        median = statistics.median(seconds)
        report["median_s"][name] = median
        print(f"{name:<38} {median:>9.3f} {median - floor:>12.3f}")
    write_report(RESULTS, report, load_before, os.getloadavg())
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
