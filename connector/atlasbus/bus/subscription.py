"""Which streams a query reads (``topics``, ``topicPattern`` or ``streams``), and how topics and
stream keys map to each other: parsed from the options, used by discovery (driver)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from atlasbus.bus.redis_glob import glob_matches


@dataclass(frozen=True)
class Subscription:
    """Which streams to read: a topic list, a glob over topics, or raw stream keys."""

    kind: Literal["topics", "pattern", "streams"]
    names: tuple[str, ...]
    stream_prefix: str

    def fixed_streams(self) -> tuple[str, ...]:
        """The stream keys for ``topics`` / ``streams``; empty for a pattern."""
        if self.kind == "topics":
            return tuple(self.stream_key(topic) for topic in self.names)
        if self.kind == "streams":
            return self.names
        return ()

    def stream_key(self, topic: str) -> str:
        return f"{self.stream_prefix}:{topic}"

    def scan_pattern(self) -> str:
        """The SCAN MATCH glob for ``topicPattern`` (the prefix is matched literally)."""
        escaped_prefix = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.stream_prefix)
        return f"{escaped_prefix}:{self.names[0]}"

    def matches(self, stream: str) -> bool:
        if self.kind == "pattern":
            head = f"{self.stream_prefix}:"
            return stream.startswith(head) and glob_matches(self.names[0], stream[len(head) :])
        return stream in self.fixed_streams()

    def topic_of(self, stream: str) -> str:
        """The topic a stream carries: its key without ``{streamPrefix}:``, else the key."""
        head = f"{self.stream_prefix}:"
        return stream[len(head) :] if stream.startswith(head) else stream

    def describe(self) -> str:
        if self.kind == "pattern":
            return f"topicPattern {self.names[0]!r}"
        return f"{self.kind} {', '.join(self.names)}"

    def stream_named(self, key: str) -> str | None:
        """The stream a key of ``startingOffsets``/``endingOffsets`` names, ``None`` if none.

        With ``streams`` a key is a stream key. With ``topics`` and ``topicPattern`` it is
        the full key of a subscribed stream (as checkpoints and progress reports show them)
        or else a topic name; the stream key is tried first, so every subscribed stream can be
        named by its key even when a topic name looks like a stream key.
        """
        if self.matches(key):
            return key
        if self.kind != "streams" and self.matches(self.stream_key(key)):
            return self.stream_key(key)
        return None

    def accepted_keys(self) -> str:
        """What ``stream_named`` accepts, for error messages."""
        if self.kind == "pattern":
            return (
                f"topics matching {self.names[0]!r}, or stream keys matching "
                f"{self.stream_key(self.names[0])!r}"
            )
        if self.kind == "streams":
            return f"the stream keys {', '.join(self.names)}"
        return f"the topics {', '.join(self.names)}, or their stream keys " + ", ".join(
            self.fixed_streams()
        )
