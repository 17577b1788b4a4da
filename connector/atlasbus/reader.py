"""Reading one planned range on an executor: paged XRANGE, decoded into Arrow batches.

The next page is requested before the current one is decoded, so Redis and the network work
while Python decodes. Replies are read raw from the connection: redis-py's per-entry reply
parsing would build dicts only to throw them away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial

import pyarrow as pa

from atlasbus.connection import translate_errors
from atlasbus.decode import RawEntry, decode_envelopes, decode_raw
from atlasbus.planning import ReadRange
from atlasbus.source_options import SourceOptions

# Rows per yielded batch: Spark's Arrow path is much cheaper per row with large batches.
TARGET_BATCH_ROWS = 10_000


def read_range(options: SourceOptions, read: ReadRange) -> Iterator[pa.RecordBatch]:
    """Yield the entries of ``read`` in ID order, decoded per the ``format`` option."""
    decode = _decoder(options, read)
    client = options.endpoint.client()
    pool = client.connection_pool
    connection = pool.get_connection()
    awaiting_reply = False
    page_size = options.page_size
    batch_rows = max(TARGET_BATCH_ROWS, page_size)
    upto = str(read.upto)
    try:
        with translate_errors(options.endpoint):
            connection.send_command(  # type: ignore[no-untyped-call]
                "XRANGE", read.stream, read.after.exclusive(), upto, "COUNT", page_size
            )
            awaiting_reply = True
            pending: list[RawEntry] = []
            while awaiting_reply:
                page = connection.read_response()
                awaiting_reply = False
                if len(page) == page_size:
                    connection.send_command(  # type: ignore[no-untyped-call]
                        "XRANGE", read.stream, b"(" + page[-1][0], upto, "COUNT", page_size
                    )
                    awaiting_reply = True
                pending.extend(page)
                if len(pending) >= batch_rows:
                    yield decode(pending)
                    pending = []
            if pending:
                yield decode(pending)
    finally:
        if awaiting_reply:
            connection.disconnect()  # type: ignore[no-untyped-call]
        pool.release(connection)


def _decoder(
    options: SourceOptions, read: ReadRange
) -> Callable[[Sequence[RawEntry]], pa.RecordBatch]:
    if options.format == "raw":
        return partial(decode_raw, topic=read.topic, stream=read.stream)
    return partial(
        decode_envelopes,
        topic=read.topic,
        stream=read.stream,
        include_raw_fields=options.include_raw_fields,
    )
