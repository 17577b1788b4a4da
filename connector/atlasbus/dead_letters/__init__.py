"""The dead-letter table: nothing dropped, every dead letter recorded once (docs/dead-letters.md).

Spark-free: written and read with delta-rs. ``pyspark_atlasbus.dead_letters`` is the Spark view.
"""

from atlasbus.dead_letters.record import (
    DeadLetter,
    QueryContext,
    dead_letter_id,
    sink_write_id,
    to_arrow,
)
from atlasbus.dead_letters.replay import Refused, Replayed, ReplayResult, replay_dead_letters
from atlasbus.dead_letters.schema import (
    COLUMNS,
    DATA_LOSS,
    DEAD_LETTER_SCHEMA,
    PROCESSING,
    RETRY_EXHAUSTED,
    SINK_PUBLISH,
    SOURCE_DECODE,
    STAGES,
    Stage,
)
from atlasbus.dead_letters.source import split_decoded
from atlasbus.dead_letters.table import DeadLetterTable, DeadLetterTableError

__all__ = [
    "COLUMNS",
    "DATA_LOSS",
    "DEAD_LETTER_SCHEMA",
    "PROCESSING",
    "RETRY_EXHAUSTED",
    "SINK_PUBLISH",
    "SOURCE_DECODE",
    "STAGES",
    "DeadLetter",
    "DeadLetterTable",
    "DeadLetterTableError",
    "QueryContext",
    "Refused",
    "ReplayResult",
    "Replayed",
    "Stage",
    "dead_letter_id",
    "replay_dead_letters",
    "sink_write_id",
    "split_decoded",
    "to_arrow",
]
