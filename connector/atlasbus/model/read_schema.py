"""The read schemas, as Arrow schemas (what ``read()`` yields) and Spark DDL (what Spark sees).

Both are written out here once so the two can never disagree.
"""

from __future__ import annotations

import pyarrow as pa

STRING_MAP = pa.map_(pa.string(), pa.string())
TIMESTAMP = pa.timestamp("us", tz="UTC")

ENVELOPE_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("stream", pa.string()),
        pa.field("id", pa.string()),
        pa.field("timestamp", TIMESTAMP),
        pa.field("priority", pa.int32()),
        pa.field("correlation_id", pa.string()),
        pa.field("payload", pa.string()),
        pa.field("tracing", STRING_MAP),
        pa.field("metadata", STRING_MAP),
        pa.field("delivery_attempts", pa.int32()),
        pa.field("enqueued_time", TIMESTAMP),
        pa.field("error", pa.string()),
        pa.field("fields", STRING_MAP),
    ]
)

RAW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("stream", pa.string()),
        pa.field("id", pa.string()),
        pa.field("timestamp", TIMESTAMP),
        pa.field("fields", STRING_MAP),
    ]
)

# A group's pending entries list (``pendingOf``): the pending facts of each entry, then the
# read schema's columns after ``id`` (``pending_schema``).
PENDING_COLUMNS = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("stream", pa.string()),
        pa.field("id", pa.string()),
        pa.field("consumer", pa.string()),
        pa.field("idle_ms", pa.int64()),
        pa.field("delivery_count", pa.int64()),
        pa.field("entry_deleted", pa.bool_()),
    ]
)

_DDL_TYPES = {
    pa.string(): "string",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.bool_(): "boolean",
    TIMESTAMP: "timestamp",
    STRING_MAP: "map<string,string>",
}


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL string for one of the schemas above."""
    return ", ".join(f"`{f.name}` {_DDL_TYPES[f.type]}" for f in schema)


def schema_for(read_format: str) -> pa.Schema:
    return RAW_SCHEMA if read_format == "raw" else ENVELOPE_SCHEMA


def pending_schema(read_format: str) -> pa.Schema:
    """The schema of a ``pendingOf`` read: ``PENDING_COLUMNS``, then the entry as read.

    The entry's columns are exactly the read schema's for ``read_format`` after ``topic``,
    ``stream`` and ``id`` (``timestamp`` onwards), so a pending row decodes like a read row.
    """
    read = schema_for(read_format)
    return pa.schema([*PENDING_COLUMNS, *(f for f in read if f.name not in PENDING_COLUMNS.names)])
