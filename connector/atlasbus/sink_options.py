"""The sink's options and input columns, checked once when a write or a query starts.

Parsing does no I/O, so a bad option or an unknown column fails before any task runs. The
input columns are checked on the Arrow form of the DataFrame's schema, which keeps Spark out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.types as pat

from atlasbus.connection import RedisEndpoint
from atlasbus.errors import ConfigurationError
from atlasbus.option_reader import OptionReader

DEFAULT_STREAM_PREFIX = "atlas_bus"
DEFAULT_MAX_MESSAGE_BYTES = 262_144

URL = "url"
USERNAME = "username"
PASSWORD = "password"
STREAM_PREFIX = "streamPrefix"
TOPIC = "topic"
MAX_LEN = "maxLen"
MAX_MESSAGE_BYTES = "maxMessageBytes"
EXACTLY_ONCE = "exactlyOnce"
DEAD_LETTER_TABLE = "deadLetterTable"

SINK_OPTIONS = (
    URL,
    USERNAME,
    PASSWORD,
    STREAM_PREFIX,
    TOPIC,
    MAX_LEN,
    MAX_MESSAGE_BYTES,
    EXACTLY_ONCE,
    DEAD_LETTER_TABLE,
)

# Spark adds these to a write's options itself; they are not ours to refuse.
SPARK_WRITE_OPTIONS = ("path", "checkpointLocation", "queryName")

# Input columns the sink accepts, in wire-format order.
PAYLOAD_COLUMN = "payload"
TOPIC_COLUMN = "topic"
PRIORITY_COLUMN = "priority"
CORRELATION_ID_COLUMN = "correlation_id"
TRACING_COLUMN = "tracing"
METADATA_COLUMN = "metadata"
DELIVERY_ATTEMPTS_COLUMN = "delivery_attempts"

INPUT_COLUMNS = (
    TOPIC_COLUMN,
    PRIORITY_COLUMN,
    PAYLOAD_COLUMN,
    CORRELATION_ID_COLUMN,
    TRACING_COLUMN,
    METADATA_COLUMN,
    DELIVERY_ATTEMPTS_COLUMN,
)


@dataclass(frozen=True)
class SinkOptions:
    """Everything the sink needs, validated. Travels to executors (no secrets in repr)."""

    endpoint: RedisEndpoint
    stream_prefix: str
    topic: str | None
    max_len: int | None
    max_message_bytes: int
    exactly_once: bool
    dead_letter_table: str | None = None

    def stream_key(self, topic: str) -> str:
        return f"{self.stream_prefix}:{topic}"


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the sink options Spark passed (strings, any key case)."""
    reader = OptionReader(options)
    endpoint = RedisEndpoint.from_options(
        reader.string(URL), reader.string(USERNAME), reader.string(PASSWORD)
    )
    prefix = reader.required_text(STREAM_PREFIX, reader.string(STREAM_PREFIX))
    topic = reader.required_text(TOPIC, reader.string(TOPIC))
    problem = None if topic is None else topic_problem(topic)
    if problem is not None:
        raise ConfigurationError(f"option 'topic' {problem}")
    parsed = SinkOptions(
        endpoint=endpoint,
        stream_prefix=prefix or DEFAULT_STREAM_PREFIX,
        topic=topic,
        max_len=reader.positive_int(MAX_LEN),
        max_message_bytes=reader.positive_int(MAX_MESSAGE_BYTES, DEFAULT_MAX_MESSAGE_BYTES)
        or DEFAULT_MAX_MESSAGE_BYTES,
        exactly_once=reader.boolean(EXACTLY_ONCE, True),
        dead_letter_table=_dead_letter_table(reader),
    )
    reader.reject_unknown(SINK_OPTIONS, ignored=SPARK_WRITE_OPTIONS)
    return parsed


TOPIC_RULE = (
    "a topic must be non-empty, contain no comma and not start or end with whitespace "
    "(inside it, spaces, control characters and any Unicode are fine)"
)


def topic_problem(topic: str) -> str | None:
    """Why the source could not name ``topic`` in its ``topics`` option; ``None`` if it can.

    What the sink publishes, the source must read back by name. Its ``topics`` (and
    ``streams``) option is split at commas and each name stripped with ``str.strip``, so exactly
    these topics cannot be named there: empty or only whitespace, containing a comma, or with
    whitespace (``str.isspace``: also CR, LF, NEL, no-break and other Unicode spaces) at either
    end. Everything else goes through Spark's options unchanged and is read back.
    """
    if not topic:
        return "is empty"
    stripped = topic.strip()
    if not stripped:
        return f"is only whitespace ({topic!r}); {TOPIC_RULE}"
    if "," in topic:
        return (
            "contains a comma, where the source's 'topics' option splits its list, so it could "
            f"not be read back by name; {TOPIC_RULE}"
        )
    if stripped != topic:
        leading = topic[: len(topic) - len(topic.lstrip())]
        trailing = topic[len(topic.rstrip()) :]
        if leading and trailing:
            where = f"starts and ends with whitespace ({leading!r}, {trailing!r})"
        elif leading:
            where = f"starts with whitespace ({leading!r})"
        else:
            where = f"ends with whitespace ({trailing!r})"
        return (
            f"{where}, which the source's 'topics' option strips, so it could not be read back "
            f"by name; {TOPIC_RULE}"
        )
    return None


def _dead_letter_table(reader: OptionReader) -> str | None:
    raw = reader.required_text(DEAD_LETTER_TABLE, reader.string(DEAD_LETTER_TABLE))
    return raw.strip() if raw is not None else None


def check_input_schema(schema: pa.Schema, options: SinkOptions) -> None:
    """Refuse unknown, duplicate, missing or mistyped input columns before any task runs."""
    names = list(schema.names)
    accepted = ", ".join(INPUT_COLUMNS)
    unknown = [name for name in names if name not in INPUT_COLUMNS]
    if unknown:
        which = ", ".join(repr(name) for name in unknown)
        raise ConfigurationError(
            f"the atlasbus sink does not accept column(s) {which}. Accepted columns: {accepted} "
            "(payload is required). Select or rename the columns to publish."
        )
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigurationError(
            f"the atlasbus sink got column(s) {', '.join(duplicates)} more than once"
        )
    if PAYLOAD_COLUMN not in names:
        raise ConfigurationError(
            f"the atlasbus sink needs a 'payload' column (JSON text, a struct or a map). "
            f"Accepted columns: {accepted}"
        )
    if TOPIC_COLUMN not in names and options.topic is None:
        raise ConfigurationError(
            "the atlasbus sink needs a topic: add a 'topic' column or set option 'topic'"
        )
    for field in schema:
        expected = _EXPECTED_TYPES[field.name]
        if not _TYPE_CHECKS[field.name](field.type):
            raise ConfigurationError(f"column '{field.name}' must be {expected}, got {field.type}")


def _is_text(t: pa.DataType) -> bool:
    return bool(pat.is_string(t) or pat.is_large_string(t))


def _is_json_like(t: pa.DataType) -> bool:
    return _is_text(t) or bool(pat.is_struct(t) or pat.is_map(t))


_TYPE_CHECKS = {
    TOPIC_COLUMN: _is_text,
    PRIORITY_COLUMN: pat.is_integer,
    PAYLOAD_COLUMN: _is_json_like,
    CORRELATION_ID_COLUMN: _is_text,
    TRACING_COLUMN: _is_json_like,
    METADATA_COLUMN: _is_json_like,
    DELIVERY_ATTEMPTS_COLUMN: pat.is_integer,
}

_EXPECTED_TYPES = {
    TOPIC_COLUMN: "a string",
    PRIORITY_COLUMN: "an integer",
    PAYLOAD_COLUMN: "JSON text (string), a struct or a map",
    CORRELATION_ID_COLUMN: "a string",
    TRACING_COLUMN: "a map, a struct or JSON text (string)",
    METADATA_COLUMN: "a map, a struct or JSON text (string)",
    DELIVERY_ATTEMPTS_COLUMN: "an integer",
}
