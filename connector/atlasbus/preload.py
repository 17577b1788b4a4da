"""Load ahead of any task what an executor's first read or write would load (executor).

A Python worker that reads a bus stream for the first time imports atlasbus, redis-py, pandas
(pyarrow imports it on its first ``pa.array``) and numba, and loads the compiled loops'
machine code from numba's disk cache: 1.5-1.6 CPU-s on this project's machines, paid again
by every fresh worker. Spark forks its workers from one daemon process per executor and reaps
a worker that has been idle for a minute, so a query whose triggers come less often than that
pays it at every trigger. A daemon that has called ``load_executor_code`` before forking
(``pyspark_atlasbus.worker_daemon``) hands all of it to every worker for free.

It decodes a small page as a task would (cut into columns, and as hiredis's lists; one entry
well formed, one not) and encodes two rows as the sink does, so that every compiled loop those
paths call has its machine code loaded. Nothing here talks to Redis or starts a thread of its
own; importing numpy and pyarrow starts theirs (jemalloc's background thread, and OpenBLAS's
pool unless ``OMP_NUM_THREADS`` is 1), which both libraries reset in a forked child
(``pthread_atfork``).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence

# What a task imports besides what decoding and encoding below import (redis-py's import
# alone is 0.15-0.25 s).
_EXECUTOR_MODULES = ("redis", "atlasbus.reader", "atlasbus.xrange_pages", "atlasbus.publisher")

_TOPIC = "preload"
_STREAM = "atlas:preload"
_ENTRIES: Sequence[tuple[bytes, Sequence[tuple[bytes, bytes]]]] = (
    (
        b"1700000000000-0",
        (
            (b"topic", _TOPIC.encode()),
            (b"priority", b"5"),
            (b"payload", json.dumps({"id": 1, "items": [{"sku": "A", "qty": 2}]}).encode()),
            (b"correlation_id", b"c0ffee"),
            (b"tracing", b'{"trace_id": "abc"}'),
            (b"metadata", b"{}"),
            (b"delivery_attempts", b"0"),
            (b"enqueued_time", b"1700000000.000001"),
        ),
    ),
    (
        b"1700000000000-1",
        (
            (b"topic", _TOPIC.encode()),
            (b"priority", b"high"),
            (b"payload", b"[not json"),
            (b"correlation_id", b"c0ffee"),
            (b"tracing", b'{"trace_id": 7}'),
            (b"metadata", b"{"),
            (b"delivery_attempts", b"-1"),
            (b"enqueued_time", b"soon"),
        ),
    ),
)


def load_executor_code() -> None:
    """Import the executors' modules and load every compiled loop's machine code."""
    import numpy as np

    for module in _EXECUTOR_MODULES:
        importlib.import_module(module)
    from atlasbus.decode import decode_envelope_page, decode_raw
    from atlasbus.xrange_pairs import PairWalk, cut_pairs, walk_pairs
    from atlasbus.xrange_reply import COMPLETE, Walk, cut_reply, walk_reply

    reply = _xrange_reply(_ENTRIES)
    buffer = np.frombuffer(bytearray(reply), np.uint8)
    walk, pair_walk = Walk(), PairWalk()
    if (
        walk_reply(buffer, len(reply), walk) != COMPLETE
        or walk_pairs(buffer, len(reply), pair_walk) != COMPLETE
    ):
        raise RuntimeError("the preload's XRANGE reply did not walk to its end")
    page = cut_reply(buffer, walk)
    if page is None:
        raise RuntimeError("the preload's XRANGE reply was not cut into columns")
    for entries in (page, page.entries()):
        decode_envelope_page(entries, topic=_TOPIC, stream=_STREAM, include_raw_fields=False)
        decode_raw(entries, topic=_TOPIC, stream=_STREAM)
    pairs = cut_pairs(buffer, [pair_walk])
    decode_envelope_page(pairs, topic=_TOPIC, stream=_STREAM, include_raw_fields=False)
    decode_raw(pairs, topic=_TOPIC, stream=_STREAM)
    _encode_two_rows()


def _encode_two_rows() -> None:
    import pyarrow as pa

    from atlasbus.encode import encode_batch
    from atlasbus.sink_options import parse_sink_options

    rows = pa.RecordBatch.from_pydict(
        {
            "payload": ['{"id": 1}', "[not an object]"],
            "tracing": pa.array([[("trace_id", "abc")], None], pa.map_(pa.string(), pa.string())),
        }
    )
    options = parse_sink_options({"url": "redis://localhost", "topic": _TOPIC})
    encode_batch(rows, options, enqueued_time=0.0)


def _xrange_reply(entries: Sequence[tuple[bytes, Sequence[tuple[bytes, bytes]]]]) -> bytes:
    """The RESP2 bytes Redis sends for an XRANGE that finds ``entries``."""

    def bulk(value: bytes) -> bytes:
        return b"$%d\r\n%s\r\n" % (len(value), value)

    parts = [b"*%d\r\n" % len(entries)]
    for entry_id, fields in entries:
        parts.append(b"*2\r\n" + bulk(entry_id) + b"*%d\r\n" % (2 * len(fields)))
        parts.extend(bulk(name) + bulk(value) for name, value in fields)
    return b"".join(parts)
