"""A consumer group's pending entries list (option ``pendingOf``), as Arrow batches.

A batch read with ``pendingOf=<group>`` lists, for every subscribed stream, the entries the group
delivered and nobody acknowledged yet: who holds each one (``consumer``), for how long
(``idle_ms``), how often it was delivered (``delivery_count``), and the entry itself decoded exactly
as a read decodes it (``atlasbus.decoding.decoder``), or ``entry_deleted`` when the entry was
deleted (XDEL) or trimmed while still pending: then only the ID's columns and the pending facts are
known.

Planning (``plan_pending``, on the driver) asks each stream for its pending summary in one
pipelined round trip (``XPENDING key group``) and makes one read per stream that has pending
entries. Reading (``read_pending``, on an executor) pages through the list with the extended
``XPENDING key group start + count`` and fetches each page's entries with one pipelined
``XRANGE key id id`` per entry, sent together with the request for the next page. The list
is read when the task runs, not when the read is planned, so an entry acknowledged or
delivered in between is missing or present accordingly: a snapshot per stream, as exact as a
moving list allows.

Which streams: the group need not exist on every subscribed stream (a group often reads only
some topics); a stream without it (or a stream that does not exist) gives no rows. A group
that exists on none of the subscribed streams is an error naming the group and the streams:
it is almost always a misspelt group or subscription. A ``topicPattern`` that matches no
stream at all gives an empty result, as a pattern read does.

Spark-free: the adapter (``pyspark_atlasbus.pending_reader``) only ships ``PendingRead``s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from atlasbus.bus.connection import RedisEndpoint, raw_connection, translate_errors
from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.decoding.decoder import RawEntry, decode_envelopes, decode_raw
from atlasbus.errors import ConfigurationError
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.model.read_schema import pending_schema
from atlasbus.options import keys
from atlasbus.options.source import SourceOptions
from atlasbus.planning.pushdown import MAX_ID, PushedBounds
from atlasbus.reading.range_reader import (
    TARGET_BATCH_ROWS,  # rows per yielded batch, as ranges are read
)
from atlasbus.wire.raw_text import raw_text_array

__all__ = [
    "ENTRY_DELETED",
    "PendingRead",
    "pending_counts",
    "plan_pending",
    "read_pending",
]

# The ``error`` of a pending entry that is no longer in its stream (envelope format).
ENTRY_DELETED = (
    "entry deleted from the stream (XDEL or trim) while still pending: its fields are gone; "
    "acknowledge it (XACK) to drop it from the pending entries list"
)

# One row of an extended XPENDING reply: [entry_id, consumer, idle_ms, delivery_count].
PendingRow = Sequence[Any]


@dataclass(frozen=True)
class PendingRead:
    """One stream's pending entries list to read on an executor (small, picklable)."""

    stream: str
    topic: str
    group: str
    # How many entries were pending at planning (the task reads the list as it then is).
    planned: int
    # The IDs listed, (after, upto]: a batch read's pushed filters (``PushedBounds``).
    after: EntryId = ZERO
    upto: EntryId = MAX_ID

    def bounds(self) -> tuple[str, str]:
        """XPENDING's start and end for ``(after, upto]`` (``(`` needs Redis 6.2)."""
        start = "-" if self.after == ZERO else self.after.exclusive()
        return start, "+" if self.upto == MAX_ID else str(self.upto)


def plan_pending(options: SourceOptions, bounds: PushedBounds | None = None) -> list[PendingRead]:
    """One ``PendingRead`` per subscribed stream whose group has pending entries; driver.

    ``bounds`` (a batch read's pushed filters) leaves out the streams they do not keep and
    narrows each list to their IDs; the group is looked for on every subscribed stream all
    the same, so a filter never turns a read into the missing group's error.
    """
    bounds = bounds or PushedBounds()
    group = options.pending_of
    assert group is not None
    subscription = options.subscription
    streams = StreamCatalog(options.endpoint).discover(subscription)
    counts = pending_counts(options.endpoint, streams, group)
    if streams and not counts:
        shown = ", ".join(streams)
        raise ConfigurationError(
            f"option '{keys.PENDING_OF}': consumer group {group!r} does not exist on any "
            f"stream of the subscription ({subscription.describe()}; streams checked: {shown}). "
            "Check the group name (XINFO GROUPS <stream> lists a stream's groups) and options "
            "'topics'/'topicPattern'/'streams' and 'streamPrefix'"
        )
    return [
        PendingRead(stream, topic, group, count, bounds.after, bounds.upto)
        for stream, count in counts.items()
        if count > 0 and bounds.keeps(stream, topic := subscription.topic_of(stream))
    ]


def pending_counts(endpoint: RedisEndpoint, streams: Sequence[str], group: str) -> dict[str, int]:
    """How many entries ``group`` has pending on each stream where it exists; one round trip.

    The summary form of XPENDING answers from the group's list without reading entries. A
    stream without the group, or absent, replies NOGROUP and is left out. On a cluster,
    redis-py's cluster pipeline sends each XPENDING to its stream's master.
    """
    if not streams:
        return {}
    with translate_errors(endpoint):
        pipe = endpoint.client().pipeline(transaction=False)
        for stream in streams:
            pipe.xpending(stream, group)
        replies = pipe.execute(raise_on_error=False)
    counts: dict[str, int] = {}
    for stream, reply in zip(streams, replies, strict=True):
        if isinstance(reply, Exception):
            text = str(reply)
            if text.startswith("NOGROUP"):
                continue
            if text.startswith("WRONGTYPE"):
                raise ConfigurationError(
                    f"key {stream!r} on Redis at {endpoint.description} is not a stream: check "
                    "options 'topics'/'topicPattern'/'streams' and 'streamPrefix' (a topic "
                    "names the stream '{streamPrefix}:{topic}')"
                )
            with translate_errors(endpoint):
                raise reply
        counts[stream] = int(reply["pending"])
    return counts


def read_pending(options: SourceOptions, read: PendingRead) -> Iterator[pa.RecordBatch]:
    """Yield ``read.stream``'s pending entries of ``read.group`` in ID order; executor.

    Batches have ``pending_schema(options.format)``. If the group or the stream is deleted
    while the list is read, the rows read so far are all there is.
    """
    decode = _decoder(options, read)
    page_size = options.page_size
    batch_rows = max(TARGET_BATCH_ROWS, page_size)
    stream, group = read.stream, read.group
    start, end = read.bounds()
    # on a cluster, a connection to the stream's master: every command here is on ``stream``
    with (
        raw_connection(options.endpoint, key=stream) as connection,
        translate_errors(options.endpoint),
    ):
        connection.send_command("XPENDING", stream, group, start, end, page_size)
        page = _pending_page(connection)
        rows: list[PendingRow] = []
        entries: list[RawEntry | None] = []
        while page:
            more = len(page) == page_size
            commands: list[tuple[Any, ...]] = [("XRANGE", stream, row[0], row[0]) for row in page]
            if more:
                commands.append(("XPENDING", stream, group, b"(" + page[-1][0], end, page_size))
            connection.send_packed_command(connection.pack_commands(commands))
            for _ in page:
                found = connection.read_response()
                entries.append(found[0] if found else None)
            rows.extend(page)
            if len(rows) >= batch_rows:
                yield _pending_batch(read, rows, entries, decode, options.format)
                rows, entries = [], []
            page = _pending_page(connection) if more else []
        if rows:
            yield _pending_batch(read, rows, entries, decode, options.format)


def _pending_page(connection: Any) -> list[PendingRow]:
    """Read one extended XPENDING reply; a group or stream deleted meanwhile ends the list."""
    import redis

    try:
        return list(connection.read_response())
    except redis.ResponseError as exc:
        if str(exc).startswith("NOGROUP"):
            return []
        raise


def _decoder(
    options: SourceOptions, read: PendingRead
) -> Callable[[Sequence[RawEntry]], pa.RecordBatch]:
    """The read's own decoder for this stream, so pending rows decode as read rows do."""
    if options.format == "raw":
        return partial(decode_raw, topic=read.topic, stream=read.stream)
    return partial(
        decode_envelopes,
        topic=read.topic,
        stream=read.stream,
        include_raw_fields=options.include_raw_fields,
    )


def _pending_batch(
    read: PendingRead,
    rows: Sequence[PendingRow],
    entries: Sequence[RawEntry | None],
    decode: Callable[[Sequence[RawEntry]], pa.RecordBatch],
    read_format: str,
) -> pa.RecordBatch:
    """Pending rows joined with their decoded entries (None: the entry is gone).

    ``topic``, ``stream``, ``id`` and ``timestamp`` come from the bare IDs through the same
    decoder (``decode_raw`` of entries without fields), so a deleted entry keeps its ID's
    time; every other entry column is the decoded entry's, null for a deleted one, whose
    ``error`` is ``ENTRY_DELETED`` (envelope format).
    """
    size = len(rows)
    schema = pending_schema(read_format)
    ids = decode_raw([(row[0], ()) for row in rows], topic=read.topic, stream=read.stream)
    present = [entry for entry in entries if entry is not None]
    decoded = decode(present)
    positions: list[int | None] = []
    next_position = 0
    for entry in entries:
        if entry is None:
            positions.append(None)
        else:
            positions.append(next_position)
            next_position += 1
    take = pa.array(positions, pa.int32())
    deleted = pc.is_null(take)
    columns: dict[str, pa.Array] = {
        "topic": ids.column("topic"),
        "stream": ids.column("stream"),
        "id": ids.column("id"),
        "consumer": raw_text_array([row[1] for row in rows]),
        "idle_ms": pa.array([int(row[2]) for row in rows], pa.int64()),
        "delivery_count": pa.array([int(row[3]) for row in rows], pa.int64()),
        "entry_deleted": deleted,
        "timestamp": ids.column("timestamp"),
    }
    for name in schema.names[len(columns) :]:
        columns[name] = decoded.column(name).take(take)
    if "error" in columns and size > len(present):
        columns["error"] = pc.if_else(deleted, pa.scalar(ENTRY_DELETED), columns["error"])
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)
