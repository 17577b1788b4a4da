"""The stream the benchmarks read: order envelopes of the wire format on one topic (driver).

One definition of the envelope the benchmarks publish and of how they publish it, so that
their figures are for the same entries (8 fields of the wire format, about 411 bytes on the
wire), and of how a benchmark cuts the stream by time as atlasbus cuts a large range.
"""

from __future__ import annotations

import json
import time
import uuid
from itertools import pairwise

STREAM_PREFIX = "bench"
TOPIC = "orders"
STREAM = f"{STREAM_PREFIX}:{TOPIC}"


def envelope(index: int) -> dict[str, str]:
    """The ``index``-th entry's fields: an order event of the wire format."""
    payload = {
        "order_id": index,
        "customer": f"c-{index % 9973}",
        "amount": round(index * 1.37 % 1000, 2),
        "currency": "EUR",
        "items": [{"sku": "A-100", "qty": 2}, {"sku": "B-7", "qty": 1}],
        "note": "x" * 96,
    }
    return {
        "topic": TOPIC,
        "priority": str(index % 10),
        "payload": json.dumps(payload),
        "correlation_id": uuid.uuid4().hex,
        "tracing": json.dumps({"trace_id": uuid.uuid4().hex[:16]}),
        "metadata": "{}",
        "delivery_attempts": "0",
        "enqueued_time": f"{time.time():.6f}",
    }


def publish(url: str, rows: int) -> float:
    """Replace the stream with ``rows`` envelopes, pipelined; returns entries published a second."""
    import redis

    client = redis.Redis.from_url(url)
    client.delete(STREAM)
    started = time.perf_counter()
    for offset in range(0, rows, 2000):
        pipe = client.pipeline(transaction=False)
        for index in range(offset, min(offset + 2000, rows)):
            pipe.xadd(STREAM, envelope(index))
        pipe.execute()
    return rows / (time.perf_counter() - started)


def time_slices(url: str, pieces: int) -> list[tuple[str, str]]:
    """``pieces`` ID ranges splitting the stream by time, as atlasbus cuts a large range."""
    import redis

    client = redis.Redis.from_url(url)
    first = int(client.xrange(STREAM, count=1)[0][0].split(b"-")[0])
    last = int(client.xrevrange(STREAM, count=1)[0][0].split(b"-")[0])
    cuts = [first - 1 + (last - first + 1) * i // pieces for i in range(pieces + 1)]
    return [
        (f"({lo}-18446744073709551615", f"{hi}-18446744073709551615") for lo, hi in pairwise(cuts)
    ]
