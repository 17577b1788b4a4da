"""Talking to a Redis Cluster: commands grouped by the master that owns their key, redirects
(MOVED, ASK, TRYAGAIN) followed, and the slot map read again when it has changed.

redis-py's ``RedisCluster`` holds the slot map and a connection pool per node; atlasbus sends
its raw commands on those pools, so a planning step costs one round trip per master, sent to
all masters before any reply is read. Runs on the driver and on executors.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from typing import TYPE_CHECKING, Any

from atlasbus.bus.slot_map import (
    REDIRECT_PAUSE_S,
    is_moved,
    redirect_errors,
    refresh_slot_map,
)
from atlasbus.errors import RedisUnavailableError

if TYPE_CHECKING:
    from atlasbus.bus.connection import RedisEndpoint

# Rounds of redirects a command follows before the error is raised: a slot moving under a
# running query redirects once (MOVED) or a few times (ASK, TRYAGAIN while keys migrate).
REDIRECT_ROUNDS = 20


Command = tuple[Any, ...]

# Commands whose key is their third word (``XINFO STREAM key``, ``XGROUP CREATE key ...``).
_SUBCOMMANDS = {"XINFO", "XGROUP", "OBJECT", "MEMORY"}


def is_asked(error: BaseException) -> bool:
    """ASK: the command's key has migrated, its slot not yet."""
    from redis.exceptions import AskError

    return isinstance(error, AskError)


def command_key(command: Sequence[Any]) -> str:
    """The key a command is about: routes it to its slot."""
    name = str(command[0]).upper()
    key = command[2] if name in _SUBCOMMANDS else command[1]
    return key.decode() if isinstance(key, bytes) else str(key)


def send_by_node(
    endpoint: RedisEndpoint, commands: Sequence[Command], *, raise_errors: bool
) -> list[Any]:
    """Send each command to the master owning its key; the raw replies, in order.

    One round trip, however many masters (``send_groups_by_node``). A command answered with
    ASK (its key already migrated, its slot not yet) is sent to the target with ``ASKING``
    before it. An error reply is returned as its exception (raised with ``raise_errors``).
    Only for commands that may run twice: a redirect means the command did not run.
    """
    groups = [(command_key(command), [command]) for command in commands]
    replies = [got[0] for got in send_groups_by_node(endpoint, groups)]
    if raise_errors:
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    return replies


def send_groups_by_node(
    endpoint: RedisEndpoint, groups: Sequence[tuple[str, Sequence[Command]]]
) -> list[list[Any]]:
    """Send each ``(key, commands)`` group, in order and together, to the master owning
    ``key``; each group's raw replies (error replies as their exceptions).

    Every master is written to before any reply is read: one round trip, however many
    masters. A group redirected (MOVED: the slot moved; ASK: its key already migrated;
    TRYAGAIN: its slot's keys are mid-migration) is sent again where the cluster says, after
    the slot map is read again; the others' replies stand. In ``MULTI ... EXEC`` a redirected
    command aborts the transaction (EXECABORT), so the whole group is sent again; such a group
    waits an ASK out rather than follow it. Only for groups that may run again when a
    redirect means they did not run.
    """
    client: Any = endpoint.client()
    replies: list[list[Any]] = [[] for _ in groups]
    waiting = list(range(len(groups)))
    asked: dict[int, Any] = {}  # group index -> the node an ASK sent its one command to
    for _ in range(REDIRECT_ROUNDS):
        by_node: dict[str, list[int]] = {}
        nodes: dict[str, Any] = {}
        for index in waiting:
            node = asked.get(index) or client.get_node_from_key(groups[index][0])
            by_node.setdefault(node.name, []).append(index)
            nodes[node.name] = node
        received = _round_trip(endpoint, client, nodes, by_node, groups, asked)
        waiting, asked, moved, pause = [], {}, False, False
        for index, got in received.items():
            redirect: Any = next((r for r in got if isinstance(r, redirect_errors())), None)
            if redirect is None:
                replies[index] = got
                continue
            waiting.append(index)
            target = None
            if is_asked(redirect) and len(groups[index][1]) == 1:
                target = client.get_node(host=redirect.host, port=redirect.port)
            if target is not None:
                asked[index] = target
            elif is_asked(redirect) or is_moved(redirect):
                moved = True
            else:
                pause = True
        if not waiting:
            return replies
        if moved:
            refresh_slot_map(client)
        if pause:
            time.sleep(REDIRECT_PAUSE_S)
    raise RedisUnavailableError(
        f"the Redis Cluster at {endpoint.description} kept redirecting commands on "
        f"{groups[waiting[0]][0]!r} ({REDIRECT_ROUNDS} times): is a slot migration stuck? "
        "CLUSTER NODES shows slots in migration"
    )


def eval_by_node(
    endpoint: RedisEndpoint, script: str, sha: str, calls: Sequence[tuple[str, Sequence[Any]]]
) -> list[Any]:
    """Run ``script`` once per ``(key, argv)`` on the master owning ``key``; the raw replies.

    EVALSHA first; where a master does not have the script cached yet (NOSCRIPT: first use on
    that node, a SCRIPT FLUSH, a failover to a replica that never ran it), EVAL, which also
    caches it there. Error replies are returned as their exceptions.
    """
    import redis

    def run(command: str, body: str, indices: Sequence[int]) -> list[Any]:
        groups = [(calls[i][0], [(command, body, 1, calls[i][0], *calls[i][1])]) for i in indices]
        return [got[0] for got in send_groups_by_node(endpoint, groups)]

    replies = run("EVALSHA", sha, range(len(calls)))
    missing = [i for i, r in enumerate(replies) if isinstance(r, redis.exceptions.NoScriptError)]
    if missing:
        for index, reply in zip(missing, run("EVAL", script, missing), strict=True):
            replies[index] = reply
    return replies


def _round_trip(
    endpoint: RedisEndpoint,
    client: Any,
    nodes: dict[str, Any],
    by_node: dict[str, list[int]],
    groups: Sequence[tuple[str, Sequence[Command]]],
    asked: dict[int, Any],
) -> dict[int, list[Any]]:
    """Write every node's groups, then read every reply: the replies by group index. An asked
    group goes with an ``ASKING`` before it, whose OK is dropped."""
    import redis

    received: dict[int, list[Any]] = {}
    with ExitStack() as stack:
        sent: list[tuple[str, Any, list[int]]] = []
        for name, indices in by_node.items():
            with node_errors(endpoint, name):
                pool = client.get_redis_connection(nodes[name]).connection_pool
                connection = pool.get_connection()
            stack.callback(pool.release, connection)
            outgoing: list[Command] = []
            for index in indices:
                if index in asked:
                    outgoing.append(("ASKING",))
                outgoing.extend(groups[index][1])
            try:
                with node_errors(endpoint, name):
                    connection.send_packed_command(connection.pack_commands(outgoing))
            except BaseException:
                connection.disconnect()
                raise
            sent.append((name, connection, indices))
        for name, connection, indices in sent:
            clean = False
            try:
                with node_errors(endpoint, name):
                    for index in indices:
                        if index in asked:
                            connection.read_response()  # ASKING's OK
                        got: list[Any] = []
                        for _ in groups[index][1]:
                            try:
                                got.append(connection.read_response())
                            except redis.ResponseError as exc:  # read on: the next reply follows
                                got.append(exc)
                        received[index] = got
                clean = True
            finally:
                if not clean:
                    connection.disconnect()
    return received


@contextmanager
def node_errors(endpoint: RedisEndpoint, node: str) -> Iterator[None]:
    """Name the cluster node in a connection error, and read the slot map again: the node may
    have failed over to its replica, or left the cluster."""
    import redis

    from atlasbus.bus.connection import scrubbed

    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as error:
        if isinstance(error, redis.AuthenticationError):
            raise
        with suppress(Exception):  # the error to report is the node's
            refresh_slot_map(endpoint.client())
        detail = scrubbed(str(error), endpoint).rstrip(".")
        raise RedisUnavailableError(
            f"cannot reach the Redis Cluster node {node} (of the cluster at "
            f"{endpoint.description}): {detail}. If it failed, the cluster promotes its "
            "replica and atlasbus follows; a master with no replica must be brought back "
            "(the query resumes from its checkpoint once it answers)"
        ) from None
