"""Exactly once under a crash: SIGKILL a streaming query in the middle of publishing, restart it.

The query (atlasbus source -> atlasbus sink, ``Trigger.AvailableNow``) runs in a child process
with its own local SparkSession. The parent watches the target streams grow and, while a
micro-batch is part-way published, kills the child and everything it started with SIGKILL:
driver, JVM and Python workers, as a machine crash would. It restarts the query on the same
checkpoint, three times over the run, then lets it finish. The target streams must then hold
every input row exactly once.

Run as a script, this file is the child: ``python test_sink_exactly_once.py URL PREFIX CKPT``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from helpers import publish

ROWS = 48_000
PER_TRIGGER = 6_000  # 8 micro-batches
PER_PARTITION = 1_500  # 4 tasks per micro-batch
KILLS = 3

pytestmark = pytest.mark.spark


def run_query(url: str, prefix: str, checkpoint: str) -> int:
    """The child: the query, from wherever its checkpoint says, to the end of the input."""
    os.environ["PYSPARK_PYTHON"] = sys.executable  # before the JVM starts
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("atlasbus-crash-child")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    query = (
        spark.readStream.format("atlasbus")
        .option("url", url)
        .option("streamPrefix", prefix)
        .option("topics", "in")
        .option("maxEntriesPerTrigger", str(PER_TRIGGER))
        .option("maxEntriesPerPartition", str(PER_PARTITION))
        .load()
        .selectExpr(
            "payload",
            "concat('out', cast(get_json_object(payload, '$.n') % 2 as string)) as topic",
        )
        .writeStream.format("atlasbus")
        .option("url", url)
        .option("streamPrefix", prefix)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return 0 if query.exception() is None else 1


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc), so the kill leaves no survivor."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def kill_tree(process: subprocess.Popen[bytes]) -> None:
    for pid in descendants(process.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=30)


def test_sigkill_mid_publish_then_restart_publishes_each_row_once(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    publish(r, prefix, "in", ROWS)
    targets = [f"{prefix}:out0", f"{prefix}:out1"]

    def published() -> int:
        pipe = r.pipeline(transaction=False)
        for stream in targets:
            pipe.xlen(stream)
        return int(sum(pipe.execute()))

    checkpoint = str(tmp_path / "checkpoint")
    kills: list[int] = []
    for attempt in range(KILLS + 1):
        log = (tmp_path / f"child-{attempt}.log").open("wb")
        child = subprocess.Popen(
            [sys.executable, __file__, redis_url, prefix, checkpoint],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).parent,
        )
        if attempt == KILLS:
            assert child.wait(timeout=600) == 0, (tmp_path / f"child-{attempt}.log").read_text()
            break
        seen = published()
        deadline = time.monotonic() + 600
        while child.poll() is None and time.monotonic() < deadline:
            now = published()
            # growing, and not at a micro-batch boundary: a batch is part-way published
            if now > seen and now % PER_TRIGGER != 0 and now > max(kills, default=0):
                kill_tree(child)
                kills.append(now)
                break
            seen = now
            time.sleep(0.002)
        assert child.poll() is not None and len(kills) == attempt + 1, (
            f"the query ended (or hung) before kill {attempt + 1}; published {published()}"
        )

    assert len(kills) == KILLS and all(0 < k < ROWS for k in kills), kills
    numbers: Counter[int] = Counter()
    for stream in targets:
        for _, fields in r.xrange(stream):
            numbers[json.loads(fields[b"payload"])["n"]] += 1
    duplicated = sorted(n for n, c in numbers.items() if c > 1)
    missing = sorted(set(range(ROWS)) - set(numbers))
    assert (duplicated[:10], missing[:10]) == ([], [])
    assert numbers == Counter(range(ROWS))
    assert (r.xlen(targets[0]), r.xlen(targets[1])) == (ROWS // 2, ROWS // 2)


if __name__ == "__main__":
    sys.exit(run_query(*sys.argv[1:4]))
