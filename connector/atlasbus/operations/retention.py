"""Retention (``trimConsumed``, ``atlasbus trim``): trim streams to what every consumer consumed.

Runs on the Spark driver (the stream reader's ``commit``, after the consumer group option has
moved to the committed offset) and in the ``atlasbus trim`` command line; never per entry.

The bus's own consumer deletes each entry (XDEL) once its handler acknowledged it, so history is
gone for every other reader. Here an entry is removed only when every consumer of the stream is
past it. The consumers Redis knows are the stream's consumer groups; the query itself is known
only while it runs, by its committed offset, given here as ``positions``.

The trim point of a stream (``XTRIM key MINID = point``: entries with IDs below it go) is the
smallest of:

- each consumer group's last-delivered ID;
- each consumer group's oldest pending entry (XPENDING's summary form), delivered but not
  acknowledged: it may be delivered again;
- the query's committed position, when given.

The entry *at* a consumer's position is kept, not only the ones after it. A reader that resumes
from a position (the query from its checkpoint, whose ``group`` mirrors it) tells "trimmed past
me" from "nothing new" by finding that entry or an older one still there (``data_loss``): with
it trimmed, the next batch would be reported as data loss wherever the entries added since
cannot be counted (Redis 6.2, or a batch that did not end at the stream's tail). One entry per
stream is the price. A group whose last-delivered ID is ``0-0`` (created from ``0``) holds
everything. A stream with neither a group nor a query position is left alone: nothing says
anyone consumed it. A trim that removes the newest entry is harmless: XTRIM keeps the stream's
last-generated ID, so new IDs still grow past it.

Atomic per stream: a consumer group created (or moved back by XGROUP SETID) between reading the
positions and trimming must still hold the trim back, so one Lua script reads the groups, picks
the point and trims, with nothing in between. Scripts run under effects replication (the default
since Redis 5, the only mode in 7), so replicas and the AOF get the XTRIM itself, not the script;
XINFO's non-determinism is harmless. One script call per stream (one key each, so each runs on
the stream's own node in a cluster), all streams pipelined in one round trip (on a cluster, one
for all masters: ``atlasbus.bus.cluster.eval_by_node``).

Exact trimming (``MINID =``) rather than approximate (``~``): ``~`` removes only whole
macro-nodes (about 100 entries each by default) and so may remove nothing for a while, and
would make a trim's outcome depend on how the stream was encoded. Exact trimming may split a
node, a little more work for Redis, once per commit; what goes is then exactly what the report
says, which is what an operator and the tests need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from atlasbus.bus.cluster import eval_by_node
from atlasbus.bus.connection import RedisEndpoint, is_cluster_client, translate_errors
from atlasbus.errors import ConfigurationError
from atlasbus.model.conversions import reply_text
from atlasbus.model.entry_id import EntryId
from atlasbus.option_names import named

QUERY: Final = "query"
"""The name :class:`Holder` gives the query's committed position."""

DRY_RUN_COUNT_LIMIT: Final = 10_000
"""A dry run counts what would go exactly up to this many entries on either side of the point.

Redis has no count of the entries in an ID range, so counting walks them (inside the script,
with nothing sent back but the count); past this bound on both sides of the point the count is a
lower bound (``TrimResult.exact`` False) rather than a walk of a whole large stream.
"""

Reason = Literal["last-delivered", "pending", "committed"]


@dataclass(frozen=True)
class Holder:
    """A consumer whose position is the trim point: it holds the trim back."""

    name: str
    """The consumer group's name, or ``QUERY`` for the query's committed position."""
    reason: Reason
    """``last-delivered`` (the group's position), ``pending`` (its oldest unacknowledged
    entry), or ``committed`` (the query's offset)."""

    def describe(self) -> str:
        if self.reason == "committed":
            return "query (committed offset)"
        what = "oldest pending" if self.reason == "pending" else "last delivered"
        return f"group {self.name} ({what})"


@dataclass(frozen=True)
class TrimResult:
    """What a trim did, or (``dry_run``) would do, to one stream."""

    stream: str
    exists: bool
    """False when the key is absent: nothing to trim."""
    point: EntryId | None
    """The MINID: entries with IDs below it go. None when no consumer is known (left alone)."""
    held_by: tuple[Holder, ...]
    """Every consumer whose position is ``point``."""
    removed: int
    """Entries removed (XTRIM's reply); in a dry run, the entries that would go."""
    exact: bool
    """False only in a dry run that stopped counting: then at least ``removed`` would go."""
    remaining: int
    """Entries in the stream after the trim (in a dry run: after it, as far as counted)."""
    dry_run: bool


# KEYS[1] the stream; ARGV[1] the query's committed position ('' when none); ARGV[2] '1' for a
# dry run; ARGV[3] the dry run's counting bound.
# Reply: {0} no such key; {-1, type} not a stream; else
# {1, point or '', removed, exact (0/1), remaining, name1, reason1, name2, reason2, ...}.
# Commands run with pcall and an error is returned as the script's reply, so the caller sees
# Redis's own text (not a script stack trace), on 6.2 as on 7; a command the ACL refuses is named
# (the refusal inside a script does not say which) in the NOPERM form connection.py translates.
TRIM_SCRIPT: Final = """
local key = KEYS[1]
local query, dry, bound = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])

local function call(...)
  local reply = redis.pcall(...)
  if type(reply) ~= 'table' or reply.err == nil then return reply, nil end
  if string.find(reply.err, "can't run this command", 1, true) then
    local args = {...}
    local name = string.lower(args[1])
    if name == 'xinfo' then name = 'xinfo|' .. string.lower(args[2]) end
    return nil, redis.error_reply(
      "NOPERM this user has no permissions to run the '" .. name .. "' command")
  end
  return nil, reply
end

-- IDs compare as (ms, seq) integers up to 2^64-1: as digit strings (Lua numbers are doubles)
local function num_cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  if a == b then return 0 end
  return a < b and -1 or 1
end
local function id_cmp(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  local c = num_cmp(a_ms, b_ms)
  if c ~= 0 then return c end
  return num_cmp(a_seq, b_seq)
end

local kind, failure = call('TYPE', key)
if failure then return failure end
kind = kind.ok or kind
if kind == 'none' then return {0} end
if kind ~= 'stream' then return {-1, kind} end

local holds = {}
local groups, failure = call('XINFO', 'GROUPS', key)
if failure then return failure end
for _, group in ipairs(groups) do
  local fields = {}
  for i = 1, #group, 2 do fields[group[i]] = group[i + 1] end
  local name = fields['name']
  table.insert(holds, {fields['last-delivered-id'], name, 'last-delivered'})
  if tonumber(fields['pending']) > 0 then
    local summary, failure = call('XPENDING', key, name)
    if failure then return failure end
    if summary[2] then table.insert(holds, {summary[2], name, 'pending'}) end
  end
end
if query ~= '' then table.insert(holds, {query, 'query', 'committed'}) end

local length, failure = call('XLEN', key)
if failure then return failure end
if #holds == 0 then return {1, '', 0, 1, length} end

local point = holds[1][1]
for _, hold in ipairs(holds) do
  if id_cmp(hold[1], point) < 0 then point = hold[1] end
end
local reply = {1, point, 0, 1, length}
for _, hold in ipairs(holds) do
  if hold[1] == point then
    table.insert(reply, hold[2])
    table.insert(reply, hold[3])
  end
end

if not dry then
  local removed, failure = call('XTRIM', key, 'MINID', '=', point)
  if failure then return failure end
  reply[3], reply[5] = removed, length - removed
  return reply
end

if point == '0-0' or length == 0 then return reply end
local below, failure = call('XRANGE', key, '-', '(' .. point, 'COUNT', bound)
if failure then return failure end
if #below < bound then
  reply[3], reply[5] = #below, length - #below
  return reply
end
local kept, failure = call('XRANGE', key, point, '+', 'COUNT', bound)
if failure then return failure end
if #kept < bound then
  reply[3], reply[5] = length - #kept, #kept
  return reply
end
reply[3], reply[4], reply[5] = bound, 0, length - bound
return reply
"""


def trim_consumed(
    endpoint: RedisEndpoint,
    positions: Mapping[str, EntryId | None],
    *,
    dry_run: bool = False,
    count_limit: int = DRY_RUN_COUNT_LIMIT,
) -> list[TrimResult]:
    """Trim each stream of ``positions`` to the oldest position any consumer still needs.

    ``positions`` maps each stream key to the query's committed position there (the last entry
    ID it included), or None for no query (the command line: consumer groups only). With
    ``dry_run`` nothing is removed: the results say where the point is and how many entries
    would go (exactly up to ``count_limit`` on either side of the point). One round trip for
    all the streams; results in the order of ``positions``. Driver or command line.
    """
    if count_limit <= 0:
        raise ValueError(f"count_limit must be a positive integer, got {count_limit}")
    streams = list(positions)
    if not streams:
        return []
    with translate_errors(endpoint):
        client = endpoint.client()
        script = client.register_script(TRIM_SCRIPT)
        args = [
            [str(positions[s]) if positions[s] is not None else "", "1" if dry_run else "0"]
            for s in streams
        ]
        if is_cluster_client(client):  # each stream's script on its master, cached per node
            calls = [(s, [*argv, count_limit]) for s, argv in zip(streams, args, strict=True)]
            replies = eval_by_node(endpoint, TRIM_SCRIPT, script.sha, calls)
            return _results(endpoint, streams, replies, dry_run)
        pipe = client.pipeline(transaction=False)
        for stream, argv in zip(streams, args, strict=True):
            pipe.evalsha(script.sha, 1, stream, *argv, count_limit)
        replies = pipe.execute(raise_on_error=False)
        if any(_no_script(reply) for reply in replies):
            # First use on this server (or after SCRIPT FLUSH): EVAL also caches the script.
            pipe = client.pipeline(transaction=False)
            for stream, argv in zip(streams, args, strict=True):
                pipe.eval(TRIM_SCRIPT, 1, stream, *argv, count_limit)
            replies = pipe.execute(raise_on_error=False)
    return _results(endpoint, streams, replies, dry_run)


def _results(
    endpoint: RedisEndpoint, streams: list[str], replies: list[Any], dry_run: bool
) -> list[TrimResult]:
    for reply in replies:
        if isinstance(reply, Exception):
            with translate_errors(endpoint):
                raise reply
    return [
        _result(endpoint, stream, reply, dry_run)
        for stream, reply in zip(streams, replies, strict=True)
    ]


def _no_script(reply: object) -> bool:
    import redis

    return isinstance(reply, redis.exceptions.NoScriptError)


def _result(endpoint: RedisEndpoint, stream: str, reply: Any, dry_run: bool) -> TrimResult:
    status = int(reply[0])
    if status == 0:
        return TrimResult(stream, False, None, (), 0, True, 0, dry_run)
    if status < 0:
        raise ConfigurationError(
            f"key {stream!r} on Redis at {endpoint.description} is a {reply_text(reply[1])}, "
            f"not a stream: atlasbus trims only streams; check {named('stream selection')}"
        )
    point_text = reply_text(reply[1])
    names = [reply_text(v) for v in reply[5:]]
    holders = [Holder(names[i], _reason(names[i + 1])) for i in range(0, len(names), 2)]
    # a group whose oldest pending entry is its last-delivered one: the pending entry says why
    pending = {h.name for h in holders if h.reason == "pending"}
    holders = [h for h in holders if h.reason != "last-delivered" or h.name not in pending]
    return TrimResult(
        stream=stream,
        exists=True,
        point=EntryId.parse(point_text) if point_text else None,
        held_by=tuple(holders),
        removed=int(reply[2]),
        exact=bool(int(reply[3])),
        remaining=int(reply[4]),
        dry_run=dry_run,
    )


def _reason(text: str) -> Reason:
    if text == "pending":
        return "pending"
    if text == "committed":
        return "committed"
    return "last-delivered"
