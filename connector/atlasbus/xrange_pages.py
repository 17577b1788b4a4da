"""XRANGE replies read raw off a redis-py connection's socket, cut into columns (executor).

redis-py sends the command (and has done the connection's handshake, TLS and AUTH included);
the reply's bytes are then taken off the socket here and cut by ``atlasbus.xrange_reply``
without building a Python object per value. A reply is walked as its bytes arrive and kept in
the buffer; the replies of a micro-batch's part are handed over in that buffer (``hand_over``,
on the thread that receives them) and cut together, each run of entries of one field layout
in one gather (``KeptReplies.cut``, on the thread that decodes them). A reply is walked in a
new walk where its entries' layout changes; the entries of a reply whose layout changes more
than ``_MOST_LAYOUT_CHANGES`` times, or whose entries repeat a name, are parsed by hiredis
from the same bytes. A reply that is not an array of entries (an error, say) is handed to
hiredis with everything after it, and so is every later reply on this connection.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import hiredis
import numpy as np
from redis._parsers import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse
from redis.exceptions import TimeoutError as RedisTimeoutError

from atlasbus.column_page import ColumnPage
from atlasbus.xrange_reply import (
    LAYOUT_CHANGES,
    MORE,
    NOT_XRANGE,
    Walk,
    cut_replies,
    walk_reply,
)

_FIRST_BUFFER = 1 << 20  # a page of 1,000 envelopes of 500 bytes; grown to hold a batch's
# A reply is walked in a new walk where its entries' field layout changes, this many times at
# most; the rest of a reply whose layout changes more often is left to hiredis.
_MOST_LAYOUT_CHANGES = 8


@dataclass(frozen=True)
class WalkedReply:
    """A reply walked where it lies in an ``XrangePages``'s buffer, not yet cut into columns:
    one walk per run of entries of one field layout, in order."""

    walks: tuple[Walk, ...]
    last_id: bytes  # the last entry's ID (the next page's exclusive start); b"" if none

    def __len__(self) -> int:
        return sum(walk.entries for walk in self.walks)


Page = WalkedReply | list[Any]


@dataclass(frozen=True)
class KeptReplies:
    """Replies handed over in the buffer they were read into, to be cut by another thread."""

    buffer: np.ndarray
    pages: Sequence[Page]
    release: Callable[[np.ndarray], None]  # takes the buffer back once the replies are cut

    def __len__(self) -> int:
        return sum(map(len, self.pages))

    def cut(self) -> list[ColumnPage | list[Any]]:
        """The replies in order, as parts to decode one by one: each run of entries of one
        field layout cut together into columns (one gather), whether it spans replies or is
        a part of one, and any other entries as hiredis's entry lists (next to each other,
        joined). The buffer goes back to its ``XrangePages`` after.

        Runs, not the whole hand-over: one entry of another layout made every reply handed
        over with it entry lists, and one entry in 5,000 without an optional field made the
        reader 10 times as slow (``benchmarks/bench_layouts.py``).
        """
        parts: list[ColumnPage | list[Any]] = []
        run: list[Walk] = []
        run_layout: list[bytes] | None = None
        for piece in self._pieces():
            layout = self._layout(piece) if isinstance(piece, Walk) else None
            if layout is None or not isinstance(piece, Walk):
                self._cut_run(run, parts)
                run, run_layout = [], None
                self._add_entries(self._parsed(piece) if isinstance(piece, Walk) else piece, parts)
                continue
            if layout != run_layout:
                self._cut_run(run, parts)
                run, run_layout = [], layout
            run.append(piece)
        self._cut_run(run, parts)
        self.release(self.buffer)
        return parts

    def _pieces(self) -> Iterator[Walk | list[Any]]:
        """The pages' walks with entries, and the pages hiredis read, in order."""
        for page in self.pages:
            if isinstance(page, WalkedReply):
                yield from (walk for walk in page.walks if walk.entries)
            elif page:
                yield page

    def _layout(self, walk: Walk) -> list[bytes] | None:
        """The field names every entry of ``walk`` has, in order; None when they differ or a
        name repeats."""
        if not walk.uniform:
            return None
        names = walk.names(self.buffer)
        return names if len(set(names)) == len(names) else None

    def _cut_run(self, walks: list[Walk], parts: list[ColumnPage | list[Any]]) -> None:
        if not walks:
            return
        cut = cut_replies(self.buffer, walks)
        if cut is None:  # cannot happen for one layout; read the replies as hiredis does then
            for walk in walks:
                self._add_entries(self._parsed(walk), parts)
        else:
            parts.append(cut)

    def _parsed(self, walk: Walk) -> list[Any]:
        """The walk's entries as hiredis parses their bytes (under an array header of its own:
        the walk may be a part of its reply)."""
        one = _hiredis_reader()
        one.feed(b"*%d\r\n" % walk.entries)
        one.feed(self.buffer[walk.first_entry : walk.position].tobytes())
        entries: list[Any] = one.gets()
        return entries

    @staticmethod
    def _add_entries(entries: list[Any], parts: list[ColumnPage | list[Any]]) -> None:
        if parts and isinstance(parts[-1], list):
            parts[-1] = parts[-1] + entries
        else:
            parts.append(entries)


class XrangePages:
    """Reads the replies to XRANGE commands sent on ``connection``, in order.

    ``read`` gives each reply as soon as its last byte is walked (so the next command can be
    sent before any of it is cut), as a ``WalkedReply`` or, once a reply was not an array of
    entries, as hiredis's list of [ID, [name, value, ...]] items. ``hand_over`` gives the
    replies read since the last hand-over, in their buffer, and goes on in a spare one. The
    connection must have no unread reply when this starts.
    """

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._buffer = np.empty(_FIRST_BUFFER, np.uint8)
        self._filled = 0
        self._kept = 0  # the replies read since the last hand-over lie in buffer[:kept]
        self._hiredis: Any = None  # once set, every reply is read through it
        # Buffers whose replies were cut, put back by the decoding thread: one being filled,
        # one handed over and one being cut make three at most.
        self._spares: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()

    def send(self, *args: Any) -> None:
        self._connection.send_command(*args)

    def read(self) -> Page:
        """The next reply, once its last byte is walked; an error reply raises redis-py's error."""
        if self._hiredis is not None:
            return self._read_with_hiredis()
        walks = [Walk(self._kept)]
        while True:
            may_split = len(walks) <= _MOST_LAYOUT_CHANGES
            status = walk_reply(self._buffer, self._filled, walks[-1], may_split=may_split)
            if status == MORE:
                self._receive()
            elif status == LAYOUT_CHANGES:
                walks.append(walks[-1].rest())
            else:
                break
        if status == NOT_XRANGE:
            self._hiredis = _hiredis_reader()
            return self._read_with_hiredis()
        walk = walks[-1]
        self._kept = walk.position
        last_id = b""
        if walk.entries > 0:
            id_start, id_length = walk.places[0], walk.places[1]
            start = id_start[walk.entries - 1]
            last_id = self._buffer[start : start + id_length[walk.entries - 1]].tobytes()
        return WalkedReply(tuple(walks), last_id)

    @staticmethod
    def last_id(page: Page) -> bytes:
        last: bytes = page.last_id if isinstance(page, WalkedReply) else page[-1][0]
        return last

    def hand_over(self, pages: Sequence[Page]) -> KeptReplies:
        """``pages``, every non-empty reply read since the last hand-over, in order, in their
        buffer; reading goes on in a spare buffer, so a reply left out is lost."""
        kept = self._buffer
        rest = self._filled - self._kept
        try:
            spare = self._spares.get_nowait()
        except queue.Empty:
            spare = np.empty(len(kept), np.uint8)
        if len(spare) < rest:
            spare = np.empty(2 * rest, np.uint8)
        spare[:rest] = kept[self._kept : self._filled]
        self._buffer, self._filled, self._kept = spare, rest, 0
        return KeptReplies(kept, pages, self._spares.put)

    def _read_with_hiredis(self) -> list[Any]:
        """The next reply parsed by hiredis from the bytes after the walked replies'."""
        while (reply := self._hiredis.gets()) is False:
            if self._filled == self._kept:
                self._receive()
            self._hiredis.feed(self._buffer[self._kept : self._filled].tobytes())
            self._filled = self._kept
        if isinstance(reply, Exception):
            raise reply
        if not isinstance(reply, list):
            raise RedisConnectionError(f"unexpected reply to XRANGE: {type(reply).__name__}")
        return reply

    def _receive(self) -> None:
        """Append what the socket has to the buffer (growing it when full); waits for a byte."""
        if self._filled == len(self._buffer):
            grown = np.empty(2 * len(self._buffer), np.uint8)
            grown[: self._filled] = self._buffer[: self._filled]
            self._buffer = grown
        sock = self._connection._sock
        if sock is None:
            raise RedisConnectionError("the connection to Redis was closed")
        try:
            received = sock.recv_into(self._buffer.data[self._filled :])
        except TimeoutError as exc:  # socket.timeout: the connection's socket_timeout ran out
            raise RedisTimeoutError("Timeout reading from socket") from exc
        except OSError as exc:
            raise RedisConnectionError(f"Error while reading from socket: {exc}") from exc
        if received == 0:
            raise RedisConnectionError("Connection closed by server.")
        self._filled += received


def _hiredis_reader() -> Any:
    """A hiredis reader raising what redis-py raises (its mapping of WRONGTYPE, NOPERM, ...)."""
    return hiredis.Reader(protocolError=InvalidResponse, replyError=BaseParser.parse_error)
