"""XRANGE replies read raw off a redis-py connection's socket, cut into columns (executor).

redis-py sends the command (and has done the connection's handshake, TLS and AUTH included); the
reply's bytes are then taken off the socket here and cut without building a Python object per value.
A reply is walked as its bytes arrive and kept in the buffer; the replies of a micro-batch's part
are handed over in that buffer (``hand_over``, on the thread that receives them) and cut together
(``KeptReplies.cut``, on the thread that decodes them): replies whose entries all have one field
layout into a column per field (``atlasbus.decoding.kernels.cut_one_layout``), each run of replies
of one layout in one gather, and any other reply into columns of names and values
(``atlasbus.decoding.kernels.cut_any_layout``). With ``any_layout`` (``format=raw``, which needs no
column per field) every reply is cut into names and values. A reply that is not an array of entries
(an error, say) is handed to hiredis with everything after it, and so is every later reply on this
connection.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import hiredis
import numpy as np
from redis._parsers import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse
from redis.exceptions import TimeoutError as RedisTimeoutError

from atlasbus.decoding.cut_pages import ColumnPage, MixedPage, PairPage
from atlasbus.decoding.kernels.cut_any_layout import PairWalk, cut_pairs, walk_pairs
from atlasbus.decoding.kernels.cut_one_layout import (
    COMPLETE,
    LAYOUT_CHANGES,
    MORE,
    NOT_XRANGE,
    ReplyWalk,
    Walk,
    cut_replies,
    walk_reply,
)

_FIRST_BUFFER = 1 << 20  # a page of 1,000 envelopes of 500 bytes; grown to hold a batch's


@dataclass(frozen=True)
class WalkedReply:
    """A reply walked where it lies in an ``XrangePages``'s buffer, not yet cut into columns:
    by field layout (a ``Walk``) or into names and values (a ``PairWalk``)."""

    walk: ReplyWalk
    last_id: bytes  # the last entry's ID (the next page's exclusive start); b"" if none

    def __len__(self) -> int:
        return self.walk.entries


Page = WalkedReply | list[Any]
Part = ColumnPage | PairPage | MixedPage | list[Any]
# A run's key in ``KeptReplies.cut``: a walk's field names, or this for pair walks.
_ANY_LAYOUT = "any layout"


@dataclass(frozen=True)
class KeptReplies:
    """Replies handed over in the buffer they were read into, to be cut by another thread."""

    buffer: np.ndarray
    pages: Sequence[Page]
    release: Callable[[np.ndarray], None]  # takes the buffer back once the replies are cut

    def __len__(self) -> int:
        return sum(map(len, self.pages))

    def cut(self) -> list[Part]:
        """The replies in order, as parts to decode one by one: each run of replies of one
        field layout cut together into columns (one gather), each run of the other replies
        cut together into names and values, runs next to each other as one ``MixedPage``, and
        the replies hiredis read as its entry lists (next to each other, joined). The buffer
        goes back to its ``XrangePages`` after.

        Runs, not the whole hand-over: one entry of another layout made every reply handed
        over with it entry lists, and one entry in 5,000 without an optional field made the
        reader 10 times as slow (``benchmarks/bench_layouts.py``).
        """
        parts: list[Part] = []
        run: list[ReplyWalk] = []
        run_key: tuple[bytes, ...] | str | None = None  # what the run's walks share
        for piece in self._pieces():
            if isinstance(piece, list):
                self._cut_run(run, run_key, parts)
                run, run_key = [], None
                self._add_entries(piece, parts)
                continue
            piece, key = self._keyed(piece)
            if key != run_key:
                self._cut_run(run, run_key, parts)
                run, run_key = [], key
            run.append(piece)
        self._cut_run(run, run_key, parts)
        self.release(self.buffer)
        return parts

    def _pieces(self) -> Iterator[ReplyWalk | list[Any]]:
        """The pages' walks with entries, and the pages hiredis read, in order."""
        for page in self.pages:
            if isinstance(page, WalkedReply):
                if page.walk.entries:
                    yield page.walk
            elif page:
                yield page

    def _keyed(self, walk: ReplyWalk) -> tuple[ReplyWalk, tuple[bytes, ...] | str]:
        """``walk``, and what it is cut together with: a walk by layout with walks of the same
        field names, a pair walk with pair walks. A walk whose entries repeat a name is walked
        again into names and values (columns by name would keep one value of each)."""
        if isinstance(walk, Walk):
            names = walk.names(self.buffer)
            if len(set(names)) == len(names):
                return walk, tuple(names)
        if not isinstance(walk, PairWalk):
            walk = self._walked_in_pairs(walk)
        return walk, _ANY_LAYOUT

    def _walked_in_pairs(self, walk: ReplyWalk) -> PairWalk:
        """The whole reply ``walk`` walked, walked again into names and values."""
        pairs = PairWalk(walk.begin)
        if walk_pairs(self.buffer, walk.position, pairs) != COMPLETE:
            raise InvalidResponse("an XRANGE reply walked whole did not walk into names again")
        return pairs

    def _cut_run(
        self, walks: list[ReplyWalk], key: tuple[bytes, ...] | str | None, parts: list[Part]
    ) -> None:
        """Cut a run (walks of one ``key``, ``_keyed``: walks by the layout of those field
        names, or pair walks) into one part."""
        if not walks:
            return
        if isinstance(key, tuple):  # ``_keyed`` keys only walks by layout by their names
            self._add_cut(cut_replies(self.buffer, cast(list[Walk], walks), key), parts)
        else:
            pair_walks = [
                walk if isinstance(walk, PairWalk) else self._walked_in_pairs(walk)
                for walk in walks
            ]
            self._add_cut(cut_pairs(self.buffer, pair_walks), parts)

    @staticmethod
    def _add_cut(cut: ColumnPage | PairPage, parts: list[Part]) -> None:
        """``cut`` after ``parts``, joined into one ``MixedPage`` with a cut run before it."""
        last = parts[-1] if parts else None
        if isinstance(last, MixedPage):
            parts[-1] = MixedPage((*last.parts, cut))
        elif isinstance(last, ColumnPage | PairPage):
            parts[-1] = MixedPage((last, cut))
        else:
            parts.append(cut)

    @staticmethod
    def _add_entries(entries: list[Any], parts: list[Part]) -> None:
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
    connection must have no unread reply when this starts. With ``any_layout`` replies are
    walked into names and values (``PairWalk``), never split by layout nor left to hiredis.
    """

    def __init__(self, connection: Any, *, any_layout: bool = False) -> None:
        self._connection = connection
        self._any_layout = any_layout
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
        walk = self._walk_pairs(self._kept) if self._any_layout else self._walk_by_layout()
        if walk is None:
            self._hiredis = _hiredis_reader()
            return self._read_with_hiredis()
        self._kept = walk.position
        last_id = b""
        if walk.entries > 0:
            id_start, id_length = walk.places[0], walk.places[1]
            start = id_start[walk.entries - 1]
            last_id = self._buffer[start : start + id_length[walk.entries - 1]].tobytes()
        return WalkedReply(walk, last_id)

    def _walk_by_layout(self) -> ReplyWalk | None:
        """The next reply walked by field layout, or, from the entry where the layout changes,
        walked again from its start into names and values; None if not an array of entries.

        The whole reply, not its runs: a reply cut where its layout changes, each run decoded
        on its own, cost the reader 20 times as much an entry on a stream of five layouts in
        turn as on a uniform one, each run paying the decoder's calls into Arrow.
        """
        walk = Walk(self._kept)
        while (status := walk_reply(self._buffer, self._filled, walk)) == MORE:
            self._receive()
        if status == LAYOUT_CHANGES:
            return self._walk_pairs(walk.begin)
        return None if status == NOT_XRANGE else walk

    def _walk_pairs(self, begin: int) -> PairWalk | None:
        """The reply at ``begin`` walked into names and values; None if not an array of
        entries."""
        walk = PairWalk(begin)
        while (status := walk_pairs(self._buffer, self._filled, walk)) == MORE:
            self._receive()
        return None if status == NOT_XRANGE else walk

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
