"""atlasbus from a Spark Connect client: the sink, a batch read and a restarted streaming query.

The client (tests/connect_client.py, in its own process) starts a local Connect server and
imports no atlasbus module; everything atlasbus does runs on the server, which finds the data
source by its name as a classic session does. What landed in Redis is checked here, with
redis-py, against what the client saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

CLIENT = str(Path(__file__).with_name("connect_client.py"))
PREFIX = "connectbus"


@pytest.mark.spark
def test_sink_batch_and_resumed_stream_through_spark_connect(
    r: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    stream = f"{PREFIX}:orders"
    r.delete(stream)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, CLIENT, redis_url, PREFIX, str(tmp_path / "ck"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["session"] == "pyspark.sql.connect.session"
    assert seen["client_modules"] == []  # the server found atlasbus; the client never loaded it

    entries = r.xrange(stream)
    ids = [entry_id.decode() for entry_id, _ in entries]
    numbers = [json.loads(fields[b"payload"])["n"] for _, fields in entries]
    assert sorted(numbers) == list(range(150))  # the sink's two tasks interleave
    first_ids = [i for i, n in zip(ids, numbers, strict=True) if n < 100]
    later_ids = [i for i, n in zip(ids, numbers, strict=True) if n >= 100]
    assert ids == first_ids + later_ids  # the second write came after the first

    payloads = {entry_id.decode(): fields[b"payload"].decode() for entry_id, fields in entries}
    assert sorted(seen["batch"]) == sorted([i, payloads[i]] for i in first_ids)
    assert sorted(seen["first_run"]) == sorted(first_ids)  # each once: no duplicate, none lost
    # the restarted query resumed where the first run stopped: each entry once in the sink
    assert sorted(seen["both_runs"]) == sorted(first_ids + later_ids)
    assert (
        "atlasbus.errors.ConfigurationError: option 'pageSize' must be a positive integer"
        in seen["error"]
    ), seen["error"]
