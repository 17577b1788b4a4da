"""Test helpers that publish like the bus does (pipelined XADD of envelopes) and read back."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import redis


def envelope(topic: str, index: int, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "topic": topic,
        "priority": str(index % 10),
        "payload": json.dumps({"n": index, "topic": topic, "note": "événement ✓"}),
        "correlation_id": uuid.uuid4().hex,
        "tracing": json.dumps({"trace_id": f"trace-{index}"}),
        "metadata": "{}",
        "delivery_attempts": "0",
        "enqueued_time": f"{time.time():.6f}",
    }
    fields.update(overrides)
    return fields


def publish(
    r: redis.Redis, prefix: str, topic: str, count: int, *, start: int = 0, chunk: int = 1000
) -> list[str]:
    """Publish ``count`` envelopes numbered from ``start``; returns their entry IDs in order."""
    ids: list[str] = []
    stream = f"{prefix}:{topic}"
    for offset in range(start, start + count, chunk):
        pipe = r.pipeline(transaction=False)
        for index in range(offset, min(offset + chunk, start + count)):
            pipe.xadd(stream, envelope(topic, index))
        ids.extend(i.decode() for i in pipe.execute())
    return ids


def payload_numbers(rows: list[Any]) -> list[int]:
    return [json.loads(row["payload"])["n"] for row in rows]
