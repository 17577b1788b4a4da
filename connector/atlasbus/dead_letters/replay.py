"""Replay: re-publish chosen dead letters to their topics, and record that in the table.

Each chosen dead letter is published as a new entry of ``{streamPrefix}:{topic}`` in the wire
format, through the sink's own encoder and publisher (encode.py, publisher.py), with
``delivery_attempts`` one more than the dead letter had; ``tracing`` and ``metadata`` come from
its ``fields`` (the raw entry, or the row's columns as the sink saw them). Then
``DeadLetterTable.mark_replayed`` records ``replay_count``, ``last_replayed_at`` and
``last_replay_entry_id``.

A dead letter already replayed (``replay_count > 0``) is refused unless ``again=True``, so
running the same replay twice does not publish twice by accident. One with nothing to publish
(a ``data-loss`` range, no payload or no topic) or that the encoder rejects (its payload is not
a JSON object, ...) is reported, not published. Publishing and marking are two steps: if the
process dies between them, the entries are on the bus but the table does not say so, and a
second replay would publish them again (the bus's handlers are idempotent by contract).

Runs wherever it is called (the ``atlasbus dlq replay`` command, a notebook); no Spark.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from atlasbus.connection import RedisEndpoint
from atlasbus.dead_letters.table import DeadLetterTable
from atlasbus.encode import Rejection, encode_batch
from atlasbus.publisher import Publisher
from atlasbus.sink_options import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_STREAM_PREFIX, SinkOptions


@dataclass(frozen=True)
class Replayed:
    """A dead letter published again: to ``stream`` as ``entry_id`` (None in a dry run)."""

    dead_letter_id: str
    topic: str
    stream: str
    entry_id: str | None


@dataclass(frozen=True)
class Refused:
    """A chosen dead letter that was not published, and why."""

    dead_letter_id: str
    why: str


@dataclass(frozen=True)
class ReplayResult:
    replayed: tuple[Replayed, ...]
    already_replayed: tuple[Refused, ...]
    not_replayable: tuple[Refused, ...]
    dry_run: bool

    @property
    def refused(self) -> tuple[Refused, ...]:
        return self.already_replayed + self.not_replayable


def replay_dead_letters(
    table: DeadLetterTable,
    *,
    endpoint: RedisEndpoint,
    where: str | None = None,
    stream_prefix: str = DEFAULT_STREAM_PREFIX,
    again: bool = False,
    dry_run: bool = False,
    limit: int | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    at: datetime | None = None,
) -> ReplayResult:
    """Re-publish the dead letters matching ``where`` (a SQL condition over the table's columns).

    Oldest first (``dead_lettered_at``), at most ``limit``. ``dry_run`` checks and reports
    without publishing or marking anything.
    """
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be a positive integer, got {limit}")
    rows = table.to_arrow(where).sort_by([("dead_lettered_at", "ascending")]).to_pylist()
    if limit is not None:
        rows = rows[:limit]
    options = SinkOptions(
        endpoint=endpoint,
        stream_prefix=stream_prefix,
        topic=None,
        max_len=None,
        max_message_bytes=max_message_bytes,
        exactly_once=False,
    )
    already: list[Refused] = []
    unusable: list[Refused] = []
    chosen: list[dict[str, Any]] = []
    for row in rows:
        ident = row["dead_letter_id"]
        if row["replay_count"] > 0 and not again:
            already.append(
                Refused(
                    ident,
                    f"already replayed {row['replay_count']} time(s), last as entry "
                    f"{row['last_replay_entry_id']}; pass again=True (--again) to replay it again",
                )
            )
        elif row["payload"] is None:
            unusable.append(Refused(ident, _no_payload(row)))
        elif not row["topic"]:
            unusable.append(Refused(ident, "it has no topic to publish to"))
        else:
            chosen.append(row)
    batch = _input_batch(chosen)
    rejected: dict[int, Rejection] = {}
    if chosen:  # checked first, so a dry run reports exactly what a real run would refuse
        encoded = encode_batch(batch, options, enqueued_time=time.time())
        rejected = {rejection.row: rejection for rejection in encoded.rejections}
    for row_number, rejection in sorted(rejected.items()):
        unusable.append(
            Refused(
                chosen[row_number]["dead_letter_id"],
                f"column '{rejection.column}' {rejection.reason}",
            )
        )
    keep = [i for i in range(len(chosen)) if i not in rejected]
    publishable = [chosen[i] for i in keep]
    entry_ids: list[str | None] = [None] * len(publishable)
    if publishable and not dry_run:
        with Publisher(options, marker=None, collect_entry_ids=True) as publisher:
            publisher.publish(batch.take(pa.array(keep, pa.int64())))
        assert publisher.entry_ids is not None
        entry_ids = list(publisher.entry_ids)
        table.mark_replayed(
            [row["dead_letter_id"] for row in publishable],
            [str(entry_id) for entry_id in entry_ids],
            at=at,
        )
    replayed = tuple(
        Replayed(row["dead_letter_id"], row["topic"], options.stream_key(row["topic"]), entry_id)
        for row, entry_id in zip(publishable, entry_ids, strict=True)
    )
    return ReplayResult(replayed, tuple(already), tuple(unusable), dry_run)


def _no_payload(row: dict[str, Any]) -> str:
    if row["stage"] == "data-loss":
        return "a data-loss dead letter records removed entries, not a message: nothing to publish"
    return "it has no payload to publish"


def _input_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """The sink's input columns for ``rows``, ``delivery_attempts`` one higher."""
    fields = [dict(row["fields"] or []) for row in rows]
    return pa.record_batch(
        {
            "topic": pa.array([row["topic"] for row in rows], pa.string()),
            "priority": pa.array([row["priority"] for row in rows], pa.int32()),
            "payload": pa.array([row["payload"] for row in rows], pa.string()),
            "correlation_id": pa.array(
                [
                    row["correlation_id"] or f.get("correlation_id")
                    for row, f in zip(rows, fields, strict=True)
                ],
                pa.string(),
            ),
            "tracing": pa.array([f.get("tracing") for f in fields], pa.string()),
            "metadata": pa.array([f.get("metadata") for f in fields], pa.string()),
            "delivery_attempts": pa.array(
                [(row["delivery_attempts"] or 0) + 1 for row in rows], pa.int64()
            ),
        }
    )
