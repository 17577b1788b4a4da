"""The master a set of Sentinels watch, found only once they agree, and connections that follow
it across a failover; driver and executors (the URL form: ``atlasbus.bus.redis_url``).

redis-py's ``Sentinel.discover_master`` trusts the first Sentinel that answers. During a
failover the Sentinels disagree for a second or two (the leader has moved the master, the
others learn it from its hello messages), so a reader could plan from the new master and read
from the old one, which no longer receives writes: entries planned would look lost. Here a
master counts only when a majority of the Sentinels answer, all of those that answer name the
same address, and the server there says ``ROLE`` master.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from atlasbus.bus.redis_url import SentinelParts
from atlasbus.errors import ConfigurationError, RedisUnavailableError

if TYPE_CHECKING:
    import redis

log = logging.getLogger("atlasbus.sentinel")

# How often to ask again while the Sentinels disagree or the master they name is not one yet.
SETTLE_POLL_S = 0.1


class MasterLocator:
    """Asks the Sentinels of one URL where its master is; one per endpoint per process.

    ``sentinel_options`` are what a connection to a Sentinel takes (credentials, TLS, time
    limits); ``wait_s`` bounds how long a failover may keep the Sentinels from agreeing.
    """

    def __init__(
        self, parts: SentinelParts, sentinel_options: dict[str, Any], *, wait_s: float
    ) -> None:
        self.parts = parts
        self.wait_s = wait_s
        self._sentinel_options = sentinel_options
        self._sentinels: dict[tuple[str, int], redis.Redis] = {}
        self._lock = threading.Lock()
        self.address: tuple[str, int] | None = None  # the master last settled on

    @property
    def description(self) -> str:
        """Safe to print: the master's name and the Sentinels' addresses."""
        where = ",".join(f"{host}:{port}" for host, port in self.parts.sentinels)
        return f"master {self.parts.master_name!r} of the Sentinels at {where}"

    def settled_master(self) -> tuple[str, int]:
        """The address a majority of the Sentinels agree on, all that answer naming it.

        Waits (up to ``wait_s``) while they disagree or too few answer; raises
        ``RedisUnavailableError`` after that, ``ConfigurationError`` at once when every Sentinel
        that answers knows no master of that name.
        """
        deadline = time.monotonic() + self.wait_s
        while True:
            answers, failures = self._ask_all()
            named = {address for address in answers.values() if address is not None}
            if answers and not named:
                raise ConfigurationError(
                    f"the Sentinels at {self._where(answers)} know no master named "
                    f"{self.parts.master_name!r}: the URL's path names the master as the "
                    "Sentinels' configuration does ('sentinel monitor <name> ...'); "
                    "SENTINEL MASTERS lists the names"
                )
            if len(named) == 1 and len(answers) >= self.majority:
                self.address = named.pop()
                return self.address
            if time.monotonic() >= deadline:
                raise RedisUnavailableError(self._unsettled(answers, failures))
            time.sleep(SETTLE_POLL_S)

    @property
    def majority(self) -> int:
        return len(self.parts.sentinels) // 2 + 1

    def _ask_all(self) -> tuple[dict[tuple[str, int], tuple[str, int] | None], list[str]]:
        """Each Sentinel's answer (``None``: it knows no such master), and why others failed."""
        import redis

        answers: dict[tuple[str, int], tuple[str, int] | None] = {}
        failures = []
        for sentinel in self.parts.sentinels:
            try:
                reply = self._sentinel(sentinel).execute_command(  # type: ignore[no-untyped-call]
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.parts.master_name
                )
            except redis.AuthenticationError as exc:
                raise RedisUnavailableError(
                    f"the Sentinel at {sentinel[0]}:{sentinel[1]} refused the login ({exc}): "
                    "check the URL's sentinel_username and sentinel_password (the Sentinels' "
                    "own user, not the master's)"
                ) from None
            except redis.ResponseError as exc:
                if "unknown" in str(exc).lower() or "sentinel" not in str(exc).lower():
                    raise ConfigurationError(
                        f"{sentinel[0]}:{sentinel[1]}, named as a Sentinel in the URL, is not "
                        f"one ({exc}): a redis+sentinel:// URL names the Sentinels (port 26379 "
                        "by default); to reach a Redis server directly, use redis://"
                    ) from None
                failures.append(f"{sentinel[0]}:{sentinel[1]}: {exc}")
                continue
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                failures.append(f"{sentinel[0]}:{sentinel[1]}: {exc}")
                self._forget(sentinel)
                continue
            answers[sentinel] = _address(reply)
        return answers, failures

    def _sentinel(self, address: tuple[str, int]) -> redis.Redis:
        import redis

        with self._lock:
            client = self._sentinels.get(address)
            if client is None:
                client = redis.Redis(host=address[0], port=address[1], **self._sentinel_options)
                self._sentinels[address] = client
            return client

    def _forget(self, address: tuple[str, int]) -> None:
        with self._lock:
            client = self._sentinels.pop(address, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        with self._lock:
            clients, self._sentinels = list(self._sentinels.values()), {}
        for client in clients:
            client.close()

    def _where(self, answers: dict[tuple[str, int], Any]) -> str:
        return ",".join(f"{host}:{port}" for host, port in answers)

    def _unsettled(
        self, answers: dict[tuple[str, int], tuple[str, int] | None], failures: list[str]
    ) -> str:
        if len(answers) < self.majority:
            why = (
                f"only {len(answers)} of {len(self.parts.sentinels)} Sentinels answered "
                f"({'; '.join(failures) or 'none failed'})"
            )
        else:
            named = sorted({f"{a[0]}:{a[1]}" for a in answers.values() if a is not None})
            why = f"the Sentinels still disagree on where it is ({', '.join(named)})"
        return (
            f"cannot find the {self.description} within {self.wait_s:g} s: {why}. A failover "
            "settles in seconds; check that a majority of the Sentinels run and that the URL "
            "names them"
        )


def _address(reply: Any) -> tuple[str, int] | None:
    if not reply:
        return None
    host, port = reply
    return (host.decode() if isinstance(host, bytes) else str(host)), int(port)


def following_connection_class(base: type) -> type:
    """``base`` (redis-py's ``Connection`` or ``SSLConnection``) made to connect only to the
    settled master, and to let go of one that became a replica.

    The class is given to the client's connection pool with a ``master_locator``: every
    (re)connection asks the locator, then checks ``ROLE``; a ``READONLY`` reply (the server was
    demoted under an open connection) drops the connection and raises ``ConnectionError``, which
    redis-py's retry answers by connecting afresh, to the new master.
    """
    import redis

    class FollowingConnection(base):  # type: ignore[misc]
        def __init__(self, *, master_locator: MasterLocator, **kwargs: Any) -> None:
            self.master_locator = master_locator
            super().__init__(**kwargs)

        def connect(self, *args: Any, **kwargs: Any) -> None:
            if getattr(self, "_sock", None) is not None:
                return
            locator = self.master_locator
            deadline = time.monotonic() + locator.wait_s
            while True:
                self.host, self.port = locator.settled_master()
                try:
                    super().connect(*args, **kwargs)
                    role = self._role()
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    # a master that died: the Sentinels name it until they agree it is down
                    # (their down-after-milliseconds) and have promoted a replica
                    self.disconnect()
                    if time.monotonic() >= deadline:
                        raise
                    log.info("the %s at %s:%s: %s", locator.description, self.host, self.port, exc)
                    time.sleep(SETTLE_POLL_S)
                    continue
                if role == "master":
                    return
                self.disconnect()
                if time.monotonic() >= deadline:
                    raise redis.ConnectionError(
                        f"the {locator.description} is at {self.host}:{self.port}, which says "
                        f"it is a {role} (ROLE), for {locator.wait_s:g} s"
                    )
                time.sleep(SETTLE_POLL_S)

        def _role(self) -> str:
            self.send_command("ROLE")
            reply = self.read_response()
            role = reply[0] if reply else b"?"
            return role.decode() if isinstance(role, bytes) else str(role)

        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().read_response(*args, **kwargs)
            except redis.ReadOnlyError:
                self.disconnect()
                raise redis.ConnectionError(
                    f"{self.host}:{self.port} is no longer the {self.master_locator.description} "
                    "(READONLY): a failover moved it"
                ) from None

    FollowingConnection.plain = base
    FollowingConnection.__name__ = FollowingConnection.__qualname__ = f"Following{base.__name__}"
    return FollowingConnection


_classes: dict[type, type] = {}


def follow_master(client: redis.Redis, locator: MasterLocator) -> None:
    """Make ``client``'s pool open every connection to the settled master (before its first)."""
    pool = client.connection_pool
    base = pool.connection_class
    if base not in _classes:
        _classes[base] = following_connection_class(base)
    pool.connection_class = _classes[base]
    pool.connection_kwargs["master_locator"] = locator


def on_current_master(client: redis.Redis, locator: MasterLocator) -> None:
    """Ask the Sentinels again; if the master moved since the client's connections were made,
    close them all, so each reconnects to the new one. Driver, before each plan; executors,
    before each read and publish."""
    before = locator.address
    now = locator.settled_master()
    if before is not None and now != before:
        client.connection_pool.disconnect()


def connection_is_on(connection: Any, address: tuple[str, int]) -> bool:
    return (str(connection.host), int(connection.port)) == address
