"""Dead letters from the sink: the input rows the encoder rejected (stage ``sink-publish``).

Runs on executors, inside the publisher, before the accepted rows of the same batch are sent,
so a crash between the two never leaves a rejected row unrecorded (a retried task skips only
rows its marker counts, and the marker moves only after the dead letters are in the table).

A row's ID is ``sink-publish``, the write ID and the row's position in the task's input (see
record.py), so a retried task or a replayed micro-batch names the same rows the same way.
``fields`` hold the row's other columns as the wire would carry them (text), so a replay can
publish the dead letter as it was meant to be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.types as pat

from atlasbus.dead_letters.record import DeadLetter, QueryContext
from atlasbus.dead_letters.schema import SINK_PUBLISH
from atlasbus.dead_letters.table import DeadLetterTable
from atlasbus.model.conversions import int32_or_none
from atlasbus.publishing.encoder import Rejection, json_text


@dataclass(frozen=True)
class SinkDeadLetters:
    """A sink task's rejected rows, recorded in the table (the publisher's ``rejects``; executor).

    One plain Delta append per input batch with rejections, named by the task's write ID
    and versioned by the input row position where the batch ends (the same in every attempt
    of the task, even when a retry skips the batch's first rows because the exactly-once
    marker counts them). Batches are recorded in input order, so the app transaction's
    version is the end of the last batch recorded: a retry skips every batch up to it and
    appends the rest.
    """

    table: str
    write_id: str
    context: QueryContext = field(default_factory=QueryContext)

    def record(
        self, batch: pa.RecordBatch, rejections: Sequence[Rejection], *, row_base: int
    ) -> int:
        letters = rejected_rows(
            batch, rejections, row_base=row_base, write_id=self.write_id, context=self.context
        )
        DeadLetterTable(self.table).append(
            letters,
            app_id=f"atlasbus/sink-publish/{self.write_id}",
            version=row_base + batch.num_rows,
        )
        return len(letters)


def rejected_rows(
    batch: pa.RecordBatch,
    rejections: Sequence[Rejection],
    *,
    row_base: int,
    write_id: str,
    context: QueryContext,
    at: datetime | None = None,
) -> list[DeadLetter]:
    """The rejected rows of ``batch`` (its first row is input row ``row_base``) as dead letters."""
    if not rejections:
        return []
    taken = batch.take(pa.array([r.row - row_base for r in rejections], pa.int64()))
    texts = {name: _text_column(taken.column(name)).to_pylist() for name in taken.schema.names}
    letters = []
    for index, rejection in enumerate(rejections):
        row = {name: values[index] for name, values in texts.items()}
        letters.append(
            DeadLetter.for_row(
                rejection.code,
                rejection.message(),
                write_id=write_id,
                row=rejection.row,
                stage=SINK_PUBLISH,
                topic=rejection.topic,
                correlation_id=row.get("correlation_id"),
                priority=int32_or_none(row.get("priority")),
                delivery_attempts=int32_or_none(row.get("delivery_attempts")),
                payload=row.get("payload"),
                fields={k: v for k, v in row.items() if k != "payload" and v is not None},
                context=context,
                at=at,
            )
        )
    return letters


def _text_column(column: pa.Array) -> pa.Array:
    """A column as text: JSON for structs and maps, decimal for integers."""
    if pat.is_struct(column.type) or pat.is_map(column.type):
        return json_text(column).cast(pa.string())
    return column.cast(pa.string())
