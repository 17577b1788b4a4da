"""The sink's options and input columns, checked once when a write or a query starts.

Parsing does no I/O, so a bad option or an unknown column fails before any task runs. The
input columns (named in ``sink_columns``) are checked on the Arrow form of the DataFrame's
schema, which keeps Spark out. Option keys live in ``option_keys``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from atlasbus.bus.connection import RedisEndpoint
from atlasbus.bus.replication import Replication
from atlasbus.errors import ConfigurationError
from atlasbus.options import keys
from atlasbus.options.keys import DEFAULT_STREAM_PREFIX
from atlasbus.options.reader import OptionReader, parse_shared_options
from atlasbus.options.sink_columns import (
    ACCEPTED_TYPES,
    INPUT_COLUMNS,
    PAYLOAD_COLUMN,
    TOPIC_COLUMN,
)

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_STREAM_PREFIX",
    "TOPIC_RULE",
    "SinkOptions",
    "check_input_schema",
    "parse_sink_options",
    "topic_problem",
]

DEFAULT_MAX_MESSAGE_BYTES = 262_144


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
    # minReplicas/replicaTimeout: WAIT for that many replicas after each transaction
    replication: Replication | None = None

    def stream_key(self, topic: str) -> str:
        return f"{self.stream_prefix}:{topic}"


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the sink options Spark passed (strings, any key case)."""
    reader = OptionReader(options)
    reader.reject_unknown(keys.SINK_OPTIONS, ignored=keys.SPARK_WRITE_OPTIONS)
    shared = parse_shared_options(reader)
    topic = reader.non_empty(keys.TOPIC)
    problem = None if topic is None else topic_problem(topic)
    if problem is not None:
        raise ConfigurationError(f"option '{keys.TOPIC}' {problem}")
    parsed = SinkOptions(
        endpoint=shared.endpoint,
        stream_prefix=shared.stream_prefix,
        topic=topic,
        max_len=reader.positive_int(keys.MAX_LEN),
        max_message_bytes=reader.positive_int(
            keys.MAX_MESSAGE_BYTES, default=DEFAULT_MAX_MESSAGE_BYTES
        ),
        exactly_once=reader.boolean(keys.EXACTLY_ONCE, True),
        dead_letter_table=shared.dead_letter_table,
        replication=shared.replication,
    )
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
        accepts, expected = ACCEPTED_TYPES[field.name]
        if not accepts(field.type):
            raise ConfigurationError(f"column '{field.name}' must be {expected}, got {field.type}")
