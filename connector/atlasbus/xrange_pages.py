"""XRANGE replies read raw off a redis-py connection's socket, cut into columns (executor).

redis-py sends the command (and has done the connection's handshake, TLS and AUTH included);
the reply's bytes are then taken off the socket here and cut by ``atlasbus.xrange_reply``
without building a Python object per value. A page whose entries differ in their fields is
parsed by hiredis from the same bytes. A reply that is not an array of entries (an error, say)
is handed to hiredis with everything after it, and so is every later reply on this connection.
"""

from __future__ import annotations

from typing import Any

import hiredis
import numpy as np
from redis._parsers import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse
from redis.exceptions import TimeoutError as RedisTimeoutError

from atlasbus.column_page import ColumnPage
from atlasbus.xrange_reply import COMPLETE, NOT_XRANGE, Walk, cut_reply, walk_reply

_FIRST_BUFFER = 1 << 20  # a page of 1,000 envelopes of 500 bytes fits; grown when one does not


class XrangePages:
    """Reads the replies to XRANGE commands sent on ``connection``, in order.

    Each reply is a ``ColumnPage`` or, when its entries' field layouts differ, hiredis's list of
    [ID, [name, value, ...]] items. The connection must have no unread reply when this starts.
    """

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._buffer = np.empty(_FIRST_BUFFER, np.uint8)
        self._filled = 0
        self._hiredis: Any = None  # once set, every reply is read through it

    def send(self, *args: Any) -> None:
        self._connection.send_command(*args)

    def read(self) -> ColumnPage | list[Any]:
        """The next reply: waits for its bytes; raises redis-py's error for an error reply."""
        if self._hiredis is not None:
            return self._read_with_hiredis()
        walk = Walk()
        while (status := walk_reply(self._buffer, self._filled, walk)) not in (
            COMPLETE,
            NOT_XRANGE,
        ):
            self._receive()
        if status == NOT_XRANGE:
            self._hiredis = _hiredis_reader()
            self._hiredis.feed(self._buffer[: self._filled].tobytes())
            self._filled = 0
            return self._read_with_hiredis()
        end = walk.position
        page = cut_reply(self._buffer, walk)
        if page is None:
            one = _hiredis_reader()
            one.feed(self._buffer[:end].tobytes())
            page = one.gets()
        rest = self._filled - end
        self._buffer[:rest] = self._buffer[end : self._filled]
        self._filled = rest
        return page

    def _read_with_hiredis(self) -> list[Any]:
        while (reply := self._hiredis.gets()) is False:
            self._receive()
            self._hiredis.feed(self._buffer[: self._filled].tobytes())
            self._filled = 0
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
