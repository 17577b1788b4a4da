"""The driver's questions to Redis: which streams exist, how far they reach, group positions.

Everything here runs on the Spark driver (or in the core's own callers), never per entry.
Replies are read raw where redis-py's per-entry parsing would only be thrown away.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from atlasbus.connection import RedisEndpoint, translate_errors
from atlasbus.entry_id import ZERO, EntryId
from atlasbus.source_options import Subscription

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
    # Redis 7+: the greatest ID ever removed (XDEL/XTRIM); None on older servers.
    max_deleted: EntryId | None


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
        self, stream: str, after: EntryId, upto: EntryId, budget: int
    ) -> tuple[EntryId, int]:
        """Walk at most ``budget`` entries after ``after`` (up to ``upto``).

        Returns the last ID walked (``after`` if none) and how many. Used for admission control,
        which must know exactly where the n-th entry is.
        """
        position, walked = after, 0
        with translate_errors(self.endpoint):
            while walked < budget:
                count = min(budget - walked, 1000)
                page = _command(
                    self._redis, "XRANGE", stream, position.exclusive(), str(upto), "COUNT", count
                )
                if not page:
                    break
                position = EntryId.parse(page[-1][0])
                walked += len(page)
                if len(page) < count:
                    break
        return position, walked

    def last_at_or_before(self, stream: str, position: EntryId) -> EntryId | None:
        """The newest entry at or before ``position`` (a real entry, for loss checks)."""
        with translate_errors(self.endpoint):
            reply = _command(self._redis, "XREVRANGE", stream, str(position), "-", "COUNT", 1)
        return EntryId.parse(reply[0][0]) if reply else None

    def entry_exists(self, stream: str, entry: EntryId) -> bool:
        with translate_errors(self.endpoint):
            reply = _command(self._redis, "XRANGE", stream, str(entry), str(entry))
        return bool(reply)

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
                    if _text(name) == group:
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
        """XGROUP SETID on each stream (creating the group where it is missing)."""
        import redis

        with translate_errors(self.endpoint):
            for stream, position in positions.items():
                try:
                    self._redis.xgroup_setid(stream, group, id=str(position))
                except redis.ResponseError as exc:
                    if "NOGROUP" not in str(exc) and "no such key" not in str(exc).lower():
                        raise
                    self.ensure_group(stream, group, position)


def _command(client: Any, *args: Any) -> Any:
    """A raw command; redis-py leaves ``execute_command`` untyped."""
    return client.execute_command(*args)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _stream_info(reply: Any) -> StreamInfo:
    """Parse a raw XINFO STREAM reply (a flat key/value list under RESP2)."""
    if isinstance(reply, dict):
        fields = {_text(key): value for key, value in reply.items()}
    else:
        fields = {_text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}
    first = fields.get("first-entry")
    last = fields.get("last-entry")
    max_deleted = fields.get("max-deleted-entry-id")
    return StreamInfo(
        length=int(fields.get("length", 0)),
        first=EntryId.parse(first[0]) if first else None,
        last=EntryId.parse(last[0]) if last else None,
        last_generated=EntryId.parse(fields.get("last-generated-id") or b"0-0"),
        max_deleted=EntryId.parse(max_deleted) if max_deleted is not None else None,
    )


def first_position(info: StreamInfo | None) -> EntryId:
    """The position just before a stream's first entry: where ``earliest`` starts."""
    if info is None or info.first is None:
        return ZERO
    return info.first.predecessor()


def last_position(info: StreamInfo | None) -> EntryId:
    """The position of the newest entry ever added: where ``latest`` starts."""
    if info is None:
        return ZERO
    return info.last_generated
