"""Publish one task's rows: pipelined XADD in chunks, optionally exactly once.

Each chunk of up to ``CHUNK_ROWS`` rows is one round trip of ready-made RESP bytes (see
encoder.py). With a marker key (``exactlyOnce``), a chunk goes out as one transaction that also
records, in the marker, how many of the task's input rows are now published:

    MULTI; XADD ...; SET marker <rows done> EX <ttl>; EXEC; WATCH marker; GET marker

so entries and marker land together or not at all. A retried task (or a replayed micro-batch)
reads the marker first and skips the rows it counts. The marker also holds fingerprints of the
last rows published (``<rows done>:<fp>,<fp>,...``): if the source lost rows between the two
attempts (entries deleted under ``failOnDataLoss=false``), the retry finds the last published
row by its fingerprint instead of by its position, so it neither skips an unpublished row nor
publishes one twice. The marker is watched, so if a second
attempt of the same task publishes concurrently (speculation, a zombie executor), one of the
two transactions aborts and its sender re-reads the marker instead of adding duplicates.

This relies on a task seeing the same rows in the same order when it is run again, which holds
for a replayable source without a shuffle (docs/sink.md says more).

A row the encoder rejects fails the task, unless the sink has a ``deadLetterTable``: then the
batch's rejected rows are appended there (stage ``sink-publish``) before its accepted rows are
sent, and the task goes on.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from contextlib import ExitStack, suppress
from dataclasses import replace
from types import TracebackType
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from atlasbus.bus.connection import (
    FAILOVER_ATTEMPTS,
    RedisEndpoint,
    is_cluster_client,
    node_of,
    on_node,
    raw_connection,
    translate_errors,
)
from atlasbus.bus.replication import ReplicasBehind
from atlasbus.bus.slot_map import (
    FAILOVER_POLL_S,
    REDIRECT_PAUSE_S,
    is_moved,
    redirect_errors,
    refresh_slot_map,
)
from atlasbus.errors import PublishError, RedisUnavailableError
from atlasbus.options.sink import SinkOptions
from atlasbus.publishing.encoder import EncodedBatch, Rejection, encode_batch

log = logging.getLogger("atlasbus.publisher")

CHUNK_ROWS = 1_000
CHUNK_BYTES = 4 * 1024 * 1024  # keeps a transaction of big messages from swelling Redis
MARKER_TTL_SECONDS = 7 * 24 * 3600
MARKER_NAMESPACE = "__atlasbus_sink__"
ANCHOR_ROWS = 32  # fingerprints of the last rows published, kept in the marker
DISCARD_MARKERS_WITHIN_S = 1.0  # what a failed batch write's abort gives its clean-up

_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"
_UNWATCH = b"*1\r\n$7\r\nUNWATCH\r\n"


class SlotMoved(RedisUnavailableError):
    """A Redis Cluster answered MOVED (``settled``: the slot has a new master), or ASK or
    TRYAGAIN (its keys are being migrated)."""

    def __init__(self, message: str, *, settled: bool) -> None:
        super().__init__(message)
        self.settled = settled


def _pause_after(failure: Exception) -> float:
    """How long a cluster's publisher waits before trying again: not at all after MOVED, a
    moment while a slot's keys migrate, longer while a failed master is replaced."""
    if isinstance(failure, SlotMoved):
        return 0.0 if failure.settled else REDIRECT_PAUSE_S
    return FAILOVER_POLL_S


def marker_key(options: SinkOptions, write_id: str, partition: int) -> str:
    """Where a task's progress is recorded: under the stream prefix, so ACLs on it cover it."""
    return f"{options.stream_prefix}:{MARKER_NAMESPACE}:{write_id}:{partition}"


def marker_registry_key(options: SinkOptions, query_id: str) -> str:
    return f"{options.stream_prefix}:{MARKER_NAMESPACE}:{query_id}:markers"


def _resp(*args: str) -> bytes:
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class RejectedRows(Protocol):
    """Where a task's rejected rows go, before anything of their batch is published."""

    def record(
        self, batch: pa.RecordBatch, rejections: Sequence[Rejection], *, row_base: int
    ) -> int:
        """Record ``rejections`` of ``batch`` (whose first row is input row ``row_base``); the
        number recorded. Every attempt of a task records a batch under the same name."""
        ...


class Publisher:
    """Publishes the rows of one task, in input order. Use as a context manager; executor."""

    def __init__(
        self,
        options: SinkOptions,
        *,
        marker: str | None,
        rejects: RejectedRows | None = None,
        collect_entry_ids: bool = False,
        route_key: str | None = None,
    ) -> None:
        """``rejects`` records the rows the encoder rejects (required with option
        ``deadLetterTable``: ``atlasbus.dead_letters.sink.SinkDeadLetters``). With
        ``collect_entry_ids``, ``entry_ids`` gets each published row's new entry ID. On a
        Redis Cluster, ``route_key`` is a key in the slot of every stream this publisher
        writes to (``atlasbus.publishing.slot_lanes``): its connection goes to that master."""
        if options.dead_letter_table is not None and rejects is None:
            raise ValueError("a sink with a deadLetterTable needs somewhere to record rejects")
        self.options = options
        self.marker = marker
        self.rejects = rejects
        self.route_key = route_key
        self.position = 0  # input rows seen so far
        self.done = 0  # input rows known to be published (the marker's count)
        self.published = 0  # entries this attempt added
        self.skipped = 0  # input rows skipped because an earlier attempt published them
        self.dead_lettered = 0  # rejected rows this attempt sent to the dead-letter table
        self.entry_ids: list[str] | None = [] if collect_entry_ids else None
        self.anchors: list[str] = []  # fingerprints of the last rows published, oldest first
        # A retry whose marker has fingerprints holds its rows until it can find the last
        # published one among them (see the module docstring).
        self._held: list[pa.RecordBatch] | None = None
        self._held_rows = 0
        self._checked_keys: set[str] = set()  # target keys known to be streams (or absent)
        self._conn: Any = None
        self._node: str | None = None  # on a cluster, the master ``route_key`` is on
        self._borrowed: ExitStack | None = None  # returns the connection to its pool

    # --- connection ---------------------------------------------------------------------------

    def __enter__(self) -> Publisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn, self._conn = self._conn, None
        stack, self._borrowed = self._borrowed, None
        if conn is None or stack is None:
            return
        if exc is None and self.marker is not None:
            try:
                self._conn = conn
                self._roundtrip([_UNWATCH], 1)
            except Exception as unwatch_failed:  # a half-read reply must not reach the next user
                stack.__exit__(type(unwatch_failed), unwatch_failed, None)
                return
            finally:
                self._conn = None
        # an error leaves a half-read reply or an open MULTI: the connection is closed then
        stack.__exit__(exc_type, exc, tb)

    def _connection(self, *, resuming: bool = False) -> Any:
        """The task's connection, opened on first use; with a marker, what it counts is read
        (a retried task then holds its rows until it finds the last published one, a task
        resuming after a failover goes on from the count)."""
        if self._conn is None:
            stack = ExitStack()
            if self.route_key is not None:
                self._node = node_of(self.options.endpoint, self.route_key)
            self._conn = stack.enter_context(
                raw_connection(self.options.endpoint, key=self.route_key)
            )
            self._borrowed = stack
            if self.marker is not None:
                replies = self._roundtrip(
                    [_resp("WATCH", self.marker), _resp("GET", self.marker)], 2
                )
                self.done, self.anchors = _marker_value(replies[1], self.marker)
                if self.done > 0 and self.anchors and not resuming:
                    self._held = []
        return self._conn

    def _resume_after_failover(self, first: int, failure: Exception) -> None:
        """Go on publishing the batch whose first row is task row ``first`` on the master the
        Sentinels now name, from what its marker counts.

        Rows counted before ``first`` that the new master lacks were lost with the old one
        (acknowledged by it, not by a replica): they cannot be sent again from here, as their
        batch has passed, so the task fails and Spark's retry publishes them, once."""
        conn, stack = self._conn, self._borrowed
        self._conn = self._borrowed = None
        if conn is not None and stack is not None:
            conn.disconnect()
            stack.close()
        log.warning(
            "%s: publishing again on the %s after %s",
            f"exactly-once marker {self.marker}" if self.marker else f"rows from {first}",
            self.options.endpoint.description,
            failure,
        )
        self.position = first
        self._connection(resuming=True)
        if self.done < first:
            raise PublishError(
                f"a failover of the {self.options.endpoint.description} lost rows "
                f"{self.done}..{first - 1} this task had published (the replica that took over "
                "had not received them; option minReplicas makes each transaction wait for "
                "replicas): the task fails, and its retry publishes them once"
            )

    def _roundtrip(self, payload: Iterable[bytes | memoryview], replies: int) -> list[Any]:
        """Send ready-made commands, read their replies; Redis errors come back as values.

        On a cluster, a reply that sends a command elsewhere (MOVED, ASK, TRYAGAIN: the slot
        moved or is moving) raises ``SlotMoved`` once every reply is read; inside a
        transaction it also aborted the transaction, so nothing of it was applied.
        """
        conn = self._conn
        out: list[Any] = []
        with on_node(self._node), translate_errors(self.options.endpoint):
            conn.send_packed_command(payload, check_health=False)
            read = conn.read_response
            for _ in range(replies):
                try:
                    out.append(read(disconnect_on_error=True))
                except Exception as exc:
                    import redis

                    if not isinstance(exc, redis.ResponseError):
                        raise
                    out.append(exc)
        redirect = next((reply for reply in out if isinstance(reply, redirect_errors())), None)
        if redirect is not None:
            raise SlotMoved(
                f"the slot of {self.route_key!r} moved on the Redis Cluster at "
                f"{self.options.endpoint.description} ({redirect})",
                settled=is_moved(redirect),
            )
        return out

    # --- publishing ---------------------------------------------------------------------------

    def publish(self, batch: pa.RecordBatch, encoded: EncodedBatch | None = None) -> None:
        """Publish a batch of input rows, skipping those an earlier attempt already published.

        ``encoded``: the batch already encoded, none of it rejected (``SlotLanes`` encodes a
        task's batch once and hands each lane its rows)."""
        if batch.num_rows == 0:
            return
        first = self.position
        failure: RedisUnavailableError | ReplicasBehind | None = None
        deadline: float | None = None  # a cluster's moved slot or failed master, waited out
        for attempt in itertools.count():
            try:
                if failure is not None:
                    self._resume_after_failover(first, failure)
                self._publish_batch(batch, encoded)
                return
            except (RedisUnavailableError, ReplicasBehind) as failed:
                failure = failed
                endpoint = self.options.endpoint
                # on a cluster without a marker too: the chunk that failed is sent again
                # whole, which at-least-once allows (its rows that had landed, twice)
                resumable = self._held is None and (
                    self.marker is not None or endpoint.known_cluster
                )
                if resumable and endpoint.known_cluster:
                    deadline = deadline or time.monotonic() + endpoint.read_timeout_s
                    resumable = time.monotonic() < deadline and not isinstance(
                        failure, ReplicasBehind
                    )
                    if resumable:
                        time.sleep(_pause_after(failure))
                        with suppress(RedisUnavailableError):  # the next attempt says why
                            refresh_slot_map(endpoint.client())
                else:
                    resumable = (
                        resumable
                        and endpoint.is_sentinel
                        and attempt < FAILOVER_ATTEMPTS - 1
                        # replicas behind a master still in place: its rows are not safe yet
                        and not (
                            isinstance(failure, ReplicasBehind)
                            and not endpoint.master_moved_from(self._conn)
                        )
                    )
                if not resumable:
                    if isinstance(failure, ReplicasBehind):
                        raise PublishError(str(failure)) from None
                    raise

    def _publish_batch(self, batch: pa.RecordBatch, encoded: EncodedBatch | None) -> None:
        self._connection()
        if self._held is not None:  # encoded again when released: a retry's rare path
            self._held.append(batch)
            self._held_rows += batch.num_rows
            if self._held_rows >= self.done:
                self._release_held()
            return
        self._publish_rows(batch, encoded)

    def finish(self) -> None:
        """The task's input has ended: publish what a retry still holds (rows vanished)."""
        if self._held is not None:
            self._release_held()

    def _release_held(self) -> None:
        """Find the last row an earlier attempt published among the held rows; go on after it."""
        held, self._held = self._held or [], None
        rows = pa.Table.from_batches(held).combine_chunks() if held else None
        total = rows.num_rows if rows is not None else 0
        top = min(self.done, total) - 1
        found = None
        if rows is not None and top >= 0:
            wanted = set(self.anchors)
            if _fingerprint(rows, top) == self.anchors[-1]:
                found = top
            else:
                found = next(
                    (i for i in range(top, -1, -1) if _fingerprint(rows, i) in wanted), None
                )
        if found is not None and found + 1 != self.done:
            log.warning(
                "exactly-once marker %s: the last published row is now row %d, not %d: rows "
                "vanished from the input between attempts; going on after it",
                self.marker,
                found,
                self.done - 1,
            )
            self.done = found + 1
        elif found is None and total < self.done:
            log.warning(
                "exactly-once marker %s counts %d rows but the input has %d and none of the last "
                "published rows: going on by count",
                self.marker,
                self.done,
                total,
            )
        for batch in held:
            self._publish_rows(batch)

    def _publish_rows(self, batch: pa.RecordBatch, encoded: EncodedBatch | None = None) -> None:
        size = batch.num_rows
        first = self.position
        self.position += size
        skip = min(max(self.done - first, 0), size)
        self.skipped += skip
        if skip == size:
            return
        if encoded is not None:
            encoded = encoded.slice(skip)
        else:
            encoded = encode_batch(
                batch.slice(skip), self.options, enqueued_time=time.time(), row_base=first + skip
            )
        if encoded.rejections:
            if self.options.dead_letter_table is None:
                raise PublishError(rejection_message(encoded))
            self._dead_letter(batch.slice(skip), encoded, row_base=first + skip)
        self._check_stream_keys(encoded)
        offset = first + skip  # task-wide number of encoded row 0
        start = 0
        while start < len(encoded):
            stop = encoded.chunk_end(start, CHUNK_ROWS, CHUNK_BYTES)
            if self.marker is None:
                self._send_chunk(encoded, start, stop, offset)
                self.done = offset + stop
                start = stop
                continue
            anchors = [
                _fingerprint(batch, skip + i) for i in range(max(start, stop - ANCHOR_ROWS), stop)
            ]
            ours = (
                stop - start
                if self._send_chunk_exactly_once(encoded, start, stop, offset, anchors)
                else 0
            )
            # the marker may show a concurrent attempt's rows beyond ours: skip those
            reached = min(max(self.done - offset, start), len(encoded))
            self.skipped += reached - start - ours
            start = reached

    def _check_stream_keys(self, encoded: EncodedBatch) -> None:
        """Refuse, before any transaction, a target key that exists but is not a stream.

        Redis runs the rest of a MULTI when one XADD fails at EXEC (no rollback), so the marker
        would count rows that were never published. One TYPE per new key per task.
        """
        if isinstance(encoded.streams, str):
            keys = {encoded.streams}
        else:
            keys = {str(k) for k in pc.unique(encoded.streams).to_pylist() if k is not None}
        new = sorted(keys - self._checked_keys)
        if not new:
            return
        replies = self._roundtrip([_resp("TYPE", key) for key in new], len(new))
        for key, kind in zip(new, replies, strict=True):
            if isinstance(kind, Exception):  # e.g. NOPERM: an ACL without +type
                with translate_errors(
                    self.options.endpoint, key_pattern=f"{self.options.stream_prefix}:*"
                ):
                    raise kind
            text = kind.decode() if isinstance(kind, bytes) else str(kind)
            if text not in ("stream", "none"):
                raise PublishError(
                    f"cannot publish to {key!r}: that key holds a Redis {text}, not a stream; "
                    "nothing of this batch was published. Rename or delete the key, or publish "
                    "to another topic (or streamPrefix)"
                )
        self._checked_keys.update(new)

    def _dead_letter(self, batch: pa.RecordBatch, encoded: EncodedBatch, *, row_base: int) -> None:
        """Record the rejected rows before anything of their batch is published."""
        assert self.rejects is not None
        self.dead_lettered += self.rejects.record(batch, encoded.rejections, row_base=row_base)

    def _send_chunk(self, encoded: EncodedBatch, start: int, stop: int, offset: int) -> None:
        count = encoded.count(start, stop)
        if count == 0:
            return
        payload: list[bytes | memoryview] = [
            encoded.command_bytes(start, stop),
            *self._wait_command(),
        ]
        replies = self._roundtrip(payload, len(payload) - 1 + count)
        self._check_ids(encoded, start, replies[:count])
        self.published += count
        self._check_replicas(replies[count:], offset=offset, start=start, stop=stop)

    def _send_chunk_exactly_once(
        self, encoded: EncodedBatch, start: int, stop: int, offset: int, anchors: list[str]
    ) -> bool:
        """One transaction for rows ``[start, stop)``; False if a concurrent attempt won."""
        marker = self.marker
        assert marker is not None
        count = encoded.count(start, stop)
        target = offset + stop
        kept = [*self.anchors, *anchors][-ANCHOR_ROWS:]
        value = f"{target}:{','.join(kept)}"
        payload: list[bytes | memoryview] = [
            _MULTI,
            encoded.command_bytes(start, stop),
            _resp("SET", marker, value, "EX", str(MARKER_TTL_SECONDS)),
            _EXEC,
            *self._wait_command(),
            _resp("WATCH", marker),
            _resp("GET", marker),
        ]
        replies = self._roundtrip(payload, count + len(payload) - 1)
        queued = replies[: count + 2]
        executed, current = replies[count + 2], replies[-1]
        acknowledged = replies[count + 3 : -2]
        failed = [reply for reply in queued if isinstance(reply, Exception)]
        if failed:
            raise PublishError(
                f"Redis refused the XADDs of rows {offset + start}..{offset + stop - 1} "
                f"(e.g. to stream {encoded.stream_of(start)!r}): {failed[0]}; nothing of them "
                "was published"
            )
        if executed is None:  # the marker moved under us: a concurrent attempt published
            self.done, self.anchors = _marker_value(current, marker)
            return False
        self._check_ids(encoded, start, executed[:-1])
        self.published += count
        now, now_anchors = _marker_value(current, marker)
        self.done, self.anchors = (now, now_anchors) if now > target else (target, kept)
        self._check_replicas(acknowledged, offset=offset, start=start, stop=stop)
        return True

    def _wait_command(self) -> list[bytes]:
        """``WAIT minReplicas timeout`` after a write, when option minReplicas asks for it."""
        replication = self.options.replication
        if replication is None:
            return []
        return [_resp("WAIT", str(replication.min_replicas), str(replication.timeout_ms))]

    def _check_replicas(self, replies: list[Any], *, offset: int, start: int, stop: int) -> None:
        """Raise ``ReplicasBehind`` if WAIT counted fewer replicas than option minReplicas."""
        replication = self.options.replication
        if replication is None or not replies:
            return
        reply = replies[0]
        if isinstance(reply, Exception):
            with translate_errors(self.options.endpoint):
                raise reply
        if int(reply) < replication.min_replicas:
            raise ReplicasBehind(
                f"only {int(reply)} of the {replication.min_replicas} replicas that option "
                f"minReplicas asks for acknowledged rows {offset + start}..{offset + stop - 1} "
                f"within {replication.timeout_ms} ms (option replicaTimeout) on the "
                f"{self.options.endpoint.description}: a failover could lose them. The task "
                "fails so that Spark retries it; check the replicas (INFO replication)"
            )

    def _check_ids(self, encoded: EncodedBatch, start: int, replies: list[Any]) -> None:
        for index, reply in enumerate(replies):
            if isinstance(reply, Exception):
                raise PublishError(
                    f"XADD to stream {encoded.stream_of(start + index)!r} failed: {reply}"
                )
        if self.entry_ids is not None:
            self.entry_ids.extend(
                reply.decode() if isinstance(reply, bytes) else str(reply) for reply in replies
            )


def _fingerprint(rows: pa.RecordBatch | pa.Table, index: int) -> str:
    """A short digest of one input row's values: the same row gives the same text on a retry."""
    values = rows.slice(index, 1).to_pylist()[0]
    return hashlib.blake2b(repr(sorted(values.items())).encode(), digest_size=8).hexdigest()


def _marker_value(raw: Any, key: str) -> tuple[int, list[str]]:
    """The marker's row count and fingerprints (markers of atlasbus 0.1 hold the count only)."""
    if raw is None:
        return 0, []
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    count, _, anchors = text.partition(":")
    try:
        return int(count), [a for a in anchors.split(",") if a]
    except (TypeError, ValueError):
        raise PublishError(
            f"exactly-once marker {key!r} holds {raw!r}, not a row count: was it written by "
            "something else? Delete it or set exactlyOnce=false"
        ) from None


def rejection_message(encoded: EncodedBatch) -> str:
    first = encoded.rejections[0]
    more = len(encoded.rejections) - 1
    tail = f" ({more} more row(s) in this batch cannot be published either)" if more else ""
    return (
        f"{first.message()}{tail}. Fix the rows, filter them out before the sink, or set "
        "option 'deadLetterTable' to record them there and publish the rest"
    )


# --- marker housekeeping (driver) -------------------------------------------------------------


def delete_markers(endpoint: RedisEndpoint, keys: Iterable[str]) -> None:
    """Drop markers once no attempt of their write can run again (a finished batch write)."""
    batch = sorted(set(keys))
    if not batch:
        return
    with translate_errors(endpoint):
        endpoint.client().delete(*batch)


def discard_markers(endpoint: RedisEndpoint, keys: Iterable[str], *, write: str = "failed") -> int:
    """Best-effort clean-up of a batch write's markers, given at most
    ``DISCARD_MARKERS_WITHIN_S``; returns how many were left behind. Driver (the write's abort,
    and its commit: ``write="finished"``, whose rows are all published, so a Redis that stops
    answering then must not fail it either).

    A write often fails because Redis timed out or could not be reached, and the abort then
    meets the same server: with the write's own timeouts it waited a second full
    ``socket_timeout`` (30 s by default) before the user saw the error. So the delete runs in a
    thread of its own, on a client whose connect and read timeouts are at most
    ``DISCARD_MARKERS_WITHIN_S`` (the URL's, when lower), and is waited for that long; a
    healthy server deletes a few keys in well under it. When it has not finished by then, or
    fails, the markers are left, logged with a warning, and nothing is
    raised: Spark reports the task's error, not the clean-up's. (A thread still waiting ends
    with its own short timeouts, or with the Python worker.)

    Leaving them is safe for exactly-once. A batch write's markers are keyed by its write ID
    (``w{uuid}``), made on the driver once per ``save()``; only attempts of that write's tasks
    read them, and after the abort Spark runs none (a rerun of the whole write is a new write
    with a new ID, which never reads these, so a leftover marker cannot make it skip a row).
    Were a zombie attempt of the failed write still running, a kept marker is what stops it
    from publishing its partition twice. A left marker costs one small string key until its
    TTL (``MARKER_TTL_SECONDS``, 7 days) removes it.
    """
    batch = sorted(set(keys))
    if not batch:
        return 0
    within = DISCARD_MARKERS_WITHIN_S
    quick = replace(
        endpoint,
        connect_timeout=min(endpoint.connect_timeout_s, within),
        read_timeout=min(endpoint.read_timeout_s, within),
    )
    failures: list[str] = []

    def delete() -> None:
        try:
            delete_markers(quick, batch)
        except Exception as exc:  # whatever it was, the write's own error is the one to report
            failures.append(str(exc).split(". ")[0].rstrip("."))  # the rest names the limits

    worker = threading.Thread(target=delete, name="atlasbus-discard-markers", daemon=True)
    worker.start()
    worker.join(within)
    if worker.is_alive():
        reason = f"Redis at {endpoint.description} did not answer within {within:g} s"
    elif failures:
        reason = failures[0]
    else:
        return 0
    log.warning(
        "the %s batch write left %d exactly-once marker(s) behind (e.g. %r): deleting them "
        "failed (%s). No later write reads them; they expire within %d days.",
        write,
        len(batch),
        batch[0],
        reason,
        MARKER_TTL_SECONDS // 86400,
    )
    return len(batch)


def retire_streaming_markers(
    options: SinkOptions, query_id: str, batch_id: int, keys: Iterable[str]
) -> None:
    """Record micro-batch ``batch_id``'s markers and delete those of earlier micro-batches.

    Runs in the sink's commit of ``batch_id``. Spark plans a micro-batch only after the
    previous one is in the commit log, so earlier batches can never be replayed; ``batch_id``
    itself still can (a crash before its commit-log entry), so its markers are kept until the
    next commit, and the TTL catches what a crash leaves behind.
    """
    import json

    registry = marker_registry_key(options, query_id)
    client = options.endpoint.client()
    with translate_errors(options.endpoint):
        listed: dict[Any, Any] = client.hgetall(registry)
        stale: list[str] = []
        old_batches: list[Any] = []
        for raw_batch, raw_keys in listed.items():
            if int(raw_batch) < batch_id:
                old_batches.append(raw_batch)
                stale.extend(json.loads(raw_keys))
        if is_cluster_client(client):  # markers sit in their streams' slots: no transaction
            pipe = client.pipeline(transaction=False)
            pipe.hset(registry, str(batch_id), json.dumps(sorted(set(keys))))
            if old_batches:
                pipe.hdel(registry, *old_batches)
            pipe.expire(registry, MARKER_TTL_SECONDS)
            pipe.execute()
            if stale:  # listed no more: a crash here leaves them to their TTL
                client.delete(*stale)
            return
        pipe = client.pipeline(transaction=True)
        pipe.hset(registry, str(batch_id), json.dumps(sorted(set(keys))))
        if old_batches:
            pipe.hdel(registry, *old_batches)
        if stale:
            pipe.delete(*stale)
        pipe.expire(registry, MARKER_TTL_SECONDS)
        pipe.execute()
