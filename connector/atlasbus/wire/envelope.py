"""The wire format: the fields of one bus entry and their defaults when publishing.

docs/wire-format.md is the normative description; this module is its code.
"""

from __future__ import annotations

TOPIC = b"topic"
PRIORITY = b"priority"
PAYLOAD = b"payload"
CORRELATION_ID = b"correlation_id"
TRACING = b"tracing"
METADATA = b"metadata"
DELIVERY_ATTEMPTS = b"delivery_attempts"
ENQUEUED_TIME = b"enqueued_time"

WIRE_FIELDS = (
    TOPIC,
    PRIORITY,
    PAYLOAD,
    CORRELATION_ID,
    TRACING,
    METADATA,
    DELIVERY_ATTEMPTS,
    ENQUEUED_TIME,
)

DEFAULT_PRIORITY = 5
DEFAULT_DELIVERY_ATTEMPTS = 0

# A reader needs these two; the others have defaults (see atlasbus.decoding.decoder).
