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

# What a task imports besides what decoding and encoding below import (redis-py's import
# alone is 0.15-0.25 s).
_EXECUTOR_MODULES = ("redis", "atlasbus.reading.range_reader", "atlasbus.publishing.publisher")


def load_executor_code() -> None:
    """Import the executors' modules and load every compiled loop's machine code."""
    for module in _EXECUTOR_MODULES:
        importlib.import_module(module)
    from atlasbus.decoding.decoder import decode_envelope_page, decode_raw
    from atlasbus.decoding.kernels.selection import compiled_kernels_usable
    from atlasbus.decoding.kernels.warmup import SAMPLE_STREAM, SAMPLE_TOPIC, sample_entries

    if compiled_kernels_usable():  # ran the sample through every kernel
        importlib.import_module("atlasbus.reading.reply_receiver")
    entries = sample_entries()  # and as hiredis's lists: the pure path, and any odd reply
    decode_envelope_page(
        entries, topic=SAMPLE_TOPIC, stream=SAMPLE_STREAM, include_raw_fields=False
    )
    decode_raw(entries, topic=SAMPLE_TOPIC, stream=SAMPLE_STREAM)
    _encode_two_rows()


def _encode_two_rows() -> None:
    import pyarrow as pa

    from atlasbus.options.sink import parse_sink_options
    from atlasbus.publishing.encoder import encode_batch

    rows = pa.RecordBatch.from_pydict(
        {
            "payload": ['{"id": 1}', "[not an object]"],
            "tracing": pa.array([[("trace_id", "abc")], None], pa.map_(pa.string(), pa.string())),
        }
    )
    options = parse_sink_options({"url": "redis://localhost", "topic": "preload"})
    encode_batch(rows, options, enqueued_time=0.0)
