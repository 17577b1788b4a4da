"""The dead-letter table's columns and stages, written out once.

The table is created from ``DEAD_LETTER_SCHEMA``, every write is cast to it, and every read is
cast back to it, so a reader sees the same types whichever engine wrote the files.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

import pyarrow as pa

from atlasbus.model.read_schema import STRING_MAP, TIMESTAMP

Stage = Literal["source-decode", "sink-publish", "processing", "retry-exhausted", "data-loss"]

SOURCE_DECODE: Final = "source-decode"
"""The source read an entry it could not decode (the raw entry is kept in ``fields``)."""
SINK_PUBLISH: Final = "sink-publish"
"""The sink could not publish a row (too big, bad payload, bad topic...)."""
PROCESSING: Final = "processing"
"""User code in ``foreachBatch`` rejected a row."""
RETRY_EXHAUSTED: Final = "retry-exhausted"
"""A message failed its handler more times than allowed."""
DATA_LOSS: Final = "data-loss"
"""Entries were removed from a stream before the query read them (``failOnDataLoss=false``)."""

STAGES: Final[tuple[Stage, ...]] = get_args(Stage)

DEAD_LETTER_SCHEMA: Final = pa.schema(
    [
        pa.field("dead_letter_id", pa.string(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("error", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("stream", pa.string()),
        pa.field("entry_id", pa.string()),
        pa.field("correlation_id", pa.string()),
        pa.field("priority", pa.int32()),
        pa.field("delivery_attempts", pa.int32()),
        pa.field("payload", pa.string()),
        pa.field("fields", STRING_MAP),
        pa.field("query_id", pa.string()),
        pa.field("query_name", pa.string()),
        pa.field("batch_id", pa.int64()),
        pa.field("dead_lettered_at", TIMESTAMP, nullable=False),
        pa.field("replay_count", pa.int32(), nullable=False),
        pa.field("last_replayed_at", TIMESTAMP),
        pa.field("last_replay_entry_id", pa.string()),
    ]
)

COLUMNS: Final[tuple[str, ...]] = tuple(DEAD_LETTER_SCHEMA.names)


def check_stage(stage: str) -> Stage:
    """Return ``stage`` if it is one of ``STAGES``; a typo would split a summary in two."""
    if stage not in STAGES:
        raise ValueError(
            f"{stage!r} is not a valid dead-letter stage. Valid values are: {list(STAGES)}"
        )
    return stage
