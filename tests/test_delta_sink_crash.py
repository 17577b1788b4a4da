"""Source → Spark's Delta sink (``writeStream.format("delta")``), exactly once across SIGKILLs.

The crash test's pattern (test_crash_recovery.py) with the Delta Lake jars: a publisher appends
at a steady rate with bursts while the query, in a child process, is SIGKILLed three times
(driver, JVM and Python workers) and restarted on its checkpoint; a last run drains with
availableNow. The Delta table then holds every published correlation ID exactly once, read by
delta-spark and by delta-rs alike. Needs the jars (``delta_spark``: fails in CI without them).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from test_crash_recovery import Publisher, _crash_and_recover, _report

TOTAL = 10_000
KILLS = 3


@pytest.mark.delta_jars
def test_delta_sink_exactly_once_across_three_driver_kills(
    delta_spark: Any, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    out = str(tmp_path / "events")
    args = ["--url", redis_url, "--prefix", prefix, "--checkpoint", str(tmp_path / "ck")]
    args += ["--sink", "delta", "--out", out]
    publisher = Publisher(redis_url, prefix, total=TOTAL, per_second=100, burst=300)
    log = tmp_path / "events" / "_delta_log"
    versions: list[int] = []

    def committed_a_batch() -> None:
        """Until the Delta table has a version this run wrote (a micro-batch committed), or
        the publisher is done (a run may then find nothing new to write)."""
        seen = versions[-1] if versions else -1
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            latest = max((int(p.stem) for p in log.glob("*.json")), default=-1)
            if latest > seen:
                versions.append(latest)
                return
            if not publisher.is_alive():
                return
            time.sleep(0.05)
        raise AssertionError("the query committed no micro-batch within 120 s")

    run = _crash_and_recover(
        args,
        redis_url,
        prefix,
        tmp_path / "query.log",
        publisher=publisher,
        kills=KILLS,
        running=(0.0, 1.5),
        progressed=committed_a_batch,
    )
    written = [
        row["correlation_id"] for row in delta_spark.read.format("delta").load(out).collect()
    ]
    _report("delta", run["published"], written, run["restart_seconds"], kills=KILLS)
    assert Counter(written) == Counter(run["published"])
    table = DeltaTable(out)
    print(f"delta sink: killed after versions {versions}; {table.version() + 1} versions in all")
    by_delta_rs = table.to_pyarrow_table(columns=["correlation_id"])
    assert Counter(by_delta_rs.column("correlation_id").to_pylist()) == Counter(run["published"])
