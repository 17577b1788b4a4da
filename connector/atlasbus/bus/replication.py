"""How many replicas must hold an entry before atlasbus counts on it (options ``minReplicas``
and ``replicaTimeout``), for a bus whose master may fail over (docs/operations.md).

Redis replicates asynchronously: an entry the master acknowledged can be lost if a replica that
never received it takes over. The sink therefore WAITs for ``minReplicas`` replicas after each
transaction (like Kafka's ``acks=all``), and the source plans only up to what that many
replicas acknowledged (like Kafka's high watermark), so it never passes on an entry a failover
could take back.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

# How often the driver asks again while the replicas catch up. A replica acknowledges its
# offset once a second unless a WAIT asks it sooner, so the first answer is often short.
POLL_S = 0.05


@dataclass(frozen=True)
class Replication:
    """``min_replicas`` replicas must acknowledge, within ``timeout_ms``."""

    min_replicas: int
    timeout_ms: int


class ReplicasBehind(Exception):
    """Fewer replicas than ``minReplicas`` acknowledged a write in time."""


class NoLongerMaster(Exception):
    """The node asked is a replica now: a failover made another node master since the client
    last read who is master (a cluster's slot map)."""


def replicated_offset(client: redis.Redis) -> tuple[int, dict[tuple[str, int], int]]:
    """The master's replication offset now, and what each online replica acknowledged;
    raises ``NoLongerMaster`` if the node asked is a replica (it has no replicas to count)."""
    info: dict[str, Any] = client.info("replication")
    if info.get("role") == "slave":
        raise NoLongerMaster()
    offsets = {
        (str(value["ip"]), int(value["port"])): int(value["offset"])
        for name, value in info.items()
        if name.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    }
    return int(info.get("master_repl_offset", 0)), offsets


def wait_for_replicas(client: redis.Redis, replication: Replication) -> bool:
    """True once ``min_replicas`` replicas hold every write the master had when called;
    False if they do not within ``timeout_ms``. Driver: call it after reading the streams'
    tails, so the tails were written before the offset it waits for.

    A replica tells the master what it holds once a second; asked directly (``INFO
    replication``'s ``slave_repl_offset``, with the master's login), it answers for now, so a
    healthy replica is found caught up at once. A replica the driver cannot reach counts by
    what it last told the master.
    """
    target, acknowledged = replicated_offset(client)
    deadline = time.monotonic() + replication.timeout_ms / 1000
    while True:
        held = [
            max(offset, _own_offset(client, address) or 0)
            for address, offset in acknowledged.items()
        ]
        if sum(offset >= target for offset in held) >= replication.min_replicas:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
        acknowledged = replicated_offset(client)[1]


_replicas: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], redis.Redis]] = (
    weakref.WeakKeyDictionary()
)


def _own_offset(master: redis.Redis, address: tuple[str, int]) -> int | None:
    """The replication offset the replica at ``address`` has applied; None if it cannot say."""
    import redis

    clients = _replicas.setdefault(master.connection_pool, {})
    replica = clients.get(address)
    if replica is None:
        replica = clients[address] = _replica_client(master, address)
    try:
        info: dict[str, Any] = replica.info("replication")
    except redis.RedisError:
        return None
    offset = info.get("slave_repl_offset")
    return int(offset) if offset is not None else None


def _replica_client(master: redis.Redis, address: tuple[str, int]) -> redis.Redis:
    """A client for a replica, logged in and configured as the master's (a Sentinel URL's
    master-following connection made a plain one again)."""
    import redis

    pool = master.connection_pool
    options = {k: v for k, v in pool.connection_kwargs.items() if k != "master_locator"}
    options.update(host=address[0], port=address[1], socket_connect_timeout=1, socket_timeout=1)
    connection_class = getattr(pool.connection_class, "plain", pool.connection_class)
    replica_pool = redis.ConnectionPool(connection_class=connection_class, **options)
    return redis.Redis(connection_pool=replica_pool)
