"""The short reason codes in error rows and dead letters (the table's ``reason`` column).

One list for both directions, so a code means the same thing whether the source could not
decode an entry or the sink could not publish a row.
"""

from __future__ import annotations

from typing import Final

# Both directions: a JSON field (payload, tracing, metadata) that is not a JSON object.
INVALID_JSON: Final = "invalid-json"
NOT_JSON_OBJECT: Final = "not-json-object"

# Source (stage source-decode): the first problem found in an entry names its reason.
MISSING_FIELD: Final = "missing-field"
INVALID_UTF8: Final = "invalid-utf8"
INVALID_INTEGER: Final = "invalid-integer"
INVALID_TIMESTAMP: Final = "invalid-timestamp"

DECODE_REASONS: Final = (
    MISSING_FIELD,
    INVALID_UTF8,
    INVALID_INTEGER,
    INVALID_TIMESTAMP,
    INVALID_JSON,
    NOT_JSON_OBJECT,
)

# Sink (stage sink-publish): rows that cannot be published.
NULL_TOPIC: Final = "null-topic"
EMPTY_TOPIC: Final = "empty-topic"
INVALID_TOPIC: Final = "invalid-topic"  # a comma or whitespace at an end: the source cannot name it
NULL_PAYLOAD: Final = "null-payload"
OUT_OF_RANGE: Final = "out-of-range"
TOO_BIG: Final = "too-big"

# Reaper (stage retry-exhausted): entries a consumer group gave up on (atlasbus.operations.reaper).
MAX_DELIVERIES: Final = "max-deliveries"  # delivered the allowed number of times, still pending
ENTRY_DELETED: Final = "entry-deleted"  # as MAX_DELIVERIES, but deleted from the stream: no content

REAPER_REASONS: Final = (MAX_DELIVERIES, ENTRY_DELETED)
