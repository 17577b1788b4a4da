"""Replay: re-publish chosen dead letters to their topics, exactly once, and record it.

Each chosen dead letter is published as a new entry of ``{streamPrefix}:{topic}`` in the wire
format, through the sink's own encoder and publisher (``atlasbus.publishing``), with
``delivery_attempts`` one more than the dead letter had; ``tracing`` and ``metadata`` come from
its ``fields`` (the raw entry, or the row's columns as the sink saw them).

Exactly once, also when two replays run at once. A run first **claims** the dead letters it
means to publish, in one conditional MERGE (``DeadLetterTable.claim_for_replay``): each row
whose ``replay_count`` is still the value the run read gets ``replay_count + 1``,
``last_replayed_at`` and ``last_replay_entry_id = "replaying:<run token>"``. Delta's optimistic
concurrency lets only one of two MERGEs rewriting the same row commit; the other re-runs on the
new version, where the count no longer matches, and claims nothing. A run publishes only what
it claimed, then records the new entry IDs in ``last_replay_entry_id``
(``finish_replay``). The dead letters another run claimed first are reported as already
replayed.

A dead letter already replayed (``replay_count > 0``) is refused unless ``again=True``. One with
nothing to publish (a ``data-loss`` range, no payload or no topic) or that the encoder rejects
(its payload is not a JSON object, ...) is reported, not published. ``limit`` counts only the
dead letters that would be published: refused ones never use it up (see ``replay_dead_letters``).

If the process dies after claiming and before recording (before, during or after publishing),
the claimed rows keep ``last_replay_entry_id = "replaying:<token>"``: later replays refuse them
and say so (the run may or may not have published them; look in the stream), and
``again=True`` publishes them again. So a crash can leave a dead letter published without its
entry ID recorded, or claimed but not published; it never makes a second run publish it
silently.

Runs wherever it is called (the ``atlasbus dlq replay`` command, a notebook); no Spark.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from atlasbus.bus.connection import RedisEndpoint
from atlasbus.dead_letters.table import DeadLetterTable
from atlasbus.errors import AtlasbusError, PublishError
from atlasbus.option_names import named
from atlasbus.options.keys import DEFAULT_STREAM_PREFIX
from atlasbus.options.sink import DEFAULT_MAX_MESSAGE_BYTES, SinkOptions
from atlasbus.publishing.encoder import Rejection, encode_batch
from atlasbus.publishing.publisher import Publisher
from atlasbus.publishing.slot_lanes import slot_tag
from atlasbus.wire.raw_text import original_text

CLAIM_PREFIX = "replaying:"
"""``last_replay_entry_id`` of a dead letter claimed by a replay that has not recorded its entry."""


@dataclass(frozen=True)
class Replayed:
    """A dead letter published again: to ``stream`` as ``entry_id`` (None in a dry run)."""

    dead_letter_id: str
    topic: str
    stream: str
    entry_id: str | None


@dataclass(frozen=True)
class Refused:
    """A chosen dead letter that was not published, and why.

    ``problem`` says what stopped it. ``again_would`` is what ``again=True`` would do with it
    ("replay it again", "publish it anyway"), or None when that would not help. ``why`` words
    both for the Python API; ``explain`` for a caller whose switch has another name (the
    command line's ``--again``).
    """

    dead_letter_id: str
    problem: str
    again_would: str | None = None

    @property
    def why(self) -> str:
        return self.explain("pass again=True")

    def explain(self, again: str) -> str:
        """``problem``, then ``"{again} to {again_would}"`` when ``again=True`` would help."""
        if self.again_would is None:
            return self.problem
        return f"{self.problem}; {again} to {self.again_would}"


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

    Oldest first (``dead_lettered_at``). With ``limit``, the oldest ``limit`` dead letters that
    would be published: refused ones (replayed before without ``again``, nothing to publish,
    rejected by the encoder) are passed over, not counted, and reported only when older than
    the last one chosen; newer ones are not looked at. ``dry_run`` checks and reports without
    publishing or marking anything. Redis is reached before any dead letter is claimed, so an
    unreachable server leaves the table as it was.
    """
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be a positive integer, got {limit}")
    if not stream_prefix.strip():
        raise ValueError("stream_prefix must not be empty")
    rows = (
        table.to_arrow(where)
        .sort_by([("dead_lettered_at", "ascending"), ("dead_letter_id", "ascending")])
        .to_pylist()
    )
    options = SinkOptions(
        endpoint=endpoint,
        stream_prefix=stream_prefix,
        topic=None,
        max_len=None,
        max_message_bytes=max_message_bytes,
        exactly_once=False,
    )
    # (position in rows, refusal): refused before encoding, then by the encoder
    already: list[tuple[int, Refused]] = []
    unusable: list[tuple[int, Refused]] = []
    chosen: list[dict[str, Any]] = []
    positions: list[int] = []  # of chosen[i] in rows
    for position, row in enumerate(rows):
        ident = row["dead_letter_id"]
        if row["replay_count"] > 0 and not again:
            already.append((position, _replayed_before(row)))
        elif row["payload"] is None:
            unusable.append((position, Refused(ident, _no_payload(row))))
        elif not row["topic"]:
            unusable.append((position, Refused(ident, "it has no topic to publish to")))
        else:
            chosen.append(row)
            positions.append(position)
    rejected: dict[int, Rejection] = {}
    if chosen:  # checked first, so a dry run reports exactly what a real run would refuse
        encoded = encode_batch(_input_batch(chosen), options, enqueued_time=time.time())
        rejected = {rejection.row: rejection for rejection in encoded.rejections}
    for row_number, rejection in sorted(rejected.items()):
        unusable.append(
            (
                positions[row_number],
                Refused(
                    chosen[row_number]["dead_letter_id"],
                    f"column '{rejection.column}' {rejection.reason}",
                ),
            )
        )
    keep = [i for i in range(len(chosen)) if i not in rejected]
    last = len(rows)  # rows after the last one chosen are not looked at
    if limit is not None and len(keep) > limit:
        keep = keep[:limit]
        last = positions[keep[-1]]
    refused_before = [refused for position, refused in already if position <= last]
    refused = tuple(refused for position, refused in unusable if position <= last)
    chosen = [chosen[i] for i in keep]  # from here on: only what this run would publish
    keep = list(range(len(chosen)))
    batch = _input_batch(chosen)
    if dry_run and keep:  # a dry run is a rehearsal: Redis must answer as the real run needs
        options.endpoint.client()
    if dry_run or not keep:
        replayed = tuple(
            Replayed(
                chosen[i]["dead_letter_id"],
                chosen[i]["topic"],
                options.stream_key(chosen[i]["topic"]),
                None,
            )
            for i in keep
        )
        return ReplayResult(replayed, tuple(refused_before), refused, dry_run)

    options.endpoint.client()  # reach Redis (or raise) before claiming anything
    claim = f"{CLAIM_PREFIX}{uuid.uuid4().hex}"
    not_after = max(chosen[i]["dead_lettered_at"] for i in keep)
    claimed = set(
        table.claim_for_replay(
            {chosen[i]["dead_letter_id"]: chosen[i]["replay_count"] for i in keep},
            claim,
            at=at,
            not_after=not_after,
        )
    )
    ours = [i for i in keep if chosen[i]["dead_letter_id"] in claimed]
    for i in keep:
        if chosen[i]["dead_letter_id"] not in claimed:
            refused_before.append(
                Refused(
                    chosen[i]["dead_letter_id"],
                    "another replay claimed it first (running at the same time, or it was "
                    "replayed after this run read the table); that run publishes it",
                )
            )
    confirmed: list[tuple[int, str]] = []  # (letter, its new entry ID), as Redis confirmed
    if ours:
        try:
            for lane, route_key in _lanes(options, [chosen[i]["topic"] for i in ours]):
                letters = [ours[position] for position in lane]
                publisher = Publisher(
                    options, marker=None, collect_entry_ids=True, route_key=route_key
                )
                try:
                    with publisher:
                        publisher.publish(batch.take(pa.array(letters, pa.int64())))
                finally:
                    confirmed.extend(
                        zip(letters, map(str, publisher.entry_ids or ()), strict=False)
                    )
        except AtlasbusError as exc:
            # The letters past the confirmed ones stay claimed: a reply may have been lost
            # after Redis added them, so only the user can tell (from the stream).
            unconfirmed = len(ours) - len(confirmed)
            raise PublishError(
                f"{exc}. {unconfirmed} dead letter(s) stay claimed by replay run "
                f"{claim[len(CLAIM_PREFIX) :]} without a confirmed entry: look in the stream "
                f"for them, then replay those it does not hold with {named('again')}"
            ) from exc
        finally:  # record what was confirmed published, even when publishing failed midway
            confirmed.sort()
            table.finish_replay(
                [chosen[i]["dead_letter_id"] for i, _ in confirmed],
                [entry_id for _, entry_id in confirmed],
                claim,
                at=at,
                not_after=not_after,
            )
    replayed = tuple(
        Replayed(
            chosen[i]["dead_letter_id"],
            chosen[i]["topic"],
            options.stream_key(chosen[i]["topic"]),
            entry_id,
        )
        for i, entry_id in confirmed
    )
    return ReplayResult(replayed, tuple(refused_before), refused, dry_run)


def _lanes(options: SinkOptions, topics: list[str]) -> list[tuple[list[int], str | None]]:
    """The letters (positions in ``topics``) each publisher sends, and the key it routes by:
    all on one connection, or on a Redis Cluster one per hash slot, on the slot's master
    (``atlasbus.publishing.slot_lanes``)."""
    if not options.endpoint.is_cluster:
        return [(list(range(len(topics))), None)]
    from redis.crc import key_slot

    by_slot: dict[int, list[int]] = {}
    for position, topic in enumerate(topics):
        by_slot.setdefault(key_slot(options.stream_key(topic).encode()), []).append(position)
    return [(lane, "{" + slot_tag(slot) + "}") for slot, lane in by_slot.items()]


def _replayed_before(row: dict[str, Any]) -> Refused:
    ident = row["dead_letter_id"]
    last = row["last_replay_entry_id"]
    if last is not None and str(last).startswith(CLAIM_PREFIX):
        return Refused(
            ident,
            f"claimed at {row['last_replayed_at']} by replay run {last[len(CLAIM_PREFIX) :]}, "
            "which has not recorded the entry it published: it is still running, or it died "
            "before or after publishing (look in the stream)",
            "publish it anyway",
        )
    return Refused(
        ident,
        f"already replayed {row['replay_count']} time(s), last as entry {last}",
        "replay it again",
    )


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
                    row["correlation_id"] or original_text(f.get("correlation_id"))
                    for row, f in zip(rows, fields, strict=True)
                ],
                pa.string(),
            ),
            "tracing": pa.array([original_text(f.get("tracing")) for f in fields], pa.string()),
            "metadata": pa.array([original_text(f.get("metadata")) for f in fields], pa.string()),
            "delivery_attempts": pa.array(
                [(row["delivery_attempts"] or 0) + 1 for row in rows], pa.int64()
            ),
        }
    )
