"""The retry-exhausted reaper: a group's entries delivered too often become dead letters, once.

A consumer group keeps every entry it delivered and nobody acknowledged in its pending entries
list (PEL), with the consumer holding it, the time since its last delivery (idle) and how many
times it was delivered. An entry a handler keeps failing stays there forever, redelivered
(XCLAIM/XAUTOCLAIM) again and again; the bus's own consumer drops such a message after its
retries. The reaper does what neither does: an entry of group ``policy.group`` pending at least
``policy.min_idle_ms`` and delivered ``policy.max_deliveries`` times or more is written to the
dead-letter table (stage ``retry-exhausted``, reason ``max-deliveries``, the raw entry in
``fields`` so replay can publish it again), then acknowledged (XACK), and deleted (XDEL) only
with ``policy.delete``. Entries pending but not yet exhausted (fewer deliveries, or idle for
less) are not touched: their owner, delivery count and idle time stay as they were.

Runs where it is called: ``atlasbus dlq sweep`` (the command line), or the source's driver once
per trigger (``sweep*`` options). Spark-free. Needs Redis 6.2 or later (XPENDING ``IDLE``).

**Steps.** One sweep is rounds of four steps, each a function here, so a test can stop between
any two (``tests/reaper_child.py`` kills itself there):

1. ``find_exhausted``: per stream, one page of ``XPENDING key group IDLE min_idle (after + n``
   (the server filters by idle time; the page is the next ``n`` idle entries after the
   cursor), keeping those delivered ``max_deliveries`` times or more; plus one page of
   ``XPENDING key group (after + n atlasbus-reaper``: entries an earlier, interrupted sweep
   claimed (all of them are taken, whatever their counts). Then ``XRANGE key id id`` for each
   entry found, which reads its fields, or finds it deleted from the stream. All streams'
   pages go in one round trip, and all their XRANGEs in the next.
2. ``record_dead_letters``: one append to the dead-letter table. The ID of a retry-exhausted
   letter is ``sha256(stage, stream, entry_id)`` (dead_letters/record.py), so an entry is the
   same row whichever sweep writes it; IDs already in the table are left out of the append
   (one query of the table for exactly those IDs), so a re-run adds no second row.
3. ``claim_exhausted``: ``XCLAIM key group atlasbus-reaper min_idle id... JUSTID`` per stream.
   The ``min_idle`` argument makes a consumer that took an entry back since step 1 win: the
   claim skips it and it stays that consumer's (``taken_back``). ``JUSTID`` leaves the delivery
   count as it was (the reaper is not a delivery), and the idle time restarts at 0, so while the
   reaper holds an entry, a consumer's own reclaim loop (XAUTOCLAIM with a min idle) leaves it
   alone. Entries deleted from the stream are not claimed (see below).
4. ``acknowledge``: per stream, ``MULTI; XACK key group id...; [XDEL key id...]; EXEC`` over the
   entries the reaper now holds and those found deleted: acknowledged and deleted together, or
   neither.

**Exactly once.** Nothing leaves a PEL before its dead letter is durable in the table: step 2
commits before steps 3 and 4 run, and an acknowledgement is the only way the reaper removes an
entry. Killed before step 2 commits: nothing changed, the next sweep starts afresh. Killed
after step 2 (before or after step 3, before step 4 ends): the entries are still pending,
either with their consumer (exhausted and idle, as before: found again by step 1) or with
``atlasbus-reaper`` (found by step 1's second listing, whatever their idle time); the re-run
finds their IDs in the table, writes nothing, and acknowledges them. A crash can thus leave an
entry held by ``atlasbus-reaper`` until the next sweep, never acknowledged without its letter,
and never lets a second sweep add a second row (two sweeps racing on the same new entry can
both append it under different commits; reads show one row per ``dead_letter_id``, as for
every dead letter, dead_letters/table.py).

**Why not XAUTOCLAIM.** ``XAUTOCLAIM key group consumer min_idle start`` claims every entry idle
for ``min_idle``, whatever its delivery count, and increments the count and resets the idle
time of each: used blindly it would take (and change) entries not yet exhausted. It cannot
filter on the count, so the count test would come after the harm. The extended XPENDING
filters on idle time on the server, reports counts without changing anything, and XCLAIM then
takes exactly the chosen IDs.

**Why record before claiming.** On Redis 7, XCLAIM (and XAUTOCLAIM) of an entry that was
deleted from the stream while pending silently drops it from the PEL, even when the claim's
min idle is not met (measured on 7.0.15; 6.2 replies nil and moves it to the claimer). Were
the letter written after the claim, an entry deleted between step 1 and the claim would leave
the PEL with no trace if the reaper died then. Recorded first, it is already a dead letter
(with its content, read in step 1), and the sweep reports it as ``gone``. Entries step 1 finds
deleted are recorded with reason
``entry-deleted`` (no content: only their ID and pending facts) and acknowledged without a
claim. The price of this order: an exhausted entry a consumer takes back between steps 1 and
3 is recorded although that consumer may yet process it; it is reported as ``taken_back``,
stays pending with that consumer, and if it is exhausted again later, the next sweep finds its
row already written and only acknowledges it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any, Final

import pyarrow as pa
from deltalake import QueryBuilder

from atlasbus.bus.cluster import send_by_node, send_groups_by_node
from atlasbus.bus.connection import RedisEndpoint, raw_connection, translate_errors
from atlasbus.bus.stream_catalog import send_all
from atlasbus.dead_letters.record import DeadLetter, QueryContext, dead_letter_id
from atlasbus.dead_letters.schema import RETRY_EXHAUSTED
from atlasbus.dead_letters.table import DeadLetterTable
from atlasbus.errors import AtlasbusError, ConfigurationError
from atlasbus.model.conversions import reply_text
from atlasbus.model.entry_id import EntryId
from atlasbus.option_names import named
from atlasbus.options.source import SweepPolicy
from atlasbus.wire.raw_text import raw_text

__all__ = [
    "DEFAULT_SWEEP_PAGE_SIZE",
    "REAPER_CONSUMER",
    "Acknowledged",
    "Claimed",
    "Cursor",
    "ExhaustedEntry",
    "Found",
    "Recorded",
    "StreamSweep",
    "SweepResult",
    "acknowledge",
    "claim_exhausted",
    "find_exhausted",
    "record_dead_letters",
    "start_cursors",
    "sweep_retry_exhausted",
]

REAPER_CONSUMER: Final = "atlasbus-reaper"
"""The consumer that holds entries between their claim and their acknowledgement."""

DEFAULT_SWEEP_PAGE_SIZE: Final = 1_000
"""Pending entries listed per stream per round (one XPENDING page)."""

_START: Final = "-"


# --- what each step returns ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExhaustedEntry:
    """A pending entry the policy gives up on, as step 1 saw it.

    ``fields`` is the raw entry (``raw_fields.raw_text`` of each name and value), ``None`` when
    the entry was deleted from the stream while pending. ``consumer`` is who held it;
    ``atlasbus-reaper`` means an earlier sweep claimed it and was interrupted.
    """

    stream: str
    entry_id: str
    consumer: str
    idle_ms: int
    deliveries: int
    fields: Mapping[str, str] | None

    @property
    def claimed_before(self) -> bool:
        return self.consumer == REAPER_CONSUMER

    @property
    def missing(self) -> bool:
        """Deleted from the stream (XDEL or trim) while pending: only the ID is known."""
        return self.fields is None


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where step 1 goes on in one stream's PEL: after an ID (``(id``), from the start (``-``),
    or ``None`` when that listing is done."""

    stream: str
    idle_after: str | None = _START
    reaper_after: str | None = _START

    @property
    def done(self) -> bool:
        return self.idle_after is None and self.reaper_after is None


def start_cursors(streams: Iterable[str]) -> tuple[Cursor, ...]:
    """Cursors at the start of each stream's PEL (each stream once, in the order given)."""
    return tuple(Cursor(stream) for stream in dict.fromkeys(streams))


@dataclass(frozen=True)
class Found:
    """Step 1's result: the exhausted entries of this round, in stream then ID order."""

    entries: tuple[ExhaustedEntry, ...]
    listed: Mapping[str, int]
    """Pending entries looked at per stream (idle ones, and the reaper's)."""
    without_group: tuple[str, ...]
    """Streams where the group does not exist (or the stream does not)."""
    next: tuple[Cursor, ...]
    """Cursors for the next round; empty when every stream's PEL was listed to its end."""


@dataclass(frozen=True)
class Recorded:
    """Step 2's result: dead-letter IDs written now and found already in the table."""

    written: tuple[str, ...]
    already: tuple[str, ...]


@dataclass(frozen=True)
class Claimed:
    """Step 3's result per stream: IDs the reaper holds now, those a consumer took back (still
    pending with it), and those that left the PEL meanwhile (acknowledged by their consumer, or
    deleted from the stream: Redis 7's XCLAIM then drops them from the PEL)."""

    held: Mapping[str, tuple[str, ...]]
    taken_back: Mapping[str, tuple[str, ...]]
    gone: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Acknowledged:
    """Step 4's result per stream: entries acknowledged and entries deleted (XDEL)."""

    acked: Mapping[str, int]
    deleted: Mapping[str, int]


@dataclass(frozen=True)
class StreamSweep:
    """What one sweep did on one stream."""

    stream: str
    exhausted: int = 0
    """Entries found past the policy (including ``missing`` and those an interrupted sweep
    had claimed)."""
    missing: int = 0
    """Of ``exhausted``, entries deleted from the stream while pending (recorded without
    content, reason ``entry-deleted``)."""
    dead_lettered: int = 0
    """Dead letters written by this sweep."""
    already_recorded: int = 0
    """Exhausted entries whose dead letter was in the table already (an interrupted sweep)."""
    taken_back: int = 0
    """Exhausted entries a consumer took back before the claim: recorded, not acknowledged."""
    gone: int = 0
    """Exhausted entries that left the PEL between steps 1 and 3 (acknowledged by their
    consumer, or deleted from the stream): recorded, nothing to acknowledge."""
    acked: int = 0
    deleted: int = 0
    pending: int = 0
    """Entries pending in the group when the sweep ended: those not exhausted, those taken
    back, and any delivered meanwhile."""

    def plus(self, other: StreamSweep) -> StreamSweep:
        counts = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in _COUNTS}
        return replace(self, **counts)


_COUNTS = tuple(f for f in fields(StreamSweep) if f.name != "stream")


@dataclass(frozen=True)
class SweepResult:
    """A sweep of ``policy.group``: per stream where the group exists, what was done."""

    policy: SweepPolicy
    streams: tuple[StreamSweep, ...]
    without_group: tuple[str, ...] = ()
    dry_run: bool = False
    dead_letter_ids: tuple[str, ...] = field(default=(), repr=False)
    """IDs of every dead letter this sweep wrote or found already written."""

    @property
    def total(self) -> StreamSweep:
        """The streams' counts summed (``stream`` is ``"*"``)."""
        total = StreamSweep("*")
        for stream in self.streams:
            total = total.plus(stream)
        return total


# --- the sweep -----------------------------------------------------------------------------------


def sweep_retry_exhausted(
    endpoint: RedisEndpoint,
    streams: Sequence[str],
    policy: SweepPolicy,
    dead_letter_table: str | DeadLetterTable,
    *,
    topic_of: Callable[[str], str],
    query: QueryContext | None = None,
    page_size: int = DEFAULT_SWEEP_PAGE_SIZE,
    dry_run: bool = False,
    require_group: bool = True,
    delete_below: Mapping[str, EntryId] | None = None,
) -> SweepResult:
    """Dead-letter, then acknowledge, ``policy.group``'s retry-exhausted entries on ``streams``.

    ``topic_of`` names a stream's topic for the ``topic`` column (the subscription's
    ``topic_of``); ``query`` fills the letters' query columns (its ID, name and batch ID)
    where the caller knows them. Streams where the group does not exist are
    skipped and listed in ``without_group``; with ``require_group`` (the default) a group that
    exists on none of ``streams`` is a ``ConfigurationError``, as it is almost always a typo.
    ``dry_run`` finds and counts, and changes nothing. ``delete_below`` (a streaming query's
    committed positions) limits ``policy.delete`` to entries below the position on each
    stream, so the query never finds an entry it has yet to read deleted under it. Rounds of
    ``page_size`` pending entries per stream go on until every stream's PEL was listed to its
    end (see the module docstring for the steps and why a crash at any point loses and
    duplicates nothing).
    """
    if page_size <= 0:
        raise ValueError(f"page_size must be a positive integer, got {page_size}")
    table = (
        dead_letter_table
        if isinstance(dead_letter_table, DeadLetterTable)
        else DeadLetterTable(dead_letter_table)
    )
    cursors = start_cursors(streams)
    sums = {cursor.stream: StreamSweep(cursor.stream) for cursor in cursors}
    without: dict[str, None] = {}  # in the order found; a group deleted mid-sweep joins later
    letter_ids: list[str] = []
    first = True
    while cursors:
        found = find_exhausted(endpoint, policy, cursors, page_size=page_size)
        without.update(dict.fromkeys(found.without_group))
        if first and require_group and sums and len(without) == len(sums):
            swept = list(sums)
            exists = _pipeline(endpoint, [("EXISTS", stream) for stream in swept])
            absent = [stream for stream, found in zip(swept, exists, strict=True) if not found]
            raise ConfigurationError(_no_group(policy.group, swept, absent))
        first = False
        done = _tally_found(found)
        if found.entries and not dry_run:
            recorded = record_dead_letters(found, table, policy, topic_of=topic_of, query=query)
            claimed = claim_exhausted(endpoint, found, policy)
            acknowledged = acknowledge(endpoint, found, claimed, policy, delete_below=delete_below)
            done = _tally_done(done, found, recorded, claimed, acknowledged)
            letter_ids.extend(recorded.written + recorded.already)
        for stream, counts in done.items():
            sums[stream] = sums[stream].plus(counts)
        cursors = found.next
    present = [stream for stream in sums if stream not in without]
    for stream, count in _pending_counts(endpoint, present, policy.group).items():
        sums[stream] = replace(sums[stream], pending=count)
    return SweepResult(
        policy,
        tuple(sums[stream] for stream in present),
        tuple(without),
        dry_run,
        tuple(letter_ids),
    )


def _tally_found(found: Found) -> dict[str, StreamSweep]:
    done: dict[str, StreamSweep] = {}
    for entry in found.entries:
        counts = done.get(entry.stream, StreamSweep(entry.stream))
        done[entry.stream] = replace(
            counts, exhausted=counts.exhausted + 1, missing=counts.missing + entry.missing
        )
    return done


def _tally_done(
    done: dict[str, StreamSweep],
    found: Found,
    recorded: Recorded,
    claimed: Claimed,
    acknowledged: Acknowledged,
) -> dict[str, StreamSweep]:
    written = set(recorded.written)
    for entry in found.entries:
        counts = done[entry.stream]
        new = _letter_id(entry) in written
        done[entry.stream] = replace(
            counts,
            dead_lettered=counts.dead_lettered + new,
            already_recorded=counts.already_recorded + (not new),
        )
    for stream, counts in done.items():
        done[stream] = replace(
            counts,
            taken_back=len(claimed.taken_back.get(stream, ())),
            gone=len(claimed.gone.get(stream, ())),
            acked=acknowledged.acked.get(stream, 0),
            deleted=acknowledged.deleted.get(stream, 0),
        )
    return done


def _no_group(group: str, streams: Sequence[str], absent: Sequence[str]) -> str:
    """Redis answers NOGROUP for a stream that does not exist too: say which it was."""
    if len(absent) == len(streams):
        return (
            f"none of the streams swept exists ({', '.join(streams)}): check "
            f"{named('swept streams')}"
        )
    present = [stream for stream in streams if stream not in absent]
    missing = f"; these streams do not exist: {', '.join(absent)}" if absent else ""
    return (
        f"{named('sweep group')}: consumer group {group!r} does not exist on any of the "
        f"streams swept ({', '.join(present)}){missing}. Check the group name (XINFO GROUPS "
        f"<stream> lists a stream's groups) and {named('streams')}"
    )


# --- step 1: find --------------------------------------------------------------------------------


def find_exhausted(
    endpoint: RedisEndpoint,
    policy: SweepPolicy,
    cursors: Sequence[Cursor],
    *,
    page_size: int = DEFAULT_SWEEP_PAGE_SIZE,
) -> Found:
    """Step 1: the next page of each stream's PEL, its exhausted entries and their fields.

    Two round trips whatever the number of streams: the XPENDING pages, then one
    ``XRANGE key id id`` per exhausted entry. Changes nothing in Redis.
    """
    group = policy.group
    commands: list[tuple[Any, ...]] = []
    asked: list[tuple[Cursor, str]] = []  # (cursor, "idle" | "reaper") per command
    for cursor in cursors:
        if cursor.idle_after is not None:
            filter_idle = ("IDLE", policy.min_idle_ms)
            commands.append(
                ("XPENDING", cursor.stream, group, *filter_idle, cursor.idle_after, "+", page_size)
            )
            asked.append((cursor, "idle"))
        if cursor.reaper_after is not None:
            page = (cursor.reaper_after, "+", page_size)
            commands.append(("XPENDING", cursor.stream, group, *page, REAPER_CONSUMER))
            asked.append((cursor, "reaper"))
    replies = _pipeline(endpoint, commands)

    without: dict[str, None] = {}
    listed: dict[str, int] = {}
    chosen: dict[tuple[str, str], tuple[str, int, int]] = {}  # (stream, id) -> pending facts
    moved: dict[str, Cursor] = {cursor.stream: cursor for cursor in cursors}
    for (cursor, listing), reply in zip(asked, replies, strict=True):
        stream = cursor.stream
        if isinstance(reply, Exception):
            if str(reply).startswith("NOGROUP"):
                without[stream] = None
                moved[stream] = Cursor(stream, None, None)
                continue
            _raise_reply(endpoint, reply, stream)
        rows = list(reply)
        listed[stream] = listed.get(stream, 0) + len(rows)
        for row in rows:
            entry_id, consumer = reply_text(row[0]), reply_text(row[1])
            idle, deliveries = int(row[2]), int(row[3])
            if (
                listing == "reaper"
                or deliveries >= policy.max_deliveries
                or consumer == REAPER_CONSUMER
            ):
                chosen[(stream, entry_id)] = (consumer, idle, deliveries)
        after = f"({reply_text(rows[-1][0])}" if len(rows) == page_size else None
        current = moved[stream]
        moved[stream] = (
            replace(current, idle_after=after)
            if listing == "idle"
            else replace(current, reaper_after=after)
        )

    keys_in_order = sorted(chosen, key=lambda key: (key[0], _id_order(key[1])))
    contents = _pipeline(endpoint, [("XRANGE", s, i, i) for s, i in keys_in_order])
    entries = []
    for (stream, entry_id), content in zip(keys_in_order, contents, strict=True):
        if isinstance(content, Exception):
            _raise_reply(endpoint, content, stream)
        consumer, idle, deliveries = chosen[(stream, entry_id)]
        entries.append(
            ExhaustedEntry(
                stream,
                entry_id,
                consumer,
                idle,
                deliveries,
                _raw_fields(content[0][1]) if content else None,
            )
        )
    return Found(
        tuple(entries),
        listed,
        tuple(without),
        tuple(c for c in moved.values() if not c.done),
    )


def _id_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _raw_fields(flat: Sequence[bytes]) -> dict[str, str]:
    """The entry's field list as raw text (a name given twice keeps its last value)."""
    return {raw_text(flat[i]): raw_text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}


# --- step 2: record ------------------------------------------------------------------------------


def record_dead_letters(
    found: Found,
    table: DeadLetterTable,
    policy: SweepPolicy,
    *,
    topic_of: Callable[[str], str],
    query: QueryContext | None = None,
    at: datetime | None = None,
) -> Recorded:
    """Step 2: one append of the entries' dead letters, leaving out IDs already in the table.

    Returns when the commit is durable (or there was nothing new to write).
    """
    context = query or QueryContext()
    letters = [
        DeadLetter.for_retry_exhausted(
            stream=entry.stream,
            entry_id=entry.entry_id,
            group=policy.group,
            consumer=entry.consumer,
            deliveries=entry.deliveries,
            idle_ms=entry.idle_ms,
            fields=entry.fields,
            topic=topic_of(entry.stream),
            context=context,
            at=at,
        )
        for entry in found.entries
    ]
    already = _recorded_ids(table, [letter.dead_letter_id for letter in letters])
    new = [letter for letter in letters if letter.dead_letter_id not in already]
    table.append(new)
    return Recorded(
        tuple(letter.dead_letter_id for letter in new),
        tuple(letter.dead_letter_id for letter in letters if letter.dead_letter_id in already),
    )


def _letter_id(entry: ExhaustedEntry) -> str:
    return dead_letter_id(RETRY_EXHAUSTED, entry.stream, entry.entry_id)


def _recorded_ids(table: DeadLetterTable, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` the table holds: one query for exactly those IDs, none if no table."""
    if not ids or not table.exists():
        return set()
    listed = ", ".join(f"'{ident}'" for ident in ids)  # SHA-256 hex: nothing to escape
    sql = (
        "SELECT DISTINCT dead_letter_id FROM dead_letters "
        f"WHERE stage = '{RETRY_EXHAUSTED}' AND dead_letter_id IN ({listed})"
    )
    reader = QueryBuilder().register("dead_letters", table.open()).execute(sql)
    return {str(v) for v in pa.table(reader.read_all()).column("dead_letter_id").to_pylist()}


# --- step 3: claim -------------------------------------------------------------------------------


def claim_exhausted(endpoint: RedisEndpoint, found: Found, policy: SweepPolicy) -> Claimed:
    """Step 3: XCLAIM ... JUSTID, per stream, the entries still in their stream and not held
    by the reaper yet; one round trip. Entries held already count as held."""
    wanted: dict[str, list[str]] = {}
    held: dict[str, list[str]] = {}
    for entry in found.entries:
        if entry.claimed_before and not entry.missing:
            held.setdefault(entry.stream, []).append(entry.entry_id)
        elif not entry.missing:
            wanted.setdefault(entry.stream, []).append(entry.entry_id)
    replies = _pipeline(
        endpoint,
        [
            ("XCLAIM", stream, policy.group, REAPER_CONSUMER, policy.min_idle_ms, *ids, "JUSTID")
            for stream, ids in wanted.items()
        ],
    )
    missed: list[tuple[str, str]] = []  # (stream, id) asked for and not claimed
    for stream, reply in zip(wanted, replies, strict=True):
        if isinstance(reply, Exception):
            if str(reply).startswith("NOGROUP"):  # the group was deleted meanwhile
                missed.extend((stream, ident) for ident in wanted[stream])
                continue
            _raise_reply(endpoint, reply, stream)
        got = {reply_text(ident) for ident in reply}
        held.setdefault(stream, []).extend(i for i in wanted[stream] if i in got)
        missed.extend((stream, i) for i in wanted[stream] if i not in got)
    taken_back: dict[str, list[str]] = {}
    gone: dict[str, list[str]] = {}
    # Rare, so asked only then: is each one still pending (a consumer's), or gone from the PEL?
    states = _pipeline(endpoint, [("XPENDING", s, policy.group, i, i, 1) for s, i in missed])
    for (stream, ident), state in zip(missed, states, strict=True):
        if isinstance(state, Exception) and not str(state).startswith("NOGROUP"):
            _raise_reply(endpoint, state, stream)
        still = not isinstance(state, Exception) and len(state) > 0
        (taken_back if still else gone).setdefault(stream, []).append(ident)
    return Claimed(_tuples(held), _tuples(taken_back), _tuples(gone))


def _tuples(lists: Mapping[str, list[str]]) -> dict[str, tuple[str, ...]]:
    return {key: tuple(values) for key, values in lists.items()}


# --- step 4: acknowledge -------------------------------------------------------------------------


def acknowledge(
    endpoint: RedisEndpoint,
    found: Found,
    claimed: Claimed,
    policy: SweepPolicy,
    *,
    delete_below: Mapping[str, EntryId] | None = None,
) -> Acknowledged:
    """Step 4: per stream, XACK (and XDEL with ``policy.delete``) in one MULTI/EXEC, over the
    entries the reaper holds and those found deleted from the stream; one round trip.

    With ``delete_below``, only entries below the stream's bound are deleted (none on a stream
    without one); the others are only acknowledged.
    """
    ids: dict[str, list[str]] = {s: list(held) for s, held in claimed.held.items()}
    for entry in found.entries:
        if entry.missing:
            ids.setdefault(entry.stream, []).append(entry.entry_id)
    streams = [stream for stream, chosen in ids.items() if chosen]
    doomed: dict[str, list[str]] = {}
    for stream in streams:
        if not policy.delete:
            doomed[stream] = []
        elif delete_below is None:
            doomed[stream] = ids[stream]
        else:
            bound = delete_below.get(stream)
            doomed[stream] = [
                i for i in ids[stream] if bound is not None and EntryId.parse(i) < bound
            ]
    commands: list[tuple[Any, ...]] = []
    for stream in streams:
        commands.append(("MULTI",))
        commands.append(("XACK", stream, policy.group, *ids[stream]))
        if doomed[stream]:
            commands.append(("XDEL", stream, *doomed[stream]))
        commands.append(("EXEC",))
    replies = iter(_transactions(endpoint, streams, commands))
    acked: dict[str, int] = {}
    deleted: dict[str, int] = {}
    for stream in streams:
        queued = [next(replies) for _ in range(3 if doomed[stream] else 2)]
        results = next(replies)
        for reply in queued:  # a command refused when queued (NOPERM) comes first
            if isinstance(reply, Exception):
                _raise_reply(endpoint, reply, stream)
        if isinstance(results, Exception):
            _raise_reply(endpoint, results, stream)
        for reply in results:
            if isinstance(reply, Exception):
                _raise_reply(endpoint, reply, stream)
        acked[stream] = int(results[0])
        deleted[stream] = int(results[1]) if doomed[stream] else 0
    return Acknowledged(acked, deleted)


# --- Redis plumbing ------------------------------------------------------------------------------


def _pending_counts(endpoint: RedisEndpoint, streams: Sequence[str], group: str) -> dict[str, int]:
    """The group's pending count per stream (XPENDING summary form), one round trip."""
    replies = _pipeline(endpoint, [("XPENDING", stream, group) for stream in streams])
    counts: dict[str, int] = {}
    for stream, reply in zip(streams, replies, strict=True):
        if isinstance(reply, Exception):
            if str(reply).startswith("NOGROUP"):
                continue
            _raise_reply(endpoint, reply, stream)
        counts[stream] = int(reply[0])
    return counts


def _pipeline(endpoint: RedisEndpoint, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Send ``commands`` in one round trip; each raw reply, or the ``ResponseError`` it got.

    On a cluster each command goes to its stream's master (one round trip for all masters).
    """
    if not commands:
        return []
    with translate_errors(endpoint):
        if endpoint.is_cluster:
            return send_by_node(endpoint, commands, raise_errors=False)
    with raw_connection(endpoint) as connection, translate_errors(endpoint):
        return send_all(connection, commands, raise_errors=False)


def _transactions(
    endpoint: RedisEndpoint, streams: Sequence[str], commands: Sequence[tuple[Any, ...]]
) -> list[Any]:
    """``_pipeline`` for one ``MULTI ... EXEC`` per stream, in ``streams``' order: on a cluster
    each transaction goes whole to its stream's master (``send_by_node`` would route each
    command alone, and MULTI and EXEC have no key)."""
    with translate_errors(endpoint):
        if not endpoint.is_cluster:
            return _pipeline(endpoint, commands)
        groups: list[tuple[str, list[tuple[Any, ...]]]] = []
        for command in commands:
            if command[0] == "MULTI":
                groups.append((streams[len(groups)], []))
            groups[-1][1].append(command)
        return [reply for got in send_groups_by_node(endpoint, groups) for reply in got]


def _raise_reply(endpoint: RedisEndpoint, reply: Exception, stream: str) -> None:
    """Raise an error reply as atlasbus words it: a wrong key type, an old server, NOPERM."""
    text = str(reply)
    if text.startswith("WRONGTYPE"):
        raise ConfigurationError(
            f"key {stream!r} on Redis at {endpoint.description} is not a stream: check "
            f"{named('swept streams')}"
        )
    if "syntax error" in text.lower() or "unknown" in text.lower():
        raise AtlasbusError(
            f"Redis at {endpoint.description} refused the reaper's command on stream "
            f"{stream!r} ({text}): the reaper needs Redis 6.2 or later (XPENDING with IDLE)"
        )
    with translate_errors(endpoint):
        raise reply
