"""``bus_status``: the bus at a glance — streams, consumer groups, dead letters.

Runs where it is called (the ``atlasbus status`` command line, a notebook, a cron job); never on
an executor, and it never starts Spark. What ``atlasbus status`` prints is this module's
``BusStatus`` rendered by ``atlasbus.cli.status_report``.

Cost: a constant number of round trips whatever the number of streams, and no scan of entries.

1. Discovery: with ``topics``, none (the keys are ``{stream_prefix}:{topic}``); else ``SCAN MATCH
   '{prefix}:*' TYPE stream`` (the prefix matched literally, as ``topicPattern`` does), one round
   trip per 1,000 keys of the database.
2. One pipeline: ``INFO server``, then ``XINFO STREAM`` and ``XINFO GROUPS`` of every stream.
   On a Redis Cluster the XINFO commands go to each stream's master (one round trip for all
   masters) and ``INFO server``, which has no key, to every master: ``redis_version`` is the
   lowest of theirs.
3. One pipeline: ``XPENDING key group - + 1`` for every group with pending entries (on a
   cluster, redis-py's cluster pipeline sends each to its stream's master).

Where each figure comes from:

- ``length``, ``first_id``, ``last_id``, ``last_generated_id``: ``XINFO STREAM``; the times are
  the milliseconds part of the IDs (when the entry was added, for IDs Redis made).
- ``entries_added``: ``XINFO STREAM`` ``entries-added`` (Redis 7+; None on 6.x), the number of
  entries ever added, including those since deleted or trimmed.
- group ``consumers``, ``pending``, ``last_delivered``: ``XINFO GROUPS``.
- group ``lag`` (entries not yet delivered to the group): Redis 7's ``lag`` field when it is not
  nil (``lag_source == "redis"``). Otherwise (Redis 6.x, or Redis 7 when entries deleted with
  XDEL leave a gap it cannot count across, which it reports as nil) computed only where the
  answer is certain without reading entries (``lag_source == "computed"``): 0 when the stream
  is empty or the group has been delivered the newest entry; the stream's length when the
  group's last-delivered ID is before the first entry. Anything else is unknown (None):
  counting would mean an XRANGE over the entries.
- group ``oldest_pending_*``: ``XPENDING key group - + 1``: the pending entry with the lowest ID,
  how long since it was last delivered (``idle_ms``) and how many times it was. An entry claimed
  again (``XCLAIM``/``XAUTOCLAIM``) restarts its idle time, so this is the idle time of the
  oldest pending entry, not always the longest idle time in the pending list.
- dead letters: the Delta table read with delta-rs (``DeadLetterTable.to_arrow``, one row per
  ``dead_letter_id``), counted by ``stage`` and ``reason``: all of them, and those whose
  ``dead_lettered_at`` is after ``now - 1 hour``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from os import PathLike, fspath
from typing import TYPE_CHECKING, Any, Final, Literal

from atlasbus.bus.cluster import send_by_node
from atlasbus.bus.connection import RedisEndpoint, is_cluster_client, translate_errors
from atlasbus.bus.stream_catalog import StreamCatalog, StreamInfo, parse_stream_info
from atlasbus.bus.subscription import Subscription
from atlasbus.errors import ConfigurationError
from atlasbus.model.conversions import reply_text
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.options.keys import DEFAULT_STREAM_PREFIX

if TYPE_CHECKING:
    import redis

__all__ = [
    "RECENT_WINDOW",
    "BusStatus",
    "DeadLetterCount",
    "DeadLetterStatus",
    "GroupStatus",
    "StreamStatus",
    "bus_status",
    "dead_letter_counts",
    "group_lag",
    "id_time",
]

RECENT_WINDOW: Final = timedelta(hours=1)
"""Dead letters recorded within this span before ``now`` count as recent ("last hour")."""

LagSource = Literal["redis", "computed"]


def id_time(entry_id: EntryId) -> datetime:
    """The time an entry ID stands for: its milliseconds part, in UTC."""
    return datetime.fromtimestamp(entry_id.ms / 1000, UTC)


@dataclass(frozen=True)
class GroupStatus:
    """One consumer group of a stream (``XINFO GROUPS`` and ``XPENDING``; module docstring)."""

    name: str
    consumers: int
    pending: int
    last_delivered: EntryId
    # Entries not yet delivered to the group; None when it cannot be known without a scan.
    lag: int | None
    lag_source: LagSource | None
    # The pending entry with the lowest ID; all three None when nothing is pending.
    oldest_pending_id: EntryId | None = None
    oldest_pending_idle_ms: int | None = None
    oldest_pending_deliveries: int | None = None


@dataclass(frozen=True)
class StreamStatus:
    """One stream (``XINFO STREAM``) and its consumer groups, sorted by name."""

    stream: str
    topic: str
    length: int
    first_id: EntryId | None
    last_id: EntryId | None
    last_generated_id: EntryId
    entries_added: int | None
    groups: tuple[GroupStatus, ...]

    @property
    def first_time(self) -> datetime | None:
        return None if self.first_id is None else id_time(self.first_id)

    @property
    def last_time(self) -> datetime | None:
        return None if self.last_id is None else id_time(self.last_id)


@dataclass(frozen=True)
class DeadLetterCount:
    """Dead letters of one stage and reason: recorded after ``since``, and in all."""

    stage: str
    reason: str
    last_hour: int
    total: int


@dataclass(frozen=True)
class DeadLetterStatus:
    """The dead-letter table's counts, sorted by stage then reason."""

    table: str
    since: datetime
    counts: tuple[DeadLetterCount, ...]

    @property
    def last_hour(self) -> int:
        return sum(c.last_hour for c in self.counts)

    @property
    def total(self) -> int:
        return sum(c.total for c in self.counts)


@dataclass(frozen=True)
class BusStatus:
    """Everything ``atlasbus status`` shows, as of ``at``.

    ``topics`` are the topics asked for (None: every stream under the prefix); ``missing``
    the stream keys of named topics that do not exist; ``dead_letters`` is None when no table
    was given.
    """

    at: datetime
    server: str
    redis_version: str
    stream_prefix: str
    topics: tuple[str, ...] | None
    streams: tuple[StreamStatus, ...]
    missing: tuple[str, ...]
    dead_letters: DeadLetterStatus | None

    @property
    def redis_major(self) -> int:
        head = self.redis_version.split(".")[0]
        return int(head) if head.isdigit() else 0


def bus_status(
    endpoint: RedisEndpoint,
    *,
    stream_prefix: str = DEFAULT_STREAM_PREFIX,
    topics: Sequence[str] | None = None,
    dead_letter_table: str | PathLike[str] | None = None,
    now: datetime | None = None,
) -> BusStatus:
    """The status of the streams under ``stream_prefix`` (or of ``topics``), and of the table.

    ``now`` (default: the clock) stamps the result and ends the dead letters' last-hour window.
    Raises ``RedisUnavailableError`` when Redis cannot be reached, ``ConfigurationError`` when a
    named topic's key is not a stream, ``DeadLetterTableError`` when the table is missing.
    """
    at = now or datetime.now(UTC)
    if at.tzinfo is None:
        raise ValueError("bus_status: now must be timezone-aware (e.g. datetime.now(UTC))")
    if topics is not None:
        topics = tuple(dict.fromkeys(topics))  # in the order given, each once
        subscription = Subscription("topics", topics, stream_prefix)
    else:
        subscription = Subscription("pattern", ("*",), stream_prefix)
    streams = StreamCatalog(endpoint).discover(subscription)

    client = endpoint.client()
    version, infos, groups = _read_streams(endpoint, client, streams, named=topics is not None)
    oldest = _read_oldest_pending(endpoint, client, groups)

    present: list[StreamStatus] = []
    for stream in streams:
        info = infos.get(stream)
        if info is None:
            continue
        present.append(
            StreamStatus(
                stream=stream,
                topic=subscription.topic_of(stream),
                length=info.length,
                first_id=info.first,
                last_id=info.last,
                last_generated_id=info.last_generated,
                entries_added=info.entries_added,
                groups=tuple(
                    _group_status(fields, info, oldest.get((stream, reply_text(fields["name"]))))
                    for fields in groups[stream]
                ),
            )
        )
    missing = tuple(s for s in streams if infos.get(s) is None) if topics is not None else ()

    letters = None
    if dead_letter_table is not None:
        letters = dead_letter_counts(fspath(dead_letter_table), since=at - RECENT_WINDOW)
    return BusStatus(
        at=at,
        server=endpoint.description,
        redis_version=version,
        stream_prefix=stream_prefix,
        topics=None if topics is None else tuple(topics),
        streams=tuple(present),
        missing=missing,
        dead_letters=letters,
    )


# --- Redis ---------------------------------------------------------------------------------------

_Fields = dict[str, Any]


def _read_streams(
    endpoint: RedisEndpoint, client: redis.Redis, streams: Sequence[str], *, named: bool
) -> tuple[str, dict[str, StreamInfo | None], dict[str, list[_Fields]]]:
    """One round trip: the server's version, XINFO STREAM and XINFO GROUPS of every stream.

    A stream that is gone (deleted since SCAN found it, or a named topic never written) maps
    to None. A named key that is not a stream is an error; SCAN's TYPE filter keeps others out.
    """
    commands = [("XINFO", kind, s) for s in streams for kind in ("STREAM", "GROUPS")]
    with translate_errors(endpoint):
        if is_cluster_client(client):
            version = _lowest_version(client)
            replies = [None, *send_by_node(endpoint, commands, raise_errors=False)]
        else:
            pipe = client.pipeline(transaction=False)
            _command(pipe, "INFO", "server")
            for command in commands:
                _command(pipe, *command)
            replies = pipe.execute(raise_on_error=False)
            version = _redis_version(replies[0])
    infos: dict[str, StreamInfo | None] = {}
    groups: dict[str, list[_Fields]] = {}
    for index, stream in enumerate(streams):
        info_reply, groups_reply = replies[1 + 2 * index], replies[2 + 2 * index]
        for reply in (info_reply, groups_reply):
            if isinstance(reply, Exception):
                _check_reply(endpoint, stream, reply, named=named)
        if isinstance(info_reply, Exception) or isinstance(groups_reply, Exception):
            infos[stream] = None  # gone (no such key)
            continue
        infos[stream] = parse_stream_info(info_reply)
        found = [_fields(g) for g in groups_reply]
        groups[stream] = sorted(found, key=lambda g: reply_text(g["name"]))
    return version, infos, groups


def _lowest_version(client: Any) -> str:
    """On a cluster: ``INFO server`` of every master, and the lowest version among them (a
    cluster mid-upgrade can do what its oldest master can). INFO has no key to route by."""
    import redis
    from redis.cluster import RedisCluster

    try:
        infos = client.info("server", target_nodes=RedisCluster.PRIMARIES)
    except redis.exceptions.NoPermissionError:
        return "unknown"  # INFO refused by an ACL: the version is only a label
    versions = {_redis_version(info) for info in infos.values()} - {"unknown"}
    if not versions:
        return "unknown"
    return min(versions, key=lambda v: tuple(int(p) if p.isdigit() else 0 for p in v.split(".")))


def _command(client: Any, *args: Any) -> Any:
    """A raw command queued on a pipeline; redis-py leaves ``execute_command`` untyped."""
    return client.execute_command(*args)


def _check_reply(endpoint: RedisEndpoint, stream: str, reply: Exception, *, named: bool) -> None:
    """Raise for any error but a missing key (which only means the stream is gone)."""
    text = str(reply)
    if "no such key" in text.lower():
        return
    if text.startswith("WRONGTYPE"):
        raise ConfigurationError(
            f"key {stream!r} on Redis at {endpoint.description} is not a stream: check the "
            "topics and the stream prefix (a topic names the stream '{stream_prefix}:{topic}')"
        )
    with translate_errors(endpoint):
        raise reply


def _redis_version(reply: Any) -> str:
    if isinstance(reply, Mapping):
        return reply_text(reply.get("redis_version", reply.get(b"redis_version", "")))
    if isinstance(reply, Exception):  # INFO refused by an ACL: the version is only a label
        return "unknown"
    for line in reply_text(reply).splitlines():
        if line.startswith("redis_version:"):
            return line.partition(":")[2].strip()
    return "unknown"


def _fields(reply: Any) -> _Fields:
    """A reply that is a map (redis-py's parsing, RESP3) or a flat key/value list (RESP2)."""
    if isinstance(reply, Mapping):
        return {reply_text(key): value for key, value in reply.items()}
    return {reply_text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}


_Oldest = tuple[EntryId, int, int]  # ID, idle ms, deliveries


def _read_oldest_pending(
    endpoint: RedisEndpoint, client: redis.Redis, groups: Mapping[str, list[_Fields]]
) -> dict[tuple[str, str], _Oldest]:
    """One round trip: ``XPENDING key group - + 1`` for each group with pending entries."""
    asked = [
        (stream, reply_text(g["name"]))
        for stream, found in groups.items()
        for g in found
        if int(g.get("pending") or 0) > 0
    ]
    if not asked:
        return {}
    with translate_errors(endpoint):
        pipe = client.pipeline(transaction=False)
        for stream, group in asked:
            pipe.xpending_range(stream, group, min="-", max="+", count=1)
        replies = pipe.execute(raise_on_error=False)
    oldest: dict[tuple[str, str], _Oldest] = {}
    for key, reply in zip(asked, replies, strict=True):
        if isinstance(reply, Exception):
            text = str(reply)
            if "no such key" in text.lower() or text.startswith("NOGROUP"):
                continue  # stream or group deleted since XINFO: nothing pending to report
            with translate_errors(endpoint):
                raise reply
        if reply:  # acknowledged since XINFO: empty
            first = reply[0]
            oldest[key] = (
                EntryId.parse(first["message_id"]),
                int(first["time_since_delivered"]),
                int(first["times_delivered"]),
            )
    return oldest


def _group_status(fields: _Fields, info: StreamInfo, oldest: _Oldest | None) -> GroupStatus:
    last_delivered = EntryId.parse(fields.get("last-delivered-id") or str(ZERO))
    lag, source = group_lag(fields.get("lag"), last_delivered, info)
    return GroupStatus(
        name=reply_text(fields["name"]),
        consumers=int(fields.get("consumers") or 0),
        pending=int(fields.get("pending") or 0),
        last_delivered=last_delivered,
        lag=lag,
        lag_source=source,
        oldest_pending_id=oldest[0] if oldest else None,
        oldest_pending_idle_ms=oldest[1] if oldest else None,
        oldest_pending_deliveries=oldest[2] if oldest else None,
    )


def group_lag(
    reported: object, last_delivered: EntryId, info: StreamInfo
) -> tuple[int | None, LagSource | None]:
    """A group's lag: Redis's own figure, else what is certain without reading entries."""
    if isinstance(reported, int | str | bytes):
        return int(reported), "redis"
    if info.length == 0 or info.last is None or last_delivered >= info.last:
        return 0, "computed"
    if info.first is not None and last_delivered < info.first:
        return info.length, "computed"
    return None, None


# --- dead letters --------------------------------------------------------------------------------


def dead_letter_counts(table: str, *, since: datetime) -> DeadLetterStatus:
    """Dead letters by stage and reason: all, and those recorded after ``since``.

    Reads three columns of the table with delta-rs; imported here so that a status without
    ``dead_letter_table`` does not load delta-rs.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from atlasbus.dead_letters import DeadLetterTable

    data = DeadLetterTable(table).to_arrow().select(["stage", "reason", "dead_lettered_at"])
    cutoff = pa.scalar(since, data.schema.field("dead_lettered_at").type)
    recent = pc.greater(data.column("dead_lettered_at"), cutoff)
    data = data.append_column("recent", pc.cast(pc.fill_null(recent, False), pa.int64()))
    grouped = data.group_by(["stage", "reason"]).aggregate([("recent", "sum"), ("recent", "count")])
    counts = sorted(
        (
            DeadLetterCount(
                stage=str(row["stage"]),
                reason=str(row["reason"]),
                last_hour=int(row["recent_sum"] or 0),
                total=int(row["recent_count"]),
            )
            for row in grouped.to_pylist()
        ),
        key=lambda c: (c.stage, c.reason),
    )
    return DeadLetterStatus(table=table, since=since, counts=tuple(counts))
