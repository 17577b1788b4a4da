"""The driver's questions to Redis: which streams exist, how far they reach, group positions.

Everything here runs on the Spark driver (or in the core's own callers), never per entry.
Replies are read raw where redis-py's per-entry parsing would only be thrown away.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from atlasbus.connection import RedisEndpoint, raw_connection, translate_errors
from atlasbus.entry_id import ZERO, EntryId
from atlasbus.errors import ConfigurationError
from atlasbus.source_options import Subscription
from atlasbus.values import reply_text

if TYPE_CHECKING:
    import redis


@dataclass(frozen=True)
class StreamInfo:
    """What XINFO STREAM says about one stream, reduced to what planning needs."""

    length: int
    first: EntryId | None
    last: EntryId | None
    # The ID of the newest entry ever added, even if since deleted.
    last_generated: EntryId
    # Redis 7+: the greatest ID ever removed by XDEL (7.0 leaves it on XTRIM); None on 6.x.
    max_deleted: EntryId | None
    # Redis 7+: how many entries were ever added; None on 6.x.
    entries_added: int | None = None

    @property
    def removed(self) -> int | None:
        """Redis 7+: how many entries were ever removed (XDEL, XTRIM, MAXLEN); None on 6.x."""
        if self.entries_added is None:
            return None
        return self.entries_added - self.length


@dataclass
class Walk:
    """The entries of a range counted on the driver, cut into pieces of ``piece_size``.

    ``cuts[i]`` is the ID of the last entry of piece ``i``; ``counts[i]`` how many entries it
    holds. The piece being filled is ``pending`` entries long.
    """

    piece_size: int
    total: int = 0
    last: EntryId | None = None
    cuts: list[EntryId] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    pending: int = 0

    def feed(self, ids: Sequence[bytes]) -> None:
        """Count a page of entry IDs, in order."""
        start = 0
        while len(ids) - start >= self.piece_size - self.pending:
            take = self.piece_size - self.pending
            start += take
            self.cuts.append(EntryId.parse(ids[start - 1]))
            self.counts.append(self.piece_size)
            self.pending = 0
        self.pending += len(ids) - start
        self.total += len(ids)
        if ids:
            self.last = EntryId.parse(ids[-1])

    def pieces(self, upto: EntryId) -> tuple[tuple[EntryId, ...], tuple[int, ...]]:
        """Cuts strictly inside ``(.., upto)`` and the count of every piece up to ``upto``."""
        cuts, counts = list(self.cuts), list(self.counts)
        if self.pending or not cuts:
            counts.append(self.pending)
        else:  # the last piece ended exactly on the last entry: no empty piece after it
            cuts.pop()
        while cuts and cuts[-1] >= upto:
            cuts.pop()
            counts[-2:] = [counts[-2] + counts[-1]]
        return tuple(cuts), tuple(counts)


class StreamCatalog:
    """Stream discovery and metadata over one endpoint."""

    def __init__(self, endpoint: RedisEndpoint) -> None:
        self.endpoint = endpoint

    @property
    def _redis(self) -> redis.Redis:
        return self.endpoint.client()

    def discover(self, subscription: Subscription) -> list[str]:
        """Stream keys to read now: the fixed list, or the pattern's matches (SCAN)."""
        if subscription.kind != "pattern":
            return list(subscription.fixed_streams())
        with translate_errors(self.endpoint):
            found = {
                key.decode() if isinstance(key, bytes) else key
                for key in self._redis.scan_iter(
                    match=subscription.scan_pattern(), count=1000, _type="stream"
                )
            }
        return sorted(key for key in found if subscription.matches(key))

    def info(self, streams: Sequence[str]) -> dict[str, StreamInfo | None]:
        """XINFO STREAM for each stream in one round trip; None for a stream that is absent."""
        if not streams:
            return {}
        with translate_errors(self.endpoint):
            pipe = self._redis.pipeline(transaction=False)
            for stream in streams:
                _command(pipe, "XINFO", "STREAM", stream)
            replies = pipe.execute(raise_on_error=False)
        result: dict[str, StreamInfo | None] = {}
        for stream, reply in zip(streams, replies, strict=True):
            if isinstance(reply, Exception):
                if "no such key" in str(reply).lower():
                    result[stream] = None
                    continue
                if str(reply).startswith("WRONGTYPE"):
                    raise ConfigurationError(
                        f"key {stream!r} on Redis at {self.endpoint.description} is not a "
                        "stream: check options 'topics'/'topicPattern'/'streams' and "
                        "'streamPrefix' (a topic names the stream '{streamPrefix}:{topic}')"
                    )
                with translate_errors(self.endpoint):
                    raise reply
            result[stream] = _stream_info(reply)
        return result

    def first_in_range(self, stream: str, after: EntryId, upto: EntryId) -> EntryId | None:
        """The ID of the first entry in ``(after, upto]``, or None if the range is empty."""
        with translate_errors(self.endpoint):
            reply = _command(
                self._redis, "XRANGE", stream, after.exclusive(), str(upto), "COUNT", 1
            )
        return EntryId.parse(reply[0][0]) if reply else None

    def advance(
        self, stream: str, after: EntryId, upto: EntryId, budget: int | None, walk: Walk
    ) -> tuple[EntryId, int]:
        """Walk at most ``budget`` entries (all if None) after ``after``, up to ``upto``.

        Returns the last ID walked (``after`` if none) and how many; ``walk`` counts them into
        pieces. Used for admission control, which must know exactly where the n-th entry is,
        and to count a range whose entries may have been deleted. Reads replies raw: only the
        IDs are kept.
        """
        position, walked = after, 0
        with raw_connection(self.endpoint) as connection, translate_errors(self.endpoint):
            while budget is None or walked < budget:
                count = _WALK_PAGE if budget is None else min(budget - walked, _WALK_PAGE)
                connection.send_command(
                    "XRANGE", stream, position.exclusive(), str(upto), "COUNT", count
                )
                page = connection.read_response()
                if not page:
                    break
                ids = [entry[0] for entry in page]
                walk.feed(ids)
                position = EntryId.parse(ids[-1])
                walked += len(ids)
                if len(ids) < count:
                    break
        return position, walked

    def last_at_or_before(self, stream: str, position: EntryId) -> EntryId | None:
        """The newest entry at or before ``position`` (a real entry, for loss checks)."""
        with translate_errors(self.endpoint):
            reply = _command(self._redis, "XREVRANGE", stream, str(position), "-", "COUNT", 1)
        return EntryId.parse(reply[0][0]) if reply else None

    # --- consumer groups -----------------------------------------------------------------------

    def group_positions(self, streams: Iterable[str], group: str) -> dict[str, EntryId]:
        """The group's last-delivered ID on each stream where the group exists."""
        positions: dict[str, EntryId] = {}
        with translate_errors(self.endpoint):
            for stream in streams:
                try:
                    groups = self._redis.xinfo_groups(stream)
                except Exception as exc:
                    if "no such key" in str(exc).lower():
                        continue
                    raise
                for info in groups:
                    name = info.get("name")
                    if reply_text(name) == group:
                        positions[stream] = EntryId.parse(info["last-delivered-id"])
        return positions

    def ensure_group(self, stream: str, group: str, position: EntryId) -> bool:
        """Create the group at ``position`` (creating the stream too) if missing; True if new."""
        import redis

        with translate_errors(self.endpoint):
            try:
                self._redis.xgroup_create(stream, group, id=str(position), mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" in str(exc):
                    return False
                raise
        return True

    def move_group(self, positions: dict[str, EntryId], group: str) -> None:
        """XGROUP SETID on each stream (creating the group where it is missing).

        A stream deleted since the query read it is left alone: there is nothing to mirror, and
        creating the group would bring the key back as an empty stream.
        """
        import redis

        with translate_errors(self.endpoint):
            for stream, position in positions.items():
                try:
                    self._redis.xgroup_setid(stream, group, id=str(position))
                except redis.ResponseError as exc:
                    message = str(exc).lower()
                    if "requires the key to exist" in message or "no such key" in message:
                        continue
                    if "nogroup" not in message:
                        raise
                    self.ensure_group(stream, group, position)


_WALK_PAGE = 10_000


def _command(client: Any, *args: Any) -> Any:
    """A raw command; redis-py leaves ``execute_command`` untyped."""
    return client.execute_command(*args)


def _stream_info(reply: Any) -> StreamInfo:
    """Parse a raw XINFO STREAM reply (a flat key/value list under RESP2)."""
    if isinstance(reply, dict):
        fields = {reply_text(key): value for key, value in reply.items()}
    else:
        fields = {reply_text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}
    first = fields.get("first-entry")
    last = fields.get("last-entry")
    max_deleted = fields.get("max-deleted-entry-id")
    added = fields.get("entries-added")
    return StreamInfo(
        length=int(fields.get("length", 0)),
        first=EntryId.parse(first[0]) if first else None,
        last=EntryId.parse(last[0]) if last else None,
        last_generated=EntryId.parse(fields.get("last-generated-id") or b"0-0"),
        max_deleted=EntryId.parse(max_deleted) if max_deleted is not None else None,
        entries_added=int(added) if added is not None else None,
    )


def last_position(info: StreamInfo | None) -> EntryId:
    """The position of the newest entry ever added: where ``latest`` starts."""
    if info is None:
        return ZERO
    return info.last_generated
