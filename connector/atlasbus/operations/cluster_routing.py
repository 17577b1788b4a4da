"""The bus tools' commands on a Redis Cluster, where ``atlasbus.bus.cluster.send_by_node`` does
not fit: commands that must stay together on one connection (``MULTI ... EXEC`` over one key),
and scripts (``EVALSHA``: its key is its fourth word, and the script cache is per node).

Each group is sent to the master owning its key, every master written before any reply is read
(one round trip, however many masters), as ``send_by_node`` does for single commands.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from atlasbus.bus.cluster import (
    REDIRECT_PAUSE_S,
    REDIRECT_ROUNDS,
    REDIRECTS,
    node_errors,
    refresh_slot_map,
)
from atlasbus.errors import RedisUnavailableError

if TYPE_CHECKING:
    from atlasbus.bus.connection import RedisEndpoint

Command = tuple[Any, ...]


def send_groups_by_node(
    endpoint: RedisEndpoint, groups: Sequence[tuple[str, Sequence[Command]]]
) -> list[list[Any]]:
    """Send each ``(key, commands)`` group, in order and together, to the master owning ``key``;
    each group's raw replies (error replies as their exceptions).

    For ``MULTI``, commands on ``key``, ``EXEC``: a command redirected when queued (MOVED, ASK,
    TRYAGAIN: its slot moved or is moving) aborts the transaction (EXECABORT), so the whole
    group is sent again once the slot map is read again. Only for groups that may run again
    when a redirect means they did not run.
    """
    client: Any = endpoint.client()
    replies: list[list[Any]] = [[] for _ in groups]
    waiting = list(range(len(groups)))
    for _ in range(REDIRECT_ROUNDS):
        by_node: dict[str, list[int]] = {}
        nodes: dict[str, Any] = {}
        for index in waiting:
            node = client.get_node_from_key(groups[index][0])
            by_node.setdefault(node.name, []).append(index)
            nodes[node.name] = node
        received = _round_trip(endpoint, client, nodes, by_node, groups)
        waiting = [i for i, got in received.items() if any(isinstance(r, REDIRECTS) for r in got)]
        for index, got in received.items():
            replies[index] = got
        if not waiting:
            return replies
        refresh_slot_map(client)
        time.sleep(REDIRECT_PAUSE_S)
    raise RedisUnavailableError(
        f"the Redis Cluster at {endpoint.description} kept redirecting commands on "
        f"{groups[waiting[0]][0]!r} ({REDIRECT_ROUNDS} times): is a slot migration stuck? "
        "CLUSTER NODES shows slots in migration"
    )


def _round_trip(
    endpoint: RedisEndpoint,
    client: Any,
    nodes: dict[str, Any],
    by_node: dict[str, list[int]],
    groups: Sequence[tuple[str, Sequence[Command]]],
) -> dict[int, list[Any]]:
    """Write every node's groups, then read every reply: the replies by group index."""
    import redis

    received: dict[int, list[Any]] = {}
    with ExitStack() as stack:
        sent: list[tuple[str, Any, list[int]]] = []
        for name, indices in by_node.items():
            with node_errors(endpoint, name):
                pool = client.get_redis_connection(nodes[name]).connection_pool
                connection = pool.get_connection()
            stack.callback(pool.release, connection)
            outgoing = [command for index in indices for command in groups[index][1]]
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


def eval_by_node(
    endpoint: RedisEndpoint, script: str, sha: str, calls: Sequence[tuple[str, Sequence[Any]]]
) -> list[Any]:
    """Run ``script`` once per ``(key, argv)`` on the master owning ``key``; the raw replies.

    EVALSHA first; where a master does not have the script cached yet (NOSCRIPT: first use on
    that node, a SCRIPT FLUSH, a failover to a replica that never ran it), EVAL, which also
    caches it there. Error replies are returned as their exceptions. (``send_by_node`` would
    route EVALSHA by its second word, the SHA: a script's key is its fourth.)
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
