"""Entries the source must turn into error rows, shared by the decode and dead-letter tests.

``MALFORMED`` lists (name, fields to publish, the error text the row must contain).
"""

from __future__ import annotations

from atlasbus.wire.raw_text import raw_text
from helpers import envelope

GOOD = envelope("t", 1)

# (name, fields to publish, expected error text)
MALFORMED: list[tuple[str, dict[bytes | str, bytes | str], str]] = [
    (
        "payload not JSON",
        {**GOOD, "payload": "{not json"},
        "field 'payload' is not valid JSON: '{not json'",
    ),
    (
        "payload an array",
        {**GOOD, "payload": "[1, 2]"},
        "field 'payload' is not a JSON object: '[1, 2]'",
    ),
    (
        "payload a string",
        {**GOOD, "payload": '"hi"'},
        "field 'payload' is not a JSON object: '\"hi\"'",
    ),
    (
        "payload missing",
        {k: v for k, v in GOOD.items() if k != "payload"},
        "missing field 'payload'",
    ),
    (
        "priority missing",
        {k: v for k, v in GOOD.items() if k != "priority"},
        "missing field 'priority'",
    ),
    (
        "priority not numeric",
        {**GOOD, "priority": "high"},
        "field 'priority' must be a decimal integer, got 'high'",
    ),
    (
        "payload not UTF-8",
        {**GOOD, "payload": b'{"a": "\xff\xfe"}'},
        "field 'payload' is not valid UTF-8 (byte 7)",
    ),
    (
        "tracing not JSON",
        {**GOOD, "tracing": "trace=1"},
        "field 'tracing' is not valid JSON: 'trace=1'",
    ),
    ("tracing an array", {**GOOD, "tracing": "[]"}, "field 'tracing' is not a JSON object: '[]'"),
    ("metadata not JSON", {**GOOD, "metadata": "{'a': 1}"}, "field 'metadata' is not valid JSON"),
    (
        "delivery_attempts not integer",
        {**GOOD, "delivery_attempts": "2.5"},
        "field 'delivery_attempts' must be a decimal integer, got '2.5'",
    ),
    (
        "enqueued_time not a number",
        {**GOOD, "enqueued_time": "noon"},
        "field 'enqueued_time' must be seconds since the epoch, at least -62135424000 and "
        "below 253402128000 (0001-01-03 to 9999-12-29 UTC), got 'noon'",
    ),
    (
        "enqueued_time past year 9999",
        {**GOOD, "enqueued_time": "1e13"},
        "field 'enqueued_time' must be seconds since the epoch, at least -62135424000 and "
        "below 253402128000 (0001-01-03 to 9999-12-29 UTC), got '1e13'",
    ),
    (
        "tracing not UTF-8",
        {**GOOD, "tracing": b'{"a": "\xe9"}'},
        "field 'tracing' is not valid UTF-8 (byte 7)",
    ),
    (
        "latin-1 byte beside the text of an escape",
        {**GOOD, "payload": b"\\xe9\xe9", "x\\xff": b"\\"},
        "field 'payload' is not valid UTF-8 (byte 4)",
    ),
]


def as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def raw_map(fields: dict[bytes | str, bytes | str]) -> dict[str, str]:
    """The ``fields`` map of an entry: UTF-8 text as it is, but see atlasbus.wire.raw_text."""
    return {raw_text(as_bytes(k)): raw_text(as_bytes(v)) for k, v in fields.items()}
