"""benchmarks/bench_planning.py drives the stream reader as Spark's micro-batch execution does.

Nothing else runs the benchmarks between rounds, and this one had stopped at its first
``group`` query once batch 0 of a ``group`` start became empty. Run here at its smallest (no
Spark, its own redis-server), it keeps running, and its round trips per trigger are the ones
docs/benchmarks.md (planning cost per trigger) states.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_planning.py"

CASES = ("start", "first", "steady", "idle")
# round trips per trigger on Redis 7, whatever the number of streams, by query and then case
ROUND_TRIPS = {
    (query, case): trips
    for query, per_case in {
        "plain": (1, 2, 2, 2),
        "cap": (1, 3, 3, 2),
        "group": (3, 3, 3, 2),
    }.items()
    for case, trips in zip(CASES, per_case, strict=True)
}
# Redis 6.2 has no entries-added counter: a stream that advanced since the last batch costs one
# XRANGE more (its first entry in range), which a capped trigger's walk already answers.
ROUND_TRIPS_REDIS_6 = {**ROUND_TRIPS, ("plain", "steady"): 3, ("group", "steady"): 4}


def test_bench_planning_runs_every_query_with_the_documented_round_trips(tmp_path: Path) -> None:
    results = tmp_path / "planning.json"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCHMARK),
            *("--streams", "10", "--entries", "4", "--repeat", "3"),
            *("--label", "test", "--results", str(results)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    this_run = json.loads(results.read_text())["runs"]["test"]
    redis_7 = int(this_run["redis"].split(".")[0]) >= 7
    expected = ROUND_TRIPS if redis_7 else ROUND_TRIPS_REDIS_6
    rows = this_run["rows"]
    assert sorted((row["query"], row["case"]) for row in rows) == sorted(expected)
    assert {(row["query"], row["case"]): row["round_trips"] for row in rows} == expected
    commands = {(row["query"], row["case"]): row["commands"] for row in rows}
    setid = "xgroup|setid" if redis_7 else "xgroup"  # Redis 7 counts subcommands apart
    # the steady trigger after one new entry moves the group on that stream alone
    assert commands[("group", "steady")][setid] == 1
    assert commands[("group", "first")][setid] == 10
    assert setid not in commands[("group", "idle")]
