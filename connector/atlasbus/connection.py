"""Where Redis is and how to log in, and one client per process to talk to it.

``RedisEndpoint`` travels to executors inside partitions, so it holds the credentials; its
``repr`` and ``description`` never show them. Clients are cached per process because Spark
reuses Python workers: opening a connection per task would cost a round trip or three each time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from atlasbus.errors import ConfigurationError, RedisUnavailableError

if TYPE_CHECKING:
    import redis

DEFAULT_URL = "redis://localhost:6379/0"
SUPPORTED_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class RedisEndpoint:
    """A Redis server and the credentials to use on it."""

    url: str = field(repr=False)
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @classmethod
    def from_options(
        cls, url: str | None, username: str | None, password: str | None
    ) -> RedisEndpoint:
        """Validate the URL's form (no I/O); default ``$REDIS_URL``, else localhost."""
        chosen = url or os.environ.get("REDIS_URL") or DEFAULT_URL
        parts = urlsplit(chosen)
        if parts.scheme not in SUPPORTED_SCHEMES:
            shown = f"{parts.scheme}://..." if parts.scheme else "a value without a scheme"
            raise ConfigurationError(
                f"option 'url' must be a Redis URL starting with redis://, rediss:// or unix://, "
                f"got {shown}"
            )
        if parts.scheme != "unix":
            try:
                _ = parts.port
            except ValueError:
                raise ConfigurationError(
                    f"option 'url' has an invalid port (host {parts.hostname!r})"
                ) from None
        return cls(chosen, username, password)

    @property
    def description(self) -> str:
        """Where the server is, safe to print: ``host:port`` or the socket path."""
        parts = urlsplit(self.url)
        if parts.scheme == "unix":
            return f"unix socket {parts.path}"
        tls = " (TLS)" if parts.scheme == "rediss" else ""
        return f"{parts.hostname or 'localhost'}:{parts.port or 6379}{tls}"

    @property
    def user_description(self) -> str:
        user = self.username or urlsplit(self.url).username
        return f"user {user!r}" if user else "the default user"

    def __repr__(self) -> str:
        return f"RedisEndpoint({self.description})"

    def client(self) -> redis.Redis:
        """This process's client for the endpoint (created on first use, then reused).

        The connect and its PING run outside the lock, so one slow server does not hold up
        threads that use another; if two threads connect at once, the first one cached wins.
        """
        key = (self.url, self.username, self.password)
        with _clients_lock:
            existing = _clients.get(key)
        if existing is not None:
            return existing
        created = self._connect()
        with _clients_lock:
            existing = _clients.setdefault(key, created)
        if existing is not created:
            created.close()
        return existing

    def _connect(self) -> redis.Redis:
        import redis

        overrides: dict[str, object] = {}
        if self.username is not None:
            overrides["username"] = self.username
        if self.password is not None:
            overrides["password"] = self.password
        client = redis.Redis.from_url(
            self.url,
            socket_connect_timeout=10,
            socket_timeout=120,
            health_check_interval=30,
            **overrides,
        )
        with translate_errors(self):
            client.ping()
        return client


_clients: dict[tuple[str, str | None, str | None], redis.Redis] = {}
_clients_lock = threading.Lock()


def forget_clients() -> None:
    """Drop cached clients (tests that restart a server use this)."""
    with _clients_lock:
        for client in _clients.values():
            client.close()
        _clients.clear()


@contextmanager
def translate_errors(endpoint: RedisEndpoint) -> Iterator[None]:
    """Turn redis-py's connection and auth errors into ``RedisUnavailableError``.

    The message names host and port and what to check, never the password. A connection
    error also drops the process's cached client, so the next use connects afresh.
    """
    import redis

    try:
        yield
    except (redis.AuthenticationError, redis.ResponseError) as exc:
        if isinstance(exc, redis.ResponseError) and not str(exc).startswith(
            ("WRONGPASS", "NOAUTH", "NOPERM")
        ):
            raise
        detail = str(exc).split(".")[0]
        raise RedisUnavailableError(
            f"Redis at {endpoint.description} refused {endpoint.user_description}: {detail}. "
            "Check the 'username' and 'password' options (or the credentials in 'url')."
        ) from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        _forget(endpoint)
        detail = _scrub(str(exc), endpoint).rstrip(".")
        raise RedisUnavailableError(
            f"cannot reach Redis at {endpoint.description}: {detail}. Check that "
            "the server is running and that option 'url' (or $REDIS_URL) points to it."
        ) from None


@contextmanager
def raw_connection(endpoint: RedisEndpoint) -> Iterator[Any]:
    """Borrow one pooled connection of the process's client for raw commands; executor or driver.

    Raw use (``send_command``/``read_response``) skips redis-py's reply parsing. A connection
    left with a reply unread (an error, or a reader stopped early) is closed, never handed to
    the next user.
    """
    client = endpoint.client()
    pool = client.connection_pool
    with translate_errors(endpoint):
        try:
            connection = pool.get_connection()
        except TypeError:  # redis-py before 5.3 wants a command name
            connection = pool.get_connection("XRANGE")
    clean = False
    try:
        yield connection
        clean = True
    finally:
        if not clean:
            connection.disconnect()  # type: ignore[no-untyped-call]
        pool.release(connection)


def _forget(endpoint: RedisEndpoint) -> None:
    with _clients_lock:
        client = _clients.pop((endpoint.url, endpoint.username, endpoint.password), None)
    if client is not None:
        client.close()


def _scrub(message: str, endpoint: RedisEndpoint) -> str:
    for secret in (endpoint.password, urlsplit(endpoint.url).password):
        if secret:
            message = message.replace(secret, "***")
    return message
