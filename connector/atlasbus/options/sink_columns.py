"""The sink's input columns: their names and the Arrow types each accepts.

``sink_options.check_input_schema`` checks a DataFrame's columns against these when a write
starts; ``encode`` reads the columns by these names on the executors.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.types as pat

PAYLOAD_COLUMN = "payload"
TOPIC_COLUMN = "topic"
PRIORITY_COLUMN = "priority"
CORRELATION_ID_COLUMN = "correlation_id"
TRACING_COLUMN = "tracing"
METADATA_COLUMN = "metadata"
DELIVERY_ATTEMPTS_COLUMN = "delivery_attempts"

# In wire-format order.
INPUT_COLUMNS = (
    TOPIC_COLUMN,
    PRIORITY_COLUMN,
    PAYLOAD_COLUMN,
    CORRELATION_ID_COLUMN,
    TRACING_COLUMN,
    METADATA_COLUMN,
    DELIVERY_ATTEMPTS_COLUMN,
)


def _is_text(t: pa.DataType) -> bool:
    return bool(pat.is_string(t) or pat.is_large_string(t))


def _is_json_like(t: pa.DataType) -> bool:
    return _is_text(t) or bool(pat.is_struct(t) or pat.is_map(t))


def _is_integer(t: pa.DataType) -> bool:
    return bool(pat.is_integer(t))


# Per accepted column: does an Arrow type fit, and how to say what fits.
ACCEPTED_TYPES: dict[str, tuple[Callable[[pa.DataType], bool], str]] = {
    TOPIC_COLUMN: (_is_text, "a string"),
    PRIORITY_COLUMN: (_is_integer, "an integer"),
    PAYLOAD_COLUMN: (_is_json_like, "JSON text (string), a struct or a map"),
    CORRELATION_ID_COLUMN: (_is_text, "a string"),
    TRACING_COLUMN: (_is_json_like, "a map, a struct or JSON text (string)"),
    METADATA_COLUMN: (_is_json_like, "a map, a struct or JSON text (string)"),
    DELIVERY_ATTEMPTS_COLUMN: (_is_integer, "an integer"),
}
