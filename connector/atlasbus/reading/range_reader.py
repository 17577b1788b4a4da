"""Reading one planned range on an executor: paged XRANGE, decoded into Arrow batches.

Replies are received on a thread of their own, which asks for the next page as soon as one
has arrived, while the task's thread cuts and decodes the pages before: Redis, the network and
the decoding work at once.

With option ``deadLetterTable``, malformed entries are appended to that table (stage
``source-decode``) before the batch holding the rest is yielded, so a row is never passed on
while its neighbours' dead letters are unrecorded. The append is idempotent (a Delta app
transaction keyed by the letters' deterministic IDs), so a retried task or a replayed
micro-batch adds nothing twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from atlasbus.bus.connection import (
    FAILOVER_ATTEMPTS,
    node_of,
    on_node,
    raw_connection,
    translate_errors,
)
from atlasbus.bus.gc_pause import cyclic_gc_paused
from atlasbus.bus.slot_map import (
    FAILOVER_POLL_S,
    REDIRECT_PAUSE_S,
    is_moved,
    redirect_errors,
    refresh_slot_map,
)
from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.decoding.decoder import DecodedPage, decode_envelope_page, decode_raw
from atlasbus.decoding.kernels.selection import compiled_kernels_usable
from atlasbus.errors import RedisUnavailableError
from atlasbus.options.source import SourceOptions
from atlasbus.planning.batch_plan import ReadRange
from atlasbus.planning.data_loss import lost_in_batch, lost_while_reading, on_data_loss
from atlasbus.reading.hiredis_receiver import HiredisPages, ParsedReplies
from atlasbus.reading.read_ahead import read_ahead

if TYPE_CHECKING:  # the dead-letter package loads delta-rs: only when the option is set
    from atlasbus.dead_letters import QueryContext
    from atlasbus.reading.reply_receiver import KeptReplies, Page, Part, XrangePages

log = logging.getLogger("atlasbus.range_reader")

# Rows per yielded batch: Spark's Arrow path is much cheaper per row with large batches.
TARGET_BATCH_ROWS = 10_000
# Entries decoded at a time. Pages cut into columns hold no Python object per entry, so they
# are cut and decoded a whole batch at a time, spreading Arrow's and the compiled loops'
# per-call costs (2,000 at a time cost 15-20% more per entry). hiredis's entry lists are decoded
# 2,000 at a time: enough to spread those costs, few enough that the reply's Python objects
# stay in the CPU's caches (1,000 and 4,000 cost 8% more per entry).
COLUMN_DECODE_ROWS = TARGET_BATCH_ROWS
LIST_DECODE_ROWS = 2_000


def read_range(
    options: SourceOptions, read: ReadRange, *, context: QueryContext | None = None
) -> Iterator[pa.RecordBatch]:
    """Yield the entries of ``read`` in ID order, decoded per the ``format`` option.

    Replies are received on a thread of their own (``atlasbus.reading.read_ahead``), which sends the
    next XRANGE as soon as a reply has arrived and hands the replies over a decoding's worth at
    a time: walked replies a batch at a time, hiredis's lists ``LIST_DECODE_ROWS`` at a time
    (decoding 10,000 of those at once made the reader 15% slower, its working set of some
    170,000 Python objects no longer fitting the CPU's caches). The task's thread cuts and
    decodes them while Redis serves the next pages, and joins the decoded parts into one batch
    of ``TARGET_BATCH_ROWS`` or more for Spark.

    ``context`` names the query and micro-batch in dead letters (the Spark adapter reads it
    from the task's local properties). Runs on executors.
    """
    decode = _page_decoder(options, read)
    finish = _batch_finisher(options, context)
    batch_rows = max(TARGET_BATCH_ROWS, options.page_size)
    found = 0
    decoded: list[DecodedPage] = []
    decoded_rows = 0
    # closing: a task that fails or stops early ends the receiving thread there and then, not
    # when a traceback holding this frame lets the generator go.
    with (
        cyclic_gc_paused(),
        closing(read_ahead(partial(_received_replies, options, read))) as received,
    ):
        for replies in received:
            rows = len(replies)
            found += rows
            decoded.extend(map(decode, replies.cut()))
            decoded_rows += rows
            if decoded_rows >= batch_rows:
                yield finish(decoded)
                decoded, decoded_rows = [], 0
        if decoded:
            yield finish(decoded)
    _check_nothing_vanished(options, read, found, context)


def _received_replies(
    options: SourceOptions, read: ReadRange
) -> Generator[KeptReplies | ParsedReplies]:
    """``read``'s XRANGE replies in order, a decoding's worth at a time; on the read-ahead thread.

    The next page is asked for as soon as a reply's last byte has arrived, before any of it is
    cut. Replies are read raw from the connection: redis-py's per-entry reply parsing would
    build dicts only to throw them away.
    """
    import redis

    resume = _Resume(read.after.exclusive())
    endpoint = options.endpoint
    failures = 0
    deadline: float | None = None  # a cluster's redirects and failovers are waited out until then
    while True:
        try:
            yield from _replies_after(options, read, resume)
            return
        except (RedisUnavailableError, *redirect_errors()) as failure:  # type: ignore[misc]
            redirected = isinstance(failure, redis.ResponseError)
            if endpoint.is_sentinel and not redirected:
                failures += 1
                if failures == FAILOVER_ATTEMPTS:
                    raise
            elif endpoint.known_cluster:  # known: asking again would wait twice
                deadline = deadline or time.monotonic() + endpoint.read_timeout_s
                if time.monotonic() > deadline:
                    raise
                pause = REDIRECT_PAUSE_S if redirected else FAILOVER_POLL_S
                time.sleep(0 if is_moved(failure) else pause)
                refresh_slot_map(endpoint.client())
            else:
                raise
            log.warning(
                "reading %s on the %s: %s; going on after the last entry received",
                read.stream,
                endpoint.description,
                failure,
            )


class _Resume:
    """Where the next XRANGE starts: after the last entry handed over."""

    def __init__(self, start: str | bytes) -> None:
        self.start = start


def _replies_after(
    options: SourceOptions, read: ReadRange, resume: _Resume
) -> Generator[KeptReplies | ParsedReplies]:
    """``_received_replies`` on one connection, from ``resume.start``, which it moves on as
    replies are handed over: if the connection drops, a failover's new master goes on there."""
    page_size = options.page_size
    upto = str(read.upto)
    with (
        on_node(node_of(options.endpoint, read.stream)),
        raw_connection(options.endpoint, key=read.stream) as connection,
        translate_errors(options.endpoint),
    ):
        pages = _pages_reader(connection, any_layout=options.format == "raw")
        pages.send("XRANGE", read.stream, resume.start, upto, "COUNT", page_size)
        awaiting_reply = True
        waiting: list[Page] = []  # replies not yet handed over
        waiting_rows = 0
        waiting_last = b""
        while awaiting_reply:
            page = pages.read()
            awaiting_reply = False
            if len(page):
                waiting_last = pages.last_id(page)
            if len(page) == page_size:
                pages.send("XRANGE", read.stream, b"(" + waiting_last, upto, "COUNT", page_size)
                awaiting_reply = True
            if len(page):
                waiting.append(page)
                waiting_rows += len(page)
            del page
            if waiting and (waiting_rows >= _decode_rows(waiting) or not awaiting_reply):
                resume.start = b"(" + waiting_last
                yield pages.hand_over(waiting)
                waiting, waiting_rows = [], 0


def _pages_reader(connection: Any, *, any_layout: bool) -> XrangePages | HiredisPages:
    """The compiled kernels' reader where they serve (``atlasbus.decoding.kernels.selection``), else
    the pure path's."""
    if compiled_kernels_usable():
        from atlasbus.reading.reply_receiver import XrangePages  # loads numba: executors only

        return XrangePages(connection, any_layout=any_layout)
    return HiredisPages(connection)


def _decode_rows(waiting: list[Page]) -> int:
    """How many entries to gather before decoding: see ``read_range``."""
    if any(isinstance(page, list) for page in waiting):
        return LIST_DECODE_ROWS
    return COLUMN_DECODE_ROWS


def _check_nothing_vanished(
    options: SourceOptions, read: ReadRange, found: int, context: QueryContext | None
) -> None:
    """Compare what the task found with what planning saw; report entries deleted since.

    Runs after the range is read, so a retried task (or a replayed batch) whose entries were
    XDEL'd or trimmed in between reports them instead of passing on fewer rows silently. When
    the query is to fail, the error counts what the whole batch lost on the stream (the task
    that finds it first fails the batch, and the other pieces' losses would go untold).
    Under ``failOnDataLoss=false`` each piece records its own: together they count them all.
    """
    if read.expected is None and read.removed is None:
        return
    info = None
    if read.expected is None:
        info = StreamCatalog(options.endpoint).info([read.stream])[read.stream]
    lost = lost_while_reading(
        read.stream,
        read.after,
        read.upto,
        expected=read.expected,
        read=found,
        removed_at_planning=read.removed,
        info=info,
        first=read.first,
    )
    if lost is not None:
        if options.fail_on_data_loss:
            lost = lost_in_batch(StreamCatalog(options.endpoint), read, lost)
        on_data_loss(
            lost,
            fail_on_data_loss=options.fail_on_data_loss,
            dead_letter_table=options.dead_letter_table,
            failover_possible=options.endpoint.is_sentinel,
            topic=read.topic,
            context=context,
        )


def _page_decoder(options: SourceOptions, read: ReadRange) -> Callable[[Part], DecodedPage]:
    if options.format == "raw":
        raw = partial(decode_raw, topic=read.topic, stream=read.stream)
        return lambda part: DecodedPage(raw(part), None)
    return partial(
        decode_envelope_page,
        topic=read.topic,
        stream=read.stream,
        include_raw_fields=options.include_raw_fields,
    )


def _batch_finisher(
    options: SourceOptions, context: QueryContext | None
) -> Callable[[list[DecodedPage]], pa.RecordBatch]:
    if options.dead_letter_table is not None:
        return partial(_route_dead_letters, options.dead_letter_table, context)
    return lambda pages: _joined(pages).batch


def _joined(pages: list[DecodedPage]) -> DecodedPage:
    """Decoded pages as one: a single batch, and the rows' reason codes (None: all good)."""
    if len(pages) == 1:
        return pages[0]
    batch = pa.Table.from_batches([page.batch for page in pages]).combine_chunks().to_batches()[0]
    if all(page.reasons is None for page in pages):
        return DecodedPage(batch, None)
    reasons: list[str | None] = []
    for page in pages:
        reasons.extend(page.reasons or [None] * page.batch.num_rows)
    return DecodedPage(batch, reasons)


def _route_dead_letters(
    table: str, context: QueryContext | None, pages: list[DecodedPage]
) -> pa.RecordBatch:
    """Record the malformed entries of a batch in the dead-letter table; return the good rows.

    Called once per batch (about ``TARGET_BATCH_ROWS`` entries); a batch with malformed
    entries costs one plain Delta append, committed before its good rows are returned, so no
    row is passed on while its neighbours' dead letters are unrecorded. The append's app ID is
    a hash of the letters' IDs (stream and entry ID): a retried task, a replayed micro-batch,
    or a batch read of the same range decodes the same entries into the same letters, finds
    the app transaction recorded and writes nothing. One commit per bad batch rather than one
    per task, because holding a task's good rows back until its range ends would hold the
    whole range in memory.
    """
    from atlasbus.dead_letters import DeadLetterTable, QueryContext, split_decoded

    joined = _joined(pages)
    if joined.reasons is None:
        return joined.batch
    good, letters = split_decoded(
        joined.batch, context=context or QueryContext(), reasons=joined.reasons
    )
    DeadLetterTable(table).append(letters)
    return good
