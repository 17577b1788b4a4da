"""The batch and streaming sinks: Arrow writers over ``atlasbus.publishing.publisher``.

``write`` runs on executors from a pickled copy of the writer; ``commit``/``abort`` run on the
driver. Rows arrive as Arrow record batches (``DataSourceArrowWriter`` /
``DataSourceStreamArrowWriter``), never as ``Row`` objects.

The exactly-once marker of a task is keyed by a write identity that a rerun of the same work
shares: for a batch write, an ID made once on the driver (so task and stage retries share it);
for a streaming query, the query ID (kept in the checkpoint) and the micro-batch ID, which
Spark hands every task as local properties.

With option ``deadLetterTable``, rows that cannot be published are recorded there (stage
``sink-publish``) under IDs made of the same write identity and the row's position in the task,
so a retried task or replayed micro-batch records each of them once, and the rest is published.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from atlasbus.errors import PublishError
from atlasbus.options.sink import SinkOptions
from atlasbus.publishing.publisher import (
    Publisher,
    discard_markers,
    marker_key,
    retire_streaming_markers,
)
from atlasbus.publishing.slot_lanes import SlotLanes
from pyspark_atlasbus.query_context import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    task_query_context,
)


@dataclass
class PublishedPartition(WriterCommitMessage):
    """What one task did: entries it added, input rows it skipped as already published."""

    partition: int
    markers: list[str]  # one, or on a Redis Cluster one per hash slot written to
    published: int
    skipped: int
    query_id: str | None = None
    dead_lettered: int = 0


def _publish(
    options: SinkOptions,
    write_id: str | None,
    iterator: Iterator[pa.RecordBatch],
    query_id: str | None = None,
    dead_letter_write: tuple[str | None, int | None] | None = None,
) -> PublishedPartition:
    """``dead_letter_write`` is (write or query ID, batch ID) naming this write in dead letters."""
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    marker = marker_key(options, write_id, partition) if write_id is not None else None
    rejects = None
    if options.dead_letter_table is not None and dead_letter_write is not None:
        from atlasbus.dead_letters import sink_write_id
        from atlasbus.dead_letters.sink import SinkDeadLetters

        rejects = SinkDeadLetters(
            options.dead_letter_table,
            sink_write_id(*dead_letter_write, partition),
            task_query_context(),
        )
    publisher: Publisher | SlotLanes
    if options.endpoint.is_cluster:
        publisher = SlotLanes(options, marker=marker, rejects=rejects)
    else:
        publisher = Publisher(options, marker=marker, rejects=rejects)
    with publisher:
        for batch in iterator:
            publisher.publish(batch)
        publisher.finish()
    if isinstance(publisher, SlotLanes):
        markers = publisher.markers
    else:
        markers = [marker] if marker is not None else []
    return PublishedPartition(
        partition,
        markers,
        publisher.published,
        publisher.skipped,
        query_id,
        publisher.dead_lettered,
    )


def _markers(messages: list[WriterCommitMessage | None]) -> list[str]:
    return [marker for m in messages if isinstance(m, PublishedPartition) for marker in m.markers]


class AtlasbusBatchWriter(DataSourceArrowWriter):
    """``df.write.format("atlasbus")``."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        # made once on the driver, pickled into every task: retries of a task share it
        self.write_uuid = f"w{uuid.uuid4().hex}"
        self.write_id = self.write_uuid if options.exactly_once else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedPartition:
        """Publish this partition's rows; executor."""
        return _publish(
            self.options, self.write_id, iterator, dead_letter_write=(self.write_uuid, None)
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """The job is done and will not run again: its markers can go; driver.

        Housekeeping as in ``abort``: every row is published by now, so a Redis that stops
        answering here must not fail the write (a rerun would publish its rows again).
        """
        discard_markers(self.options.endpoint, _markers(messages), write="finished")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A failed job is not resumed (a rerun is a new write): drop what markers we know;
        driver.

        Only housekeeping, so it is bounded and never raises (``discard_markers``): Spark does
        not say why the job failed, and when it was Redis timing out, a clean-up with the
        write's own timeouts waited a second full ``socket_timeout`` before the user saw the
        error. Markers it cannot delete are logged and left to their TTL, which is safe: no
        later write reads them (see ``discard_markers``).
        """
        discard_markers(self.options.endpoint, _markers(messages))


try:  # pyspark 4.1 and later
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamArrowWriter
except ImportError:  # pyspark 4.0: its worker feeds Arrow batches to any DataSourceArrowWriter
    # and calls the streaming commit(messages, batchId)/abort(messages, batchId) by name
    _StreamArrowWriter = DataSourceArrowWriter  # type: ignore[assignment,misc]


class AtlasbusStreamWriter(_StreamArrowWriter):
    """``df.writeStream.format("atlasbus")``."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedPartition:
        """Publish this partition of the current micro-batch; executor."""
        if not self.options.exactly_once and self.options.dead_letter_table is None:
            return _publish(self.options, None, iterator)
        query_id, batch_id = _streaming_identity()
        return _publish(
            self.options,
            f"q{query_id}:{batch_id}" if self.options.exactly_once else None,
            iterator,
            query_id if self.options.exactly_once else None,
            dead_letter_write=(query_id, int(batch_id)),
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Keep this micro-batch's markers until the next commit, drop older ones; driver."""
        if not self.options.exactly_once:
            return
        query_ids = {
            m.query_id for m in messages if isinstance(m, PublishedPartition) and m.query_id
        }
        for query_id in query_ids:
            retire_streaming_markers(self.options, query_id, batchId, _markers(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Keep the markers: the micro-batch will be replayed and must skip what was published."""


def _streaming_identity() -> tuple[str, str]:
    context = TaskContext.get()
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
    if not query_id or batch_id is None:
        raise PublishError(
            "exactlyOnce=true and deadLetterTable need the streaming query ID and micro-batch "
            "ID, which Spark did not pass to this task (local properties "
            f"{QUERY_ID_PROPERTY!r}, {BATCH_ID_PROPERTY!r}); set exactlyOnce=false and remove "
            "deadLetterTable to publish at least once"
        )
    return query_id, batch_id
