"""A private Sentinel set-up on free loopback ports: a master, its replicas, and Sentinels
watching it under one name, from the same redis-server binary as ``RedisServer`` (tests).
"""

from __future__ import annotations

import shutil
import time
from contextlib import ExitStack
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

from atlasbus.sandbox.redis_server import RedisServer, free_port

MASTER_NAME = "atlasbus-master"


class LocalSentinels:
    """A master with ``replicas`` replicas, watched by ``sentinels`` Sentinels (quorum: a
    majority). ``sentinel_addresses`` is where the Sentinels listen; ``url`` is the
    ``redis+sentinel://`` URL naming them. ``start()`` returns once every replica is in sync and
    every Sentinel knows the master, its replicas and the other Sentinels."""

    def __init__(
        self,
        replicas: int = 1,
        sentinels: int = 3,
        *,
        master_name: str = MASTER_NAME,
        down_after_ms: int = 5_000,
        failover_timeout_ms: int = 10_000,
        binary: str | None = None,
    ) -> None:
        self.master_name = master_name
        # replicas sync at once, not after Redis 7's 5 s wait for more replicas to join
        sync_now = ["--repl-diskless-sync-delay", "0"]
        self.master = RedisServer(binary=binary, extra_args=sync_now)
        self.replicas = [
            RedisServer(
                binary=binary,
                extra_args=[*sync_now, "--replicaof", "127.0.0.1", str(self.master.port)],
            )
            for _ in range(replicas)
        ]
        self.quorum = sentinels // 2 + 1
        self._config_folder = Path(mkdtemp(prefix="atlasbus-sentinel-"))
        self.sentinels = []
        for index in range(sentinels):
            port = free_port()
            config = self._config_folder / f"sentinel-{index}.conf"
            config.write_text(
                f"sentinel monitor {master_name} 127.0.0.1 {self.master.port} {self.quorum}\n"
                f"sentinel down-after-milliseconds {master_name} {down_after_ms}\n"
                f"sentinel failover-timeout {master_name} {failover_timeout_ms}\n"
            )
            self.sentinels.append(
                RedisServer(port=port, binary=binary, config_file=config, extra_args=["--sentinel"])
            )
        self._stack = ExitStack()

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", s.port) for s in self.sentinels]

    @property
    def url(self) -> str:
        where = ",".join(f"{host}:{port}" for host, port in self.sentinel_addresses)
        return f"redis+sentinel://{where}/{self.master_name}/0"

    def start(self, timeout: float = 60.0) -> LocalSentinels:
        import redis

        try:
            self._stack.enter_context(self.master)
            for replica in self.replicas:
                self._stack.enter_context(replica)
            for sentinel in self.sentinels:
                self._stack.enter_context(sentinel)
            deadline = time.monotonic() + timeout
            for replica in self.replicas:  # a failover to a replica still syncing loses all
                with redis.Redis(port=replica.port, decode_responses=True) as client:
                    while client.info("replication").get("master_link_status") != "up":
                        if time.monotonic() > deadline:
                            raise RuntimeError(
                                f"replica {replica.port} did not sync in {timeout} s"
                            )
                        time.sleep(0.05)
            for sentinel in self.sentinels:
                with redis.Redis(port=sentinel.port, decode_responses=True) as client:
                    while not self._sees_everyone(client):
                        if time.monotonic() > deadline:
                            raise RuntimeError(
                                f"Sentinel {sentinel.port} did not learn the set-up in {timeout} s"
                            )
                        time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        return self

    def _sees_everyone(self, client: object) -> bool:
        import redis

        assert isinstance(client, redis.Redis)
        try:
            master: Any = client.sentinel_master(self.master_name)  # parsed by redis-py
        except redis.ResponseError:
            return False
        return (
            int(master.get("num-slaves", 0)) >= len(self.replicas)
            and int(master.get("num-other-sentinels", 0)) >= len(self.sentinels) - 1
            and not master.get("is_sdown", False)
        )

    def master_address(self) -> tuple[str, int]:
        """Where the Sentinels say the master is now."""
        import redis

        with redis.Redis(port=self.sentinels[0].port, decode_responses=True) as client:
            host, port = client.execute_command(
                "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name
            )
        return str(host), int(port)

    def stop(self) -> None:
        self._stack.close()
        shutil.rmtree(self._config_folder, ignore_errors=True)

    def __enter__(self) -> LocalSentinels:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
