"""One task's publish on a Redis Cluster: a lane per hash slot; executor.

A transaction (MULTI/EXEC) cannot span hash slots, so the exactly-once marker of a task cannot
sit beside every stream it writes to. Each slot the task's rows go to gets a lane of its own: a
``Publisher`` on the master that owns the slot, whose marker is the task's marker key with a
hash tag of that slot (``{<tag>}``). A lane publishes its rows (the task's rows for streams in
that slot, in input order) exactly as a task does on one server: chunk, marker and XADDs in one
transaction, a retry skipping what the marker counts. Rows of one stream stay in input order;
rows of streams in different slots are published independently (docs/guarantees.md).

Rows the encoder rejects are recorded (or refused) here, once, under their task-wide row
numbers, before any lane sees their batch.
"""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from dataclasses import replace
from types import TracebackType

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atlasbus.errors import PublishError
from atlasbus.options.sink import SinkOptions
from atlasbus.publishing.encoder import encode_batch
from atlasbus.publishing.publisher import Publisher, RejectedRows, rejection_message


class SlotLanes:
    """Publishes the rows of one task on a cluster, a ``Publisher`` per hash slot. Use as a
    context manager, like ``Publisher``."""

    def __init__(
        self, options: SinkOptions, *, marker: str | None, rejects: RejectedRows | None = None
    ) -> None:
        if options.dead_letter_table is not None and rejects is None:
            raise ValueError("a sink with a deadLetterTable needs somewhere to record rejects")
        self.options = options
        self.marker = marker
        self.rejects = rejects
        self.position = 0  # input rows seen so far
        self.dead_lettered = 0
        self.lanes: dict[int, Publisher] = {}
        self._lane_options = replace(options, dead_letter_table=None)  # rejects go here
        self._stack = ExitStack()

    @property
    def markers(self) -> list[str]:
        """The markers of the lanes this task opened (the driver retires them)."""
        return [lane.marker for lane in self.lanes.values() if lane.marker is not None]

    @property
    def published(self) -> int:
        return sum(lane.published for lane in self.lanes.values())

    @property
    def skipped(self) -> int:
        return sum(lane.skipped for lane in self.lanes.values())

    def __enter__(self) -> SlotLanes:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stack.__exit__(exc_type, exc, tb)

    def publish(self, batch: pa.RecordBatch) -> None:
        """Hand each row to the lane of its stream's slot, rejected rows recorded first."""
        if batch.num_rows == 0:
            return
        first = self.position
        self.position += batch.num_rows
        encoded = encode_batch(batch, self.options, enqueued_time=time.time(), row_base=first)
        if encoded.rejections:
            if self.rejects is None:
                raise PublishError(rejection_message(encoded))
            self.dead_lettered += self.rejects.record(batch, encoded.rejections, row_base=first)
        slots = _row_slots(encoded.streams, batch.num_rows)
        if encoded.accepted is not None:
            accepted = encoded.accepted.to_numpy(zero_copy_only=False)
            slots = np.where(accepted, slots, -1)
        found, first_rows = np.unique(slots, return_index=True)
        for slot in found[np.argsort(first_rows)]:  # in the order the batch first names them
            if slot >= 0:  # the lane's rows, and their commands: encoded once, here
                mask = pa.array(slots == slot)
                self._lane(int(slot)).publish(batch.filter(mask), encoded.filter(mask))

    def finish(self) -> None:
        """The task's input has ended: each lane publishes what a retry still holds."""
        for lane in self.lanes.values():
            lane.finish()

    def _lane(self, slot: int) -> Publisher:
        lane = self.lanes.get(slot)
        if lane is None:
            tag = "{" + slot_tag(slot) + "}"
            marker = f"{self.marker}:{tag}" if self.marker is not None else None
            lane = Publisher(self._lane_options, marker=marker, route_key=marker or tag)
            self._stack.enter_context(lane)
            self.lanes[slot] = lane
        return lane


def _row_slots(streams: pa.Array | str, size: int) -> np.ndarray:
    """The hash slot of each row's stream (a stream's slot is computed once)."""
    from redis.crc import key_slot

    if isinstance(streams, str):
        return np.full(size, key_slot(streams.encode()), dtype=np.int64)
    encoded = streams.dictionary_encode()
    slots = np.array(
        [key_slot(str(key).encode()) for key in encoded.dictionary.to_pylist()], dtype=np.int64
    )
    indices = pc.fill_null(encoded.indices, 0)  # a rejected row's null stream: masked later
    positions: np.ndarray = indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return np.asarray(slots[positions])


_tags: dict[int, str] = {}
_tags_lock = threading.Lock()
_next_candidate = 0


def slot_tag(slot: int) -> str:
    """The smallest decimal number whose text hashes to ``slot``: a hash tag (``{17}``) that
    puts a marker in the slot of the streams it counts, whatever their names hold. The same
    slot gives the same tag in every process, so a retried task finds its lane's marker."""
    global _next_candidate
    from redis.crc import key_slot

    with _tags_lock:
        while slot not in _tags:
            _tags.setdefault(key_slot(str(_next_candidate).encode()), str(_next_candidate))
            _next_candidate += 1
        return _tags[slot]
