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

    def __init__(self, masters: int = 3, replicas: int = 1, *, binary: str | None = None) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError("a cluster needs at least one master, and replicas >= 0")
        self.masters = [RedisServer(cluster_enabled=True, binary=binary) for _ in range(masters)]
        self.replicas = [
            [RedisServer(cluster_enabled=True, binary=binary) for _ in range(replicas)]
            for _ in range(masters)
        ]
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

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _until(deadline: float, ready: Any, what: str) -> None:
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(what)
        time.sleep(0.05)


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
