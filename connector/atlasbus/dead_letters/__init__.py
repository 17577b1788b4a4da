"""The dead-letter table: nothing dropped, every dead letter recorded once (docs/dead-letters.md).

Spark-free: written and read with delta-rs. ``pyspark_atlasbus.dead_letters`` is the Spark view.
Each name is loaded from its module on first use, so that naming the table's columns (the
command line's help) does not load delta-rs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "DeadLetter": "record",
    "QueryContext": "record",
    "dead_letter_id": "record",
    "sink_write_id": "record",
    "to_arrow": "record",
    "Refused": "replay",
    "Replayed": "replay",
    "ReplayResult": "replay",
    "replay_dead_letters": "replay",
    "COLUMNS": "schema",
    "DATA_LOSS": "schema",
    "DEAD_LETTER_SCHEMA": "schema",
    "PROCESSING": "schema",
    "RETRY_EXHAUSTED": "schema",
    "SINK_PUBLISH": "schema",
    "SOURCE_DECODE": "schema",
    "STAGES": "schema",
    "Stage": "schema",
    "split_decoded": "source",
    "DeadLetterTable": "table",
    "DeadLetterTableError": "table",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'atlasbus.dead_letters' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"atlasbus.dead_letters.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
