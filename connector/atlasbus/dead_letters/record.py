"""One dead letter, its deterministic ID, and conversion to Arrow.

The ID rule (``dead_letter_id`` = SHA-256 hex of the identity's parts joined by ``\\x1f``):

- an entry of a stream (``source-decode``, ``processing``, ``retry-exhausted``):
  ``stage, stream, entry_id``;
- a row with no entry behind it (``sink-publish``, or ``processing`` of a row that did not come
  from the bus): ``stage, write_id, row`` where ``write_id`` names the write deterministically
  (``sink_write_id(query_id, batch_id, partition_id)``) and ``row`` is the row's position in it;
- lost entries (``data-loss``): ``stage, stream, after, upto`` for the removed range
  ``(after, upto]``.

The identity holds nothing that changes when work is redone (no time, no run ID), so a retried
task or a replayed micro-batch produces the same ID and the table keeps one row. Spark can
compute the same ID: ``sha2(concat_ws('\\x1f', ...), 256)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa

from atlasbus.dead_letters.schema import (
    COLUMNS,
    DATA_LOSS,
    DEAD_LETTER_SCHEMA,
    RETRY_EXHAUSTED,
    SINK_PUBLISH,
    Stage,
    check_stage,
)
from atlasbus.model.conversions import int32_or_none
from atlasbus.model.reason_codes import ENTRY_DELETED, MAX_DELIVERIES
from atlasbus.wire.raw_text import original_text

_SEPARATOR = "\x1f"

DATA_LOSS_REASON = "entries-removed"


def dead_letter_id(stage: Stage, *parts: str | int) -> str:
    """The deterministic ID of a dead letter from its identity (see the module docstring)."""
    text = _SEPARATOR.join([check_stage(stage), *(str(p) for p in parts)])
    return hashlib.sha256(text.encode()).hexdigest()


def sink_write_id(query_id: str | None, batch_id: int | None, partition_id: int) -> str:
    """Name one task's write so that a retry of it gets the same name.

    Streaming writes pass the query ID and batch ID; a batch write passes ``query_id=None`` and
    a UUID made once on the driver (for example as ``batch_id``'s stand-in in ``query_id``).
    """
    return f"{query_id or '-'}/{'-' if batch_id is None else batch_id}/{partition_id}"


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class QueryContext:
    """What the writer of a dead letter knows about the query; picklable, for executors."""

    query_id: str | None = None
    query_name: str | None = None
    batch_id: int | None = None


_NO_QUERY = QueryContext()


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One row of the dead-letter table. Build it with the ``for_*`` constructors."""

    dead_letter_id: str
    stage: Stage
    reason: str
    error: str | None
    topic: str | None = None
    stream: str | None = None
    entry_id: str | None = None
    correlation_id: str | None = None
    priority: int | None = None
    delivery_attempts: int | None = None
    payload: str | None = None
    fields: Mapping[str, str] | None = None
    query_id: str | None = None
    query_name: str | None = None
    batch_id: int | None = None
    dead_lettered_at: datetime = field(default_factory=_now)
    replay_count: int = 0
    last_replayed_at: datetime | None = None
    last_replay_entry_id: str | None = None

    @classmethod
    def for_entry(
        cls,
        stage: Stage,
        reason: str,
        error: str | None,
        *,
        stream: str,
        entry_id: str,
        topic: str | None = None,
        correlation_id: str | None = None,
        priority: int | None = None,
        delivery_attempts: int | None = None,
        payload: str | None = None,
        fields: Mapping[str, str] | None = None,
        context: QueryContext = _NO_QUERY,
        at: datetime | None = None,
    ) -> DeadLetter:
        """A dead letter for one stream entry (source-decode, processing, retry-exhausted)."""
        return cls(
            dead_letter_id=dead_letter_id(stage, stream, entry_id),
            stage=stage,
            reason=reason,
            error=error,
            topic=topic,
            stream=stream,
            entry_id=entry_id,
            correlation_id=correlation_id,
            priority=priority,
            delivery_attempts=delivery_attempts,
            payload=payload,
            fields=fields,
            query_id=context.query_id,
            query_name=context.query_name,
            batch_id=context.batch_id,
            dead_lettered_at=at or _now(),
        )

    @classmethod
    def for_row(
        cls,
        reason: str,
        error: str | None,
        *,
        write_id: str,
        row: int,
        stage: Stage = SINK_PUBLISH,
        topic: str | None = None,
        correlation_id: str | None = None,
        priority: int | None = None,
        delivery_attempts: int | None = None,
        payload: str | None = None,
        fields: Mapping[str, str] | None = None,
        context: QueryContext = _NO_QUERY,
        at: datetime | None = None,
    ) -> DeadLetter:
        """A dead letter for row ``row`` of write ``write_id`` (sink-publish by default)."""
        if row < 0:
            raise ValueError(f"row must be a non-negative position in the write, got {row}")
        return cls(
            dead_letter_id=dead_letter_id(stage, write_id, row),
            stage=stage,
            reason=reason,
            error=error,
            topic=topic,
            correlation_id=correlation_id,
            priority=priority,
            delivery_attempts=delivery_attempts,
            payload=payload,
            fields=fields,
            query_id=context.query_id,
            query_name=context.query_name,
            batch_id=context.batch_id,
            dead_lettered_at=at or _now(),
        )

    @classmethod
    def for_data_loss(
        cls,
        *,
        stream: str,
        after: str,
        upto: str,
        topic: str | None = None,
        error: str | None = None,
        context: QueryContext = _NO_QUERY,
        at: datetime | None = None,
    ) -> DeadLetter:
        """A dead letter for the entries ``(after, upto]`` removed from ``stream`` unread.

        ``entry_id`` holds ``upto`` (the last lost ID) and ``fields`` both ends, so the range
        can be queried without parsing ``error``.
        """
        return cls(
            dead_letter_id=dead_letter_id(DATA_LOSS, stream, after, upto),
            stage=DATA_LOSS,
            reason=DATA_LOSS_REASON,
            error=error
            or f"entries of stream {stream!r} after {after} up to {upto} were removed unread",
            topic=topic,
            stream=stream,
            entry_id=upto,
            fields={"after": after, "upto": upto},
            query_id=context.query_id,
            query_name=context.query_name,
            batch_id=context.batch_id,
            dead_lettered_at=at or _now(),
        )

    @classmethod
    def for_retry_exhausted(
        cls,
        *,
        stream: str,
        entry_id: str,
        group: str,
        consumer: str,
        deliveries: int,
        idle_ms: int,
        fields: Mapping[str, str] | None,
        topic: str | None = None,
        context: QueryContext = _NO_QUERY,
        at: datetime | None = None,
    ) -> DeadLetter:
        """A pending entry of ``group`` that was delivered ``deliveries`` times and given up on.

        ``fields`` is the raw entry (``raw_fields.raw_text`` of each name and value), kept as a
        source-decode letter keeps it, so replay can publish it again; ``payload``,
        ``correlation_id`` and ``priority`` are copied from it when present. ``None`` means the
        entry was deleted from the stream while still pending (reason ``entry-deleted``): only
        its ID and pending facts are known. The table has no columns for the consumer and the
        idle time, so ``error`` holds them; ``delivery_attempts`` is the delivery count.
        """
        error = (
            f"pending in consumer group {group!r} after {deliveries} deliveries, last to "
            f"consumer {consumer!r}, idle for {idle_ms} ms"
        )
        if fields is None:
            error += (
                "; the entry was deleted from the stream (XDEL or trim) while pending, so its "
                "content is gone: only its ID is known"
            )
        raw = fields or {}
        return cls.for_entry(
            RETRY_EXHAUSTED,
            MAX_DELIVERIES if fields is not None else ENTRY_DELETED,
            error,
            stream=stream,
            entry_id=entry_id,
            topic=topic,
            correlation_id=original_text(raw.get("correlation_id")),
            priority=int32_or_none(raw.get("priority")),  # the raw text stays in fields
            delivery_attempts=int32_or_none(deliveries),
            payload=original_text(raw.get("payload")),
            fields=fields,
            context=context,
            at=at,
        )

    def as_row(self) -> dict[str, object]:
        """The row as a dict in column order (``fields`` as a list of pairs, as Arrow wants)."""
        row: dict[str, object] = {name: getattr(self, name) for name in COLUMNS}
        if self.fields is not None:
            row["fields"] = list(self.fields.items())
        return row


def to_arrow(records: Iterable[DeadLetter]) -> pa.Table:
    """Dead letters as an Arrow table of exactly ``DEAD_LETTER_SCHEMA``."""
    return pa.Table.from_pylist([r.as_row() for r in records], schema=DEAD_LETTER_SCHEMA)
