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

_DDL_TYPES = {
    pa.string(): "string",
    pa.int32(): "int",
    TIMESTAMP: "timestamp",
    STRING_MAP: "map<string,string>",
}


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL string for one of the schemas above."""
    return ", ".join(f"`{f.name}` {_DDL_TYPES[f.type]}" for f in schema)


def schema_for(read_format: str) -> pa.Schema:
    return RAW_SCHEMA if read_format == "raw" else ENVELOPE_SCHEMA
