"""The driver's questions to Redis: which streams exist, how far they reach, group positions.

Everything here runs on the Spark driver (or in the core's own callers), never per entry.
Replies are read raw where redis-py's per-entry parsing would only be thrown away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from atlasbus.bus.cluster import send_by_node
from atlasbus.bus.connection import (
    RedisEndpoint,
    across_failovers,
    is_cluster_client,
    on_node,
    raw_connection,
    translate_errors,
)
from atlasbus.bus.gc_pause import cyclic_gc_paused
from atlasbus.bus.replication import NoLongerMaster, Replication, wait_for_replicas
from atlasbus.bus.slot_map import refresh_slot_map
from atlasbus.bus.subscription import Subscription
from atlasbus.errors import ConfigurationError
from atlasbus.model.conversions import reply_text
from atlasbus.model.entry_id import ZERO, EntryId

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
                    match=subscription.scan_pattern(), count=_SCAN_COUNT, _type="stream"
                )
            }
        return sorted(key for key in found if subscription.matches(key))

    def info(self, streams: Sequence[str]) -> dict[str, StreamInfo | None]:
        """XINFO STREAM for each stream in one round trip; None for a stream that is absent."""
        replies = self._pipelined([("XINFO", "STREAM", stream) for stream in streams])
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
            result[stream] = parse_stream_info(reply)
        return result

    def replicas_behind(self, replication: Replication) -> str | None:
        """None once ``replication.min_replicas`` replicas hold every write made so far
        (waiting up to its timeout); else the master (``host:port``) whose replicas fell short.
        Ask after reading the tails that are to count.

        On a cluster every master's replicas are asked (each master holds some streams). A
        node the slot map still names master may have handed over to its replica (a
        failover): the map is read again and ``NoLongerMaster`` raised, naming the node. The
        tails were read from the old master, which may hold writes the new one never got: read
        them again, then ask again.
        """
        client: Any = self._redis
        if not is_cluster_client(client):
            with translate_errors(self.endpoint):
                try:
                    held = wait_for_replicas(client, replication)
                except NoLongerMaster:
                    held = False
            return None if held else self.endpoint.description
        try:
            return self._master_behind(client, replication)
        except NoLongerMaster:  # a failover since the slot map was read
            with translate_errors(self.endpoint):
                refresh_slot_map(client)
            raise

    def _master_behind(self, client: Any, replication: Replication) -> str | None:
        """The first master of the cluster whose replicas do not hold all its writes."""
        for node in client.get_primaries():
            with on_node(node.name), translate_errors(self.endpoint):
                try:
                    if not wait_for_replicas(client.get_redis_connection(node), replication):
                        return str(node.name)
                except NoLongerMaster:
                    raise NoLongerMaster(node.name) from None
        return None

    def first_in_range(self, stream: str, after: EntryId, upto: EntryId) -> EntryId | None:
        """The ID of the first entry in ``(after, upto]``, or None if the range is empty."""
        return self.first_in_ranges({stream: (after, upto)})[stream]

    def first_in_ranges(
        self, ranges: Mapping[str, tuple[EntryId, EntryId]]
    ) -> dict[str, EntryId | None]:
        """``first_in_range`` for each stream's ``(after, upto]``, in one round trip."""
        commands = [
            ("XRANGE", stream, after.exclusive(), str(upto), "COUNT", 1)
            for stream, (after, upto) in ranges.items()
        ]
        replies = self._pipelined(commands, raise_errors=True)
        return {
            stream: EntryId.parse(reply[0][0]) if reply else None
            for stream, reply in zip(ranges, replies, strict=True)
        }

    def advance(
        self, stream: str, after: EntryId, upto: EntryId, budget: int | None, walk: Walk
    ) -> tuple[EntryId, int]:
        """Walk at most ``budget`` entries (all if None) after ``after``, up to ``upto``.

        Returns the last ID walked (``after`` if none) and how many; ``walk`` counts them into
        pieces. Used for admission control, which must know exactly where the n-th entry is,
        and to count a range whose entries may have been deleted. Reads replies raw: only the
        IDs are kept.
        """
        return self.advance_many([Advance(stream, after, upto, budget, walk)])[0]

    def advance_many(self, walks: Sequence[Advance]) -> list[tuple[EntryId, int]]:
        """``advance`` for several streams at once: one pipelined XRANGE page each per round.

        Many streams with a few entries each cost one round trip, not one per stream. A round
        asks for about ``_ROUND_ENTRIES`` entries in all (at least ``_MIN_PAGE`` per stream,
        at most ``_WALK_PAGE``), so the replies held at once stay bounded. Returns, in order,
        each walk's last ID walked and how many.
        """
        position = [w.after for w in walks]
        walked = [0] * len(walks)
        active = [i for i, w in enumerate(walks) if w.budget is None or w.budget > 0]
        with (
            self._round_trips() as send,
            translate_errors(self.endpoint),
            cyclic_gc_paused(),
        ):
            while active:
                page = min(_WALK_PAGE, max(_MIN_PAGE, _ROUND_ENTRIES // len(active)))
                counts = []
                for i in active:
                    budget = walks[i].budget
                    counts.append(page if budget is None else min(budget - walked[i], page))
                replies = send(
                    [
                        (
                            "XRANGE",
                            walks[i].stream,
                            position[i].exclusive(),
                            str(walks[i].upto),
                            "COUNT",
                            count,
                        )
                        for i, count in zip(active, counts, strict=True)
                    ],
                    raise_errors=True,
                )
                still_active = []
                for i, count, reply in zip(active, counts, replies, strict=True):
                    ids = [entry[0] for entry in reply or ()]
                    if ids:
                        walks[i].walk.feed(ids)
                        position[i] = EntryId.parse(ids[-1])
                        walked[i] += len(ids)
                    budget = walks[i].budget
                    if len(ids) == count and (budget is None or walked[i] < budget):
                        still_active.append(i)
                active = still_active
        return list(zip(position, walked, strict=True))

    def last_at_or_before(self, stream: str, position: EntryId) -> EntryId | None:
        """The newest entry at or before ``position`` (a real entry, for loss checks)."""
        return self.last_at_or_before_each({stream: position})[stream]

    def last_at_or_before_each(self, positions: Mapping[str, EntryId]) -> dict[str, EntryId | None]:
        """``last_at_or_before`` for each stream, in one round trip."""
        replies = self._pipelined(
            [("XREVRANGE", stream, str(at), "-", "COUNT", 1) for stream, at in positions.items()],
            raise_errors=True,
        )
        return {
            stream: EntryId.parse(reply[0][0]) if reply else None
            for stream, reply in zip(positions, replies, strict=True)
        }

    # --- consumer groups -----------------------------------------------------------------------

    def group_positions(self, streams: Iterable[str], group: str) -> dict[str, EntryId]:
        """The group's last-delivered ID on each stream where the group exists (one round trip)."""
        streams = list(streams)
        replies = self._pipelined([("XINFO", "GROUPS", stream) for stream in streams])
        positions: dict[str, EntryId] = {}
        for stream, reply in zip(streams, replies, strict=True):
            if isinstance(reply, Exception):
                if "no such key" in str(reply).lower():
                    continue
                with translate_errors(self.endpoint):
                    raise reply
            for info in reply:
                fields = _as_fields(info)
                if reply_text(fields.get("name")) == group:
                    positions[stream] = EntryId.parse(fields["last-delivered-id"])
        return positions

    def ensure_group(self, stream: str, group: str, position: EntryId) -> bool:
        """Create the group at ``position`` (creating the stream too) if missing; True if new."""
        return stream in self.ensure_groups({stream: position}, group)

    def ensure_groups(self, positions: Mapping[str, EntryId], group: str) -> set[str]:
        """``ensure_group`` on each stream in one round trip; the streams where it was created.

        A key that is not a stream raises redis-py's WRONGTYPE error, as XGROUP CREATE does.
        """
        streams = list(positions)
        replies = self._pipelined(
            [
                ("XGROUP", "CREATE", stream, group, str(positions[stream]), "MKSTREAM")
                for stream in streams
            ]
        )
        created = set()
        for stream, reply in zip(streams, replies, strict=True):
            if isinstance(reply, Exception):
                if "BUSYGROUP" in str(reply):
                    continue
                with translate_errors(self.endpoint):
                    raise reply
            created.add(stream)
        return created

    def move_group(
        self,
        positions: Mapping[str, EntryId],
        group: str,
        *,
        previous: Mapping[str, EntryId] | None = None,
        entries_read: Mapping[str, int] | None = None,
    ) -> None:
        """XGROUP SETID on each stream (creating the group where it is missing), pipelined.

        ``previous`` (the positions last mirrored by this process) skips streams whose position
        has not changed since, so an idle stream costs nothing. ``entries_read`` (Redis 7:
        how many entries the stream had received up to the position) is passed as SETID's
        ENTRIESREAD, so Redis can count the group's lag. A stream deleted since the
        query read it is left alone: there is nothing to mirror, and creating the group would
        bring the key back as an empty stream.
        """
        moving = {
            stream: position
            for stream, position in positions.items()
            if previous is None or previous.get(stream) != position
        }
        streams = list(moving)
        replies = self._pipelined(
            [
                ("XGROUP", "SETID", stream, group, str(moving[stream]))
                + (
                    ("ENTRIESREAD", entries_read[stream])
                    if entries_read and stream in entries_read
                    else ()
                )
                for stream in streams
            ]
        )
        missing: dict[str, EntryId] = {}
        for stream, reply in zip(streams, replies, strict=True):
            if not isinstance(reply, Exception):
                continue
            message = str(reply).lower()
            if "requires the key to exist" in message or "no such key" in message:
                continue
            refused = "syntax error" in message or "wrong number of arguments" in message
            if refused and entries_read and stream in entries_read:
                # Redis 6.2 has no ENTRIESREAD (a checkpoint written against Redis 7)
                self.move_group({stream: moving[stream]}, group)
                continue
            if "nogroup" not in message:
                with translate_errors(self.endpoint):
                    raise reply
            missing[stream] = moving[stream]
        if missing:
            self.ensure_groups(missing, group)

    def _pipelined(
        self, commands: Sequence[tuple[Any, ...]], *, raise_errors: bool = False
    ) -> list[Any]:
        """Send ``commands`` in one round trip; the raw replies, in order.

        An error reply is returned as its exception (raised with ``raise_errors``), so one
        stream's error does not hide the others' answers.
        """
        if not commands:
            return []

        def send() -> list[Any]:
            with self._round_trips() as send_all, translate_errors(self.endpoint):
                return send_all(commands, raise_errors=raise_errors)

        return across_failovers(self.endpoint, send)

    @contextmanager
    def _round_trips(self) -> Iterator[Callable[..., list[Any]]]:
        """A function that sends commands in one round trip and returns their raw replies: on
        one borrowed connection, or on a cluster to each key's master (``send_by_node``)."""
        with translate_errors(self.endpoint):
            cluster = is_cluster_client(self._redis)
        if cluster:
            yield partial(send_by_node, self.endpoint)
            return
        with raw_connection(self.endpoint) as connection:
            yield partial(send_all, connection)


@dataclass
class Advance:
    """One stream's walk for ``StreamCatalog.advance_many``: at most ``budget`` entries (all
    if None) of ``(after, upto]``, counted into ``walk``."""

    stream: str
    after: EntryId
    upto: EntryId
    budget: int | None
    walk: Walk


def send_all(
    connection: Any, commands: Sequence[tuple[Any, ...]], *, raise_errors: bool = True
) -> list[Any]:
    """Write every command, then read every reply (raw): one round trip on ``connection``.

    Every reply is read even after an error reply, so the connection stays in step.
    """
    import redis

    connection.send_packed_command(connection.pack_commands(commands))
    replies: list[Any] = []
    for _ in commands:
        try:
            replies.append(connection.read_response())
        except redis.ResponseError as exc:
            replies.append(exc)
    if raise_errors:
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    return replies


def _as_fields(reply: Any) -> dict[str, Any]:
    """A raw reply's flat key/value list (RESP2) or map (RESP3) as a dict with text keys."""
    if isinstance(reply, dict):
        return {reply_text(key): value for key, value in reply.items()}
    return {reply_text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}


_WALK_PAGE = 10_000
"""The most entries one XRANGE of a walk asks for."""
_MIN_PAGE = 16
"""The fewest entries a walk asks for per stream and round, however many streams walk."""
_ROUND_ENTRIES = 20_000
"""About how many entries one round of ``advance_many`` asks for in all."""
_SCAN_COUNT = 10_000
"""SCAN's COUNT hint: a keyspace of up to about this many keys is listed in one round trip."""


def parse_stream_info(reply: Any) -> StreamInfo:
    """Parse a raw XINFO STREAM reply (a flat key/value list under RESP2, a map under RESP3).

    Runs for every stream at every trigger: only the six fields planning uses are looked at.
    """
    raw = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))

    def field(name: bytes) -> Any:
        value = raw.get(name)
        return raw.get(name.decode()) if value is None else value

    first = field(b"first-entry")
    last = field(b"last-entry")
    max_deleted = field(b"max-deleted-entry-id")
    added = field(b"entries-added")
    return StreamInfo(
        length=int(field(b"length") or 0),
        first=EntryId.parse(first[0]) if first else None,
        last=EntryId.parse(last[0]) if last else None,
        last_generated=EntryId.parse(field(b"last-generated-id") or b"0-0"),
        max_deleted=EntryId.parse(max_deleted) if max_deleted is not None else None,
        entries_added=int(added) if added is not None else None,
    )


def last_position(info: StreamInfo | None) -> EntryId:
    """The position of the newest entry ever added: where ``latest`` starts."""
    if info is None:
        return ZERO
    return info.last_generated
