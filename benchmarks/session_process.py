"""A Spark session in a process of its own, for running queries beside the benchmark's session.

    python benchmarks/session_process.py URL [--rows 100000] [--conf KEY=VALUE ...]

Started by ``SparkSessionProcess`` (bench_start, bench_peer --pyspark-bytecode,
bench_worker_start), usually with another SPARK_HOME or other Spark settings than the
benchmark's own session: a JVM's SPARK_HOME and settings are fixed when it starts. It reads
query names on stdin, "atlasbus" (bench_source's spark_end_to_end on the stream at URL), "atlasbus,
one task per core" (the same with bench_source's one_task_per_core) or "Spark alone"
(bench_source's ceiling: pre-built batches, no Redis), and answers each with its figures
(served_process.py's protocol).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_source import one_task_per_core, prebuilt_batch, spark_ceiling, spark_end_to_end
from cpu_meter import RedisCpu, SparkCpu
from served_process import ServedProcess

QUERIES = ("atlasbus", "Spark alone")
ONE_TASK_PER_CORE = "atlasbus, one task per core"  # bench_peer's tuned atlasbus


def serve(url: str, rows: int, config: dict[str, str]) -> None:
    """Runs in the child: one session, one query per line of stdin, its figures as JSON."""
    from pyspark_atlasbus.session import local_session

    # the SPARK_HOME the parent chose (the environment's), as it is
    spark = local_session(
        "atlasbus-bench-session",
        driver_memory="2g",
        delta=False,
        config=config,
        pyspark_bytecode=False,
    )
    meter = SparkCpu.of(spark, RedisCpu(url))
    checkpoints = Path(tempfile.mkdtemp(prefix="atlasbus-bench-session-"))
    batch_file = checkpoints / "prebuilt.arrow"
    prebuilt_batch(url, batch_file)
    print("READY", flush=True)
    for line in sys.stdin:
        query = line.strip()
        if query == "atlasbus":
            run = spark_end_to_end(spark, url, rows, checkpoints, meter)
        elif query == ONE_TASK_PER_CORE:
            tuned = one_task_per_core(rows)
            run = spark_end_to_end(spark, url, rows, checkpoints, meter, tuned)
        elif query == "Spark alone":
            run = spark_ceiling(spark, batch_file, rows, checkpoints, meter)
        else:
            known = (*QUERIES, ONE_TASK_PER_CORE)
            raise SystemExit(f"unknown query {query!r}: expected one of {known}")
        print("RESULT " + json.dumps(run.figures(rows)), flush=True)
    spark.stop()


class SparkSessionProcess:
    """Runs on the benchmark's driver: a child process holding one Spark session, whose JVM
    runs from ``spark_home`` (the installed pyspark's when None), with ``config``'s Spark settings
    on top of ``local_session``'s and ``environment`` on top of this process's (which its
    JVM and Python workers inherit)."""

    def __init__(
        self,
        url: str,
        rows: int,
        spark_home: Path | None,
        log: Path,
        config: Mapping[str, str] | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **(environment or {})}
        env.pop("SPARK_HOME", None)
        if spark_home is not None:
            env["SPARK_HOME"] = str(spark_home)
        command = [sys.executable, __file__, url, "--rows", str(rows)]
        for key, value in (config or {}).items():
            command += ["--conf", f"{key}={value}"]
        self.served = ServedProcess(command, log, "a Spark session", env)

    def run(self, query: str) -> dict[str, Any]:
        """One query of ``QUERIES`` or ``ONE_TASK_PER_CORE``: its ``QueryRun.figures``."""
        return self.served.ask(query)

    def close(self) -> None:
        self.served.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting, KEY=VALUE")
    arguments = parser.parse_args()
    settings = dict(setting.split("=", 1) for setting in arguments.conf)
    serve(arguments.url, arguments.rows, settings)
