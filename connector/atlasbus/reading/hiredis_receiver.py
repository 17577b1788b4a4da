"""XRANGE replies parsed by hiredis, as redis-py parses them: the pure path (executor).

Used where the compiled kernels cannot serve (``atlasbus.decoding.kernels.selection``): numba
missing, failing to compile, or ``NUMBA_DISABLE_JIT`` set. Each reply is hiredis's list of [ID,
[name, value, ...]] items, which ``atlasbus.decoding.decoder`` turns into the same rows as the
compiled path's columns (``tests/test_compiled_kernels.py`` holds both to that). The next command is
still sent before a reply is decoded, so Redis serves a page while the one before is decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError


@dataclass(frozen=True)
class ParsedReplies:
    """Replies hiredis parsed, handed over to be decoded as one list of entries."""

    pages: Sequence[list[Any]]

    def __len__(self) -> int:
        return sum(map(len, self.pages))

    def cut(self) -> list[list[Any]]:
        """The replies' entries, joined into one list."""
        joined: list[Any] = []
        for page in self.pages:
            joined.extend(page)
        return [joined] if joined else []


class HiredisPages:
    """Reads the replies to XRANGE commands sent on a redis-py ``connection``, in order."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def send(self, *args: Any) -> None:
        self._connection.send_command(*args)

    def read(self) -> list[Any]:
        """The next reply; an error reply raises redis-py's error."""
        reply = self._connection.read_response()
        if not isinstance(reply, list):
            raise RedisConnectionError(f"unexpected reply to XRANGE: {type(reply).__name__}")
        return reply

    @staticmethod
    def last_id(page: Any) -> bytes:
        """The last entry's ID of a reply ``read`` gave (typed as the compiled reader's)."""
        last: bytes = page[-1][0]
        return last

    @staticmethod
    def hand_over(pages: Sequence[Any]) -> ParsedReplies:
        """The replies ``read`` gave since the last hand-over (lists, typed as the compiled
        reader's pages)."""
        return ParsedReplies(pages)
