"""Talking to a Redis Cluster: commands grouped by the master that owns their key, redirects
(MOVED, ASK, TRYAGAIN) followed, and the slot map read again when it has changed.

redis-py's ``RedisCluster`` holds the slot map and a connection pool per node; atlasbus sends
its raw commands on those pools, so a planning step costs one round trip per master, sent to
all masters before any reply is read. Runs on the driver and on executors.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from typing import TYPE_CHECKING, Any

from redis.exceptions import AskError, MovedError, TryAgainError

from atlasbus.errors import RedisUnavailableError

if TYPE_CHECKING:
    from atlasbus.bus.connection import RedisEndpoint

# Rounds of redirects a command follows before the error is raised: a slot moving under a
# running query redirects once (MOVED) or a few times (ASK, TRYAGAIN while keys migrate).
REDIRECT_ROUNDS = 20
# How long to wait before asking again after TRYAGAIN or an ASK to a node mid-migration.
REDIRECT_PAUSE_S = 0.05
# How often a cluster is asked for its slot map while a failed master is replaced.
FAILOVER_POLL_S = 0.5

_refresh_lock = threading.Lock()


# The replies that send a command elsewhere (or to wait): MOVED, ASK and TRYAGAIN.
REDIRECTS: tuple[type[Exception], ...] = (MovedError, AskError, TryAgainError)

# Commands whose key is their third word (``XINFO STREAM key``, ``XGROUP CREATE key ...``).
_SUBCOMMANDS = {"XINFO", "XGROUP", "OBJECT", "MEMORY"}


def command_key(command: Sequence[Any]) -> str:
    """The key a command is about: routes it to its slot."""
    name = str(command[0]).upper()
    key = command[2] if name in _SUBCOMMANDS else command[1]
    return key.decode() if isinstance(key, bytes) else str(key)


def refresh_slot_map(client: Any) -> None:
    """Read the slot map again (after MOVED, or when a master stopped answering)."""
    with _refresh_lock:
        client.nodes_manager.initialize()


def node_name_of(client: Any, key: str) -> str:
    """``host:port`` of the master that owns ``key``'s slot, as the slot map says now."""
    return str(client.get_node_from_key(key).name)


def send_by_node(
    endpoint: RedisEndpoint, commands: Sequence[tuple[Any, ...]], *, raise_errors: bool
) -> list[Any]:
    """Send each command to the master owning its key; the raw replies, in order.

    Commands are grouped per master and written to every master before any reply is read:
    one round trip, however many masters. A command redirected (MOVED: the slot moved; ASK:
    its key already migrated; TRYAGAIN: keys of its slot are mid-migration) is sent again
    where the cluster says, after the slot map is read again; the others' replies stand. An
    error reply is returned as its exception (raised with ``raise_errors``).

    Only for commands that may run twice: a redirect means the command did not run.
    """
    import redis

    client: Any = endpoint.client()
    replies: list[Any] = [None] * len(commands)
    waiting = list(range(len(commands)))
    asked: dict[int, Any] = {}  # command index -> node an ASK sent it to
    for _ in range(REDIRECT_ROUNDS):
        groups: dict[str, list[int]] = {}
        nodes: dict[str, Any] = {}
        for index in waiting:
            node = asked.get(index) or client.get_node_from_key(command_key(commands[index]))
            groups.setdefault(node.name, []).append(index)
            nodes[node.name] = node
        received = _round_trip(endpoint, client, nodes, groups, commands, asked)
        waiting, asked, moved, pause = [], {}, False, False
        for index, reply in received.items():
            if isinstance(reply, redis.exceptions.AskError):
                target = client.get_node(host=reply.host, port=reply.port)
                if target is None:
                    moved = True
                else:
                    asked[index] = target
                waiting.append(index)
            elif isinstance(reply, redis.exceptions.MovedError):
                moved = True
                waiting.append(index)
            elif isinstance(reply, redis.exceptions.TryAgainError):
                pause = True
                waiting.append(index)
            else:
                replies[index] = reply
        if not waiting:
            break
        if moved:
            refresh_slot_map(client)
        if pause:
            time.sleep(REDIRECT_PAUSE_S)
    else:
        raise RedisUnavailableError(
            f"the Redis Cluster at {endpoint.description} kept redirecting commands on "
            f"{command_key(commands[waiting[0]])!r} ({REDIRECT_ROUNDS} times): is a slot "
            "migration stuck? CLUSTER NODES shows slots in migration"
        )
    if raise_errors:
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    return replies


def _round_trip(
    endpoint: RedisEndpoint,
    client: Any,
    nodes: dict[str, Any],
    groups: dict[str, list[int]],
    commands: Sequence[tuple[Any, ...]],
    asked: dict[int, Any],
) -> dict[int, Any]:
    """Write each node's commands, then read every reply: the replies by command index.

    A command sent after an ASK goes with an ``ASKING`` before it, whose OK is dropped.
    """
    import redis

    received: dict[int, Any] = {}
    with ExitStack() as stack:
        sent: list[tuple[str, Any, list[int]]] = []
        for name, indices in groups.items():
            with node_errors(endpoint, name):
                pool = client.get_redis_connection(nodes[name]).connection_pool
                connection = pool.get_connection()
            stack.callback(pool.release, connection)
            outgoing: list[tuple[Any, ...]] = []
            for index in indices:
                if index in asked:
                    outgoing.append(("ASKING",))
                outgoing.append(commands[index])
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
                        try:
                            received[index] = connection.read_response()
                        except redis.ResponseError as exc:
                            received[index] = exc
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
