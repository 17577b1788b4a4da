"""The README's Quick start, run as a user pastes it: unchanged, in a process of its own.

Only the environment differs: ``$REDIS_URL`` points at a redis-server of the test's own (the
Quick start uses the default stream prefix) and
``$HOME`` at a fresh folder (the Quick start keeps its checkpoint and dead letters under
``~/atlasbus-quickstart``). The bus's topics hold good entries and one malformed entry; the
enriched topic must then hold every good entry's payload once, the dead-letter table the
malformed one, and a second run publish only what arrived in between.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from atlasbus.dead_letters import DeadLetterTable
from atlasbus.sandbox.redis_server import RedisServer
from helpers import publish

README = Path(__file__).resolve().parents[1] / "README.md"


def quick_start_code() -> str:
    """The Python block under the README's "## Quick start" heading, as written."""
    section = README.read_text().split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the Quick start has one Python block"
    return blocks[0]


def run_quick_start(redis_url: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "HOME": str(home)}
    env.pop("PYSPARK_PYTHON", None)  # the Quick start sets it itself
    return subprocess.run(
        [sys.executable, "-c", quick_start_code()],
        capture_output=True,
        text=True,
        timeout=480,
        env=env,
        cwd=home,
    )


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


def test_the_quick_start_runs_as_written_and_publishes_every_entry_once(
    server: RedisServer, tmp_path: Path
) -> None:
    redis_url = server.url
    r = redis.Redis.from_url(redis_url)
    publish(r, "atlas_bus", "orders", 30)
    publish(r, "atlas_bus", "payments", 20, start=100)
    bad = r.xadd("atlas_bus:orders", {"topic": "orders", "payload": "{broken"}).decode()

    first = run_quick_start(redis_url, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    enriched = [json.loads(f[b"payload"])["n"] for _, f in r.xrange("atlas_bus:orders-enriched")]
    assert sorted(enriched) == [*range(30), *range(100, 120)]
    assert "|id" in first.stdout and "payload" in first.stdout  # the batch read's show()
    letters = DeadLetterTable(str(tmp_path / "atlasbus-quickstart" / "dead_letters"))
    assert [(row["entry_id"], row["reason"]) for row in letters.to_arrow().to_pylist()] == [
        (bad, "invalid-json")
    ]

    publish(r, "atlas_bus", "orders", 5, start=30)
    second = run_quick_start(redis_url, tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    enriched = [json.loads(f[b"payload"])["n"] for _, f in r.xrange("atlas_bus:orders-enriched")]
    assert sorted(enriched) == [*range(35), *range(100, 120)]
