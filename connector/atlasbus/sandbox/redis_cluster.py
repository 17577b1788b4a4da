"""A private Redis Cluster on free loopback ports: masters sharing the 16,384 hash slots, each
with its replicas, from the same redis-server binary as ``RedisServer`` (tests, benchmarks).
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

from atlasbus.sandbox.redis_server import RedisServer

SLOTS = 16_384


class LocalCluster:
    """``masters`` nodes with ``replicas`` replicas each; ``url`` is the first master's.

    Slots are split into even ranges in master order. ``start()`` returns once every node
    says ``cluster_state:ok``, every replica has synced with its master, and every node knows
    every replica (``CLUSTER SLOTS`` lists them everywhere).
    """

    def __init__(
        self,
        masters: int = 3,
        replicas: int = 1,
        *,
        binary: str | None = None,
        node_timeout_ms: int | None = None,
        appendonly: bool = False,
    ) -> None:
        """``node_timeout_ms`` is ``cluster-node-timeout`` (how long a silent master takes to
        be failed, 15 s by default); ``appendonly`` keeps each node's data across
        ``RedisServer.kill()`` and ``start()`` (fsync on every write)."""
        if masters < 1 or replicas < 0:
            raise ValueError("a cluster needs at least one master, and replicas >= 0")
        extra = ["--cluster-node-timeout", str(node_timeout_ms)] if node_timeout_ms else []

        def node() -> RedisServer:
            return RedisServer(
                cluster_enabled=True,
                binary=binary,
                appendonly=appendonly,
                appendfsync="always",
                extra_args=extra,
            )

        self.masters = [node() for _ in range(masters)]
        self.replicas = [[node() for _ in range(replicas)] for _ in range(masters)]
        self._stack = ExitStack()

    @property
    def nodes(self) -> list[RedisServer]:
        return [*self.masters, *(r for group in self.replicas for r in group)]

    @property
    def url(self) -> str:
        return self.masters[0].url

    def start(self, timeout: float = 60.0) -> LocalCluster:
        import redis

        try:
            for node in self.nodes:
                self._stack.enter_context(node)
            clients: dict[int, Any] = {
                node.port: redis.Redis(port=node.port) for node in self.nodes
            }
            first = clients[self.masters[0].port]
            for node in self.nodes[1:]:
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)
            share = SLOTS // len(self.masters)
            for index, master in enumerate(self.masters):
                low = index * share
                high = SLOTS if index == len(self.masters) - 1 else low + share
                clients[master.port].execute_command("CLUSTER", "ADDSLOTS", *range(low, high))
            deadline = time.monotonic() + timeout
            for master, group in zip(self.masters, self.replicas, strict=True):
                master_id = clients[master.port].execute_command("CLUSTER", "MYID")
                master_id = master_id.decode() if isinstance(master_id, bytes) else master_id
                for replica in group:
                    _until(
                        deadline,
                        lambda r=replica, m=master_id: _knows(clients[r.port], m),
                        f"replica {replica.port} never learnt master {master.port}",
                    )
                    clients[replica.port].execute_command("CLUSTER", "REPLICATE", master_id)
            _until(
                deadline,
                lambda: all(_state_ok(c) for c in clients.values()),
                "the cluster did not reach cluster_state:ok",
            )
            for group in self.replicas:
                for replica in group:
                    _until(
                        deadline,
                        lambda r=replica: _synced(clients[r.port]),
                        f"replica {replica.port} did not sync",
                    )
            replica_count = sum(len(group) for group in self.replicas)
            _until(
                deadline,
                lambda: all(_replicas_seen(c) == replica_count for c in clients.values()),
                "not every node learnt every replica",
            )
            for client in clients.values():
                client.close()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self._stack.close()

    def migrate_slot(self, slot: int, target: RedisServer, *, key_pause_s: float = 0.0) -> None:
        """Move ``slot`` to master ``target`` as ``redis-cli --cluster reshard`` does:
        IMPORTING/MIGRATING, MIGRATE key by key (``key_pause_s`` apart, so clients meet ASK
        while some keys have moved), then SETSLOT NODE on every master."""
        import redis

        clients: dict[int, Any] = {m.port: redis.Redis(port=m.port) for m in self.masters}
        try:
            source = next(port for port, c in clients.items() if _owns(c, slot))
            if source == target.port:
                return
            ids = {port: _text(c.execute_command("CLUSTER", "MYID")) for port, c in clients.items()}
            clients[target.port].execute_command(
                "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source]
            )
            clients[source].execute_command(
                "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.port]
            )
            while keys := clients[source].execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1):
                clients[source].execute_command(
                    "MIGRATE", "127.0.0.1", target.port, "", 0, 10_000, "KEYS", *keys
                )
                time.sleep(key_pause_s)
            for port in (target.port, source, *clients):  # the two ends first, as redis-cli does
                clients[port].execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target.port])
        finally:
            for client in clients.values():
                client.close()

    def fail_over(self, master: RedisServer, timeout: float = 60.0) -> RedisServer:
        """``CLUSTER FAILOVER`` on ``master``'s first replica; that replica, once every node's
        slot map names it master."""
        import redis

        index = self.masters.index(master)
        replica = self.replicas[index][0]
        owned = _first_slot(master)  # before the handover, which can be over at once
        with redis.Redis(port=replica.port) as client:
            client.execute_command("CLUSTER", "FAILOVER")
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            with redis.Redis(port=node.port) as client:
                _until(
                    deadline,
                    lambda c=client: _slot_owner(c, owned) == replica.port,
                    f"node {node.port} never learnt that {replica.port} took over",
                )
        self.masters[index], self.replicas[index][0] = replica, master
        return replica

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _until(deadline: float, ready: Any, what: str) -> None:
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(what)
        time.sleep(0.05)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _owns(client: Any, slot: int) -> bool:
    return _slot_owner(client, slot) == int(client.connection_pool.connection_kwargs["port"])


def _slot_owner(client: Any, slot: int) -> int | None:
    """The port of the master that ``client``'s node says owns ``slot``."""
    for low, high, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
        if int(low) <= slot <= int(high):
            return int(master[1])
    return None


def _first_slot(master: RedisServer) -> int:
    import redis

    with redis.Redis(port=master.port) as client:
        for low, _high, owner, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if int(owner[1]) == master.port:
                return int(low)
    raise RuntimeError(f"{master.port} owns no slot")


def _knows(client: Any, node_id: str) -> bool:
    nodes = client.execute_command("CLUSTER", "NODES")
    text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
    return node_id in text


def _replicas_seen(client: Any) -> int:
    nodes = client.execute_command("CLUSTER", "NODES")
    text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
    return sum(" slave " in f" {line.split()[2].replace(',', ' ')} " for line in text.splitlines())


def _state_ok(client: Any) -> bool:
    return bool(client.cluster("INFO").get("cluster_state") == "ok")


def _synced(client: Any) -> bool:
    info = client.info("replication")
    return bool(info.get("role") == "slave" and info.get("master_link_status") == "up")
