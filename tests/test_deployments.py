"""atlasbus from a Spark Connect client and on a Spark cluster (design.md promises both).

Each runs in its own process (tests/deployment_client.py says how): the sink, a batch read
and a streaming query restarted on its checkpoint. What landed in Redis is checked here, with
redis-py, against what the application saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

CLIENT = str(Path(__file__).with_name("deployment_client.py"))
SESSION_MODULE = {
    "connect": "pyspark.sql.connect.session",
    "cluster": "pyspark.sql.session",
}


@pytest.mark.spark
@pytest.mark.parametrize("deployment", ["connect", "cluster"])
def test_sink_batch_and_resumed_stream(
    deployment: str, r: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    stream = f"{deployment}bus:orders"
    r.delete(stream)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [
            sys.executable,
            CLIENT,
            deployment,
            redis_url,
            f"{deployment}bus",
            str(tmp_path / "ck"),
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["session"] == SESSION_MODULE[deployment]
    if deployment == "connect":  # the server found atlasbus; the client never loaded it
        assert seen["client_modules"] == []
    else:
        assert seen["executors"] == 2
        tasks = seen["tasks_per_executor"]
        assert set(tasks) == {"driver", "0", "1"}
        assert tasks["driver"] == 0 and tasks["0"] > 0 and tasks["1"] > 0, tasks
        assert seen["executors_with_atlasbus_daemon"] == 2  # workers fork with atlasbus loaded

    entries = r.xrange(stream)
    ids = [entry_id.decode() for entry_id, _ in entries]
    numbers = [json.loads(fields[b"payload"])["n"] for _, fields in entries]
    assert sorted(numbers) == list(range(150))  # the sink's four tasks interleave
    first_ids = [i for i, n in zip(ids, numbers, strict=True) if n < 100]
    later_ids = [i for i, n in zip(ids, numbers, strict=True) if n >= 100]
    assert ids == first_ids + later_ids  # the second write came after the first

    payloads = {entry_id.decode(): fields[b"payload"].decode() for entry_id, fields in entries}
    assert sorted(seen["batch"]) == sorted([i, payloads[i]] for i in first_ids)
    assert sorted(seen["first_run"]) == sorted(first_ids)  # each once: no duplicate, none lost
    # the restarted query resumed where the first run stopped: each entry once in the sink
    assert sorted(seen["both_runs"]) == sorted(first_ids + later_ids)
    name, text = seen["error"]
    assert name == "AnalysisException"
    expected = "atlasbus.errors.ConfigurationError: option 'pageSize' must be a positive integer"
    assert expected in text, text
