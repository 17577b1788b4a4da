"""Where Redis is and how to log in, and one client per process to talk to it (the URL itself:
``atlasbus.bus.redis_url``).

``RedisEndpoint`` travels to executors inside partitions, so it holds the credentials; its
``repr`` and ``description`` never show them. Clients are cached per process because Spark
reuses Python workers: opening a connection per task would cost a round trip or three each time.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import parse_qsl, unquote, unquote_plus, urlencode, urlsplit

from atlasbus.bus.redis_url import (
    CONNECT_TIMEOUT_PARAM,
    CREDENTIAL_PARAMS,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_URL,
    READ_TIMEOUT_PARAM,
    SENTINEL_SCHEMES,
    checked_url,
    hidden_value_spans,
    joined_url,
    query_credential,
    sentinel_parts,
)
from atlasbus.bus.redis_url import shown_url as shown_url  # its home before redis_url
from atlasbus.bus.sentinel import (
    MasterLocator,
    connection_is_on,
    follow_master,
    on_current_master,
)
from atlasbus.errors import ConfigurationError, RedisPermissionError, RedisUnavailableError
from atlasbus.option_names import named

if TYPE_CHECKING:
    import redis

log = logging.getLogger("atlasbus.connection")
T = TypeVar("T")


@dataclass(frozen=True)
class RedisEndpoint:
    """A Redis server, the credentials and the time limits to use on it.

    ``username``/``password`` replace the URL's user and password when given; the URL's user
    and password (``user:password@``) in turn win over its ``username``/``password`` query
    parameters, as in redis-py. The timeouts (seconds) replace the URL's
    ``socket_connect_timeout``/``socket_timeout`` when given; with neither,
    ``DEFAULT_CONNECT_TIMEOUT_S`` and ``DEFAULT_READ_TIMEOUT_S`` apply.
    """

    url: str = field(repr=False)
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    connect_timeout: float | None = field(default=None, repr=False)
    read_timeout: float | None = field(default=None, repr=False)

    @classmethod
    def from_options(
        cls,
        url: str | None,
        username: str | None,
        password: str | None,
        *,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
    ) -> RedisEndpoint:
        """Validate the URL's form (no I/O, except that TLS files must exist).

        Without ``url``, ``$REDIS_URL``, else localhost. The scheme is case-insensitive
        (``REDIS://`` is ``redis://``); everything else is checked as redis-py would read it,
        so a bad URL fails here, naming what is wrong, rather than at the first connection.
        """
        if url is not None:
            chosen, origin = url, named("url")
        elif os.environ.get("REDIS_URL"):
            chosen, origin = os.environ["REDIS_URL"], named("url from env")
        else:
            chosen, origin = DEFAULT_URL, named("url")
        return cls(
            checked_url(chosen, origin),
            username,
            password,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )

    @property
    def is_sentinel(self) -> bool:
        """The URL names Sentinels and a master (``redis+sentinel://``), not a server."""
        return urlsplit(self.url).scheme.lower() in SENTINEL_SCHEMES

    @property
    def description(self) -> str:
        """Where the server is, safe to print: ``host:port``, the socket path, or the master's
        name and its Sentinels."""
        parts = urlsplit(self.url)
        if self.is_sentinel:
            named = sentinel_parts(self.url)
            where = ",".join(f"{host}:{port}" for host, port in named.sentinels)
            tls = " (TLS)" if parts.scheme.lower() == "rediss+sentinel" else ""
            return f"master {named.master_name!r} of the Sentinels at {where}{tls}"
        if parts.scheme.lower() == "unix":
            return f"unix socket {parts.path}"
        tls = " (TLS)" if parts.scheme.lower() == "rediss" else ""
        where = f"{parts.hostname or 'localhost'}:{parts.port or 6379}{tls}"
        node = getattr(_routed, "node", None)
        if node is not None and self.known_cluster:  # in raw_connection: name the key's node
            return f"{node}, the node of the Redis Cluster at {where} that owns the key"
        return where

    @property
    def effective_username(self) -> str | None:
        """The user the client logs in as: option ``username``, else the URL's user, else its
        ``username`` query parameter, else none."""
        if self.username is not None:
            return self.username
        user = urlsplit(self.url).username
        return unquote(user) if user else query_credential(self.url, "username")

    def _effective_password(self) -> str | None:
        """The password the client logs in with: option ``password``, else the URL's password,
        else its ``password`` query parameter, else none. Not a property: never shown."""
        if self.password is not None:
            return self.password
        password = urlsplit(self.url).password
        return unquote(password) if password else query_credential(self.url, "password")

    @property
    def user_description(self) -> str:
        user = self.effective_username
        return f"user {user!r}" if user else "the default user"

    @property
    def acl_user(self) -> str:
        """The user's name as ``ACL SETUSER`` wants it."""
        return self.effective_username or "default"

    @property
    def database(self) -> int:
        """The database index the URL selects (``?db=`` wins over the path, as in redis-py)."""
        if self.is_sentinel:
            return sentinel_parts(self.url).database
        parts = urlsplit(self.url)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        if "db" in query:
            return int(query["db"])
        path = parts.path.strip("/")
        return int(path) if parts.scheme.lower() != "unix" and path else 0

    @property
    def connect_timeout_s(self) -> float:
        return self._timeout(self.connect_timeout, CONNECT_TIMEOUT_PARAM, DEFAULT_CONNECT_TIMEOUT_S)

    @property
    def read_timeout_s(self) -> float:
        return self._timeout(self.read_timeout, READ_TIMEOUT_PARAM, DEFAULT_READ_TIMEOUT_S)

    def _timeout(self, given: float | None, param: str, default: float) -> float:
        if given is not None:
            return given
        query = dict(parse_qsl(urlsplit(self.url).query, keep_blank_values=True))
        return float(query[param]) if param in query else default

    def __repr__(self) -> str:
        return f"RedisEndpoint({self.description})"

    @property
    def is_cluster(self) -> bool:
        """The URL's server runs in cluster mode (asks it, once per process)."""
        return self.known_cluster or is_cluster_client(self.client())

    @property
    def known_cluster(self) -> bool:
        """Whether this process found the URL's server in cluster mode (never connects)."""
        return self._key() in _cluster_keys

    def client(self) -> redis.Redis:
        """This process's client for the endpoint (created on first use, then reused).

        The connect and its PING run outside the lock, so one slow server does not hold up
        threads that use another; if two threads connect at once, the first one cached wins.
        """
        key = self._key()
        with _clients_lock:
            existing = _clients.get(key)
        if existing is None:
            created = self._connect()
            with _clients_lock:
                existing = _clients.setdefault(key, created)
            if existing is not created:
                created.close()
        elif self.is_sentinel:  # a failover since the last use moves every connection
            with translate_errors(self):
                on_current_master(
                    existing, existing.connection_pool.connection_kwargs["master_locator"]
                )
        return existing

    def master_moved_from(self, connection: Any) -> bool:
        """Whether the Sentinels now name another master than the one ``connection`` is on
        (False for a URL naming one server)."""
        if not self.is_sentinel:
            return False
        locator = self.client().connection_pool.connection_kwargs["master_locator"]
        with translate_errors(self):
            return not connection_is_on(connection, locator.settled_master())

    def _key(self) -> tuple[object, ...]:
        return (self.url, self.username, self.password, self.connect_timeout, self.read_timeout)

    def _connect(self) -> redis.Redis:
        """A client whose credentials and timeouts are ours, not what the URL says.

        redis-py's ``from_url`` lets the URL's user, password and query parameters win over
        keyword arguments, so they (and the ``username``/``password`` query parameters, which
        redis-py would read too) are taken out of the URL and passed explicitly. Timeouts are
        not retried (a retry would multiply the documented bound); a dropped connection is.
        """
        import redis

        parts = urlsplit(self.url)
        netloc = parts.netloc.rpartition("@")[2]
        query = [
            (name, value)
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
            if name not in (CONNECT_TIMEOUT_PARAM, READ_TIMEOUT_PARAM, *CREDENTIAL_PARAMS)
        ]
        locator = None
        scheme, path = parts.scheme.lower(), parts.path
        if self.is_sentinel:
            locator = self._master_locator(query)
            with translate_errors(self):
                host, port = locator.settled_master()
            scheme = scheme.removesuffix("+sentinel")
            netloc, path = f"[{host}]:{port}" if ":" in host else f"{host}:{port}", "/0"
            query = [(n, v) for n, v in query if not n.startswith("sentinel_") and n != "db"]
            query.append(("db", str(self.database)))
        bare_url = joined_url(scheme, netloc, path, urlencode(query), parts.fragment)
        client = redis.Redis.from_url(
            bare_url,
            username=self.effective_username,
            password=self._effective_password(),
            socket_connect_timeout=self.connect_timeout_s,
            socket_timeout=self.read_timeout_s,
            health_check_interval=30,
            retry=_retry(),
            **_library_identity(),
        )
        if locator is not None:
            follow_master(client, locator)
        with translate_errors(self):
            mode = _server_mode(client)
            if mode == "cluster":
                # what redis-py's cluster client asks first; refused, its error would read
                # "Cluster mode is not enabled on this node": name the missing ACL rule instead
                cast(Any, client).execute_command("CLUSTER", "SLOTS")
                client.close()
                cluster = self._cluster_client(bare_url)
                _cluster_keys.add(self._key())
                # redis-py's RedisCluster answers the same commands; callers check
                # is_cluster_client where routing matters
                return cast("redis.Redis", cluster)
            if mode not in (None, "standalone"):
                client.close()
                raise ConfigurationError(_unsupported_mode(self, mode))
            client.ping()  # redis-py's health checks PING later: a user without +ping fails now
        return client

    def _cluster_client(self, bare_url: str) -> Any:
        """redis-py's cluster client, seeded with the URL's node: it reads the slot map from it
        and routes each key to the master that owns its slot (``atlasbus.bus.cluster``)."""
        from redis.cluster import RedisCluster

        if self.database != 0:
            raise ConfigurationError(_cluster_database_message(self))
        identity = _library_identity()
        with translate_errors(self):
            client = RedisCluster.from_url(
                bare_url,
                username=self.effective_username,
                password=self._effective_password(),
                socket_connect_timeout=self.connect_timeout_s,
                socket_timeout=self.read_timeout_s,
                **identity,
            )
            client.ping(target_nodes=RedisCluster.PRIMARIES)
        return client

    def _master_locator(self, query: list[tuple[str, str]]) -> MasterLocator:
        """Who to ask where the master is: the URL's Sentinels, logged in to with its
        ``sentinel_username``/``sentinel_password``, over TLS for ``rediss+sentinel://``."""
        import redis

        scheme = "rediss" if self.url.lower().startswith("rediss+") else "redis"
        tls = urlencode([(n, v) for n, v in query if n.startswith("ssl_")])
        limits = {
            "username": query_credential(self.url, "sentinel_username"),
            "password": query_credential(self.url, "sentinel_password"),
            "socket_connect_timeout": self.connect_timeout_s,
            "socket_timeout": self.connect_timeout_s,
        }
        if scheme == "rediss":  # redis-py reads the TLS parameters from a URL: let it
            parsed = redis.ConnectionPool.from_url(f"rediss://localhost?{tls}").connection_kwargs
            limits.update({k: v for k, v in parsed.items() if k.startswith("ssl_")}, ssl=True)
        return MasterLocator(sentinel_parts(self.url), limits, wait_s=self.read_timeout_s)


def is_cluster_client(client: Any) -> bool:
    """Whether ``client`` is redis-py's cluster client (the URL named a cluster node)."""
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def _server_mode(client: redis.Redis) -> str | None:
    """What the server runs as (HELLO's ``mode``: standalone, cluster or sentinel); None when
    it does not say (a server without HELLO, renamed or older than 6.0).

    A RESP3 connection (redis-py 7+'s default) has the reply to the HELLO it opened with; a
    RESP2 one asks, in the protocol it speaks, which changes nothing.
    """
    import redis

    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        reply = connection.handshake_metadata
        if reply is None:
            connection.send_command("HELLO", connection.protocol or 2)
            reply = connection.read_response()
    except redis.ResponseError:  # an unknown (renamed) command: the reply was read whole
        reply = None
    except BaseException:
        connection.disconnect()  # type: ignore[no-untyped-call]
        raise
    finally:
        pool.release(connection)
    if reply is None:
        return None
    # a map under RESP3; a flat list of names and values under RESP2
    pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=False)
    fields: dict[Any, Any] = dict(pairs)
    mode = fields.get(b"mode", fields.get("mode"))
    return mode.decode(errors="replace") if isinstance(mode, bytes) else mode


def _unsupported_mode(endpoint: RedisEndpoint, mode: str) -> str:
    """Why a server in cluster or sentinel mode is refused, and where to point instead."""
    if mode == "cluster":
        return _cluster_database_message(endpoint)
    if mode == "sentinel":
        return (
            f"Redis at {endpoint.description} is a Sentinel, which holds no streams: name "
            f"the Sentinels and the master they watch in {named('url or env')}, "
            "redis+sentinel://sentinel1:26379,sentinel2:26379/<master-name> (SENTINEL MASTERS "
            "lists the names), so atlasbus follows the master across failovers"
        )
    return (
        f"Redis at {endpoint.description} runs in {mode!r} mode; atlasbus reads and writes a "
        f"standalone Redis: point {named('url or env')} at one"
    )


def _cluster_database_message(endpoint: RedisEndpoint) -> str:
    return (
        f"{named('url')} selects database {endpoint.database}, but Redis at "
        f"{endpoint.description} runs in cluster mode, which has database 0 only: end the "
        "URL with /0 (or no database)"
    )


def _retry() -> Any:
    """Retry a dropped connection 3 times (one lost mid-command); never a timeout or a refusal
    (a connection refused, a wrong password, a TLS handshake refused).

    A retried timeout would multiply the documented bound; a retried refusal or wrong password
    only makes the user wait (a wrong port took 7-12 s to fail): nothing listens there, or the
    server said no (redis-py's ``AuthenticationError`` is a ``ConnectionError``). A query whose
    Redis is restarting fails with the error and resumes from its checkpoint.
    """
    import redis
    from redis.backoff import EqualJitterBackoff  # in every redis-py pyproject allows
    from redis.retry import Retry

    class ConnectionRetry(Retry):
        def call_with_retry(  # type: ignore[no-untyped-def]
            self, do, fail, is_retryable=None, with_failure_count=False
        ):
            def retryable(error: Exception) -> bool:
                if (
                    isinstance(error, redis.AuthenticationError)
                    or _tls_refusal(error)
                    or _connection_refused(error)
                ):
                    return False
                return is_retryable is None or bool(is_retryable(error))

            return super().call_with_retry(do, fail, retryable, with_failure_count)

    backoff = EqualJitterBackoff(cap=5, base=0.5)
    if "is_retryable" not in inspect.signature(Retry.call_with_retry).parameters:
        # redis-py 6.0 cannot be told what not to retry: a wrong password is tried 3 times
        return Retry(backoff, 3, supported_errors=(redis.ConnectionError,))
    return ConnectionRetry(backoff, 3, supported_errors=(redis.ConnectionError,))


def _library_identity() -> dict[str, Any]:
    """How atlasbus's connections name themselves to Redis: ``redis-py(atlasbus_v0.1.0)``.

    Redis 7.2+ shows it as ``lib-name`` in CLIENT LIST, so the bus's operators can tell
    atlasbus's connections from other clients'. Given explicitly, redis-py also need not look
    its own version up in the installed packages' metadata for every client. In a Spark Python
    process that lookup reads the directory of pyspark.zip (first on ``sys.path``): about
    60 ms of each query's runner and of each new worker.
    """
    import redis

    from atlasbus.version import __version__

    if "driver_info" not in inspect.signature(redis.Redis.__init__).parameters:
        # redis-py 6.x looks its version up once, at import; it takes name and version as text
        return {"lib_name": f"redis-py(atlasbus_v{__version__})", "lib_version": redis.__version__}
    from redis.driver_info import DriverInfo

    info = DriverInfo(lib_version=redis.__version__).add_upstream_driver("atlasbus", __version__)
    return {"driver_info": info}


def _connection_refused(error: BaseException) -> bool:
    """The connection was refused (nothing listens at the address): redis-py raises its
    ``ConnectionError`` while handling the socket's ``ConnectionRefusedError``."""
    seen: BaseException | None = error
    for _ in range(5):  # the chain is short; never loop on a cycle
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _tls_refusal(error: Exception) -> bool:
    """A TLS handshake the server or the client refused: retrying cannot change the answer."""
    text = str(error)
    return any(
        sign in text for sign in ("SSL", "certificate", "EOF occurred in violation of protocol")
    )


_clients: dict[tuple[object, ...], redis.Redis] = {}
_clients_lock = threading.Lock()
_cluster_keys: set[tuple[object, ...]] = set()  # endpoints found to be clusters
_routed = threading.local()  # .node: the cluster node of this thread's raw connection


def forget_clients() -> None:
    """Drop cached clients (tests that restart a server use this)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        _close(client)


def _close(client: redis.Redis) -> None:
    """Close the client and, for a Sentinel URL, its connections to the Sentinels."""
    pool = getattr(client, "connection_pool", None)  # the cluster client has one per node
    locator = pool.connection_kwargs.get("master_locator") if pool is not None else None
    if locator is not None:
        locator.close()
    client.close()


@contextmanager
def translate_errors(endpoint: RedisEndpoint, *, key_pattern: str | None = None) -> Iterator[None]:
    """Turn redis-py's connection, timeout, auth, ACL, replica and protocol errors into atlasbus
    errors.

    The message names host and port, the user and what to do, never the password. A connection
    error or a timeout also drops the process's cached client, so the next use connects
    afresh. ``key_pattern`` (``{streamPrefix}:*``) is the ACL key rule a key refusal suggests.
    """
    import redis

    try:
        yield
    except redis.TimeoutError as exc:
        _forget(endpoint)
        raise RedisUnavailableError(timeout_message(endpoint, str(exc))) from None
    except redis.AuthenticationError as exc:
        raise RedisUnavailableError(_refused(endpoint, str(exc))) from None
    except redis.ResponseError as exc:
        text = str(exc)
        if isinstance(exc, redis.exceptions.NoPermissionError) or text.startswith("NOPERM"):
            raise RedisPermissionError(_no_permission(endpoint, text, key_pattern)) from None
        if text.startswith(("WRONGPASS", "NOAUTH", "invalid username-password")):
            raise RedisUnavailableError(_refused(endpoint, text)) from None
        if isinstance(exc, redis.exceptions.ReadOnlyError):
            raise RedisUnavailableError(
                f"Redis at {endpoint.description} is a read-only replica ({text}): point "
                f"{named('url or env')} at the primary"
            ) from None
        if text.startswith("CLUSTERDOWN"):
            _forget(endpoint)
            raise RedisUnavailableError(
                f"Redis at {endpoint.description} says the cluster is down ({text}): a master "
                "that failed has no replica to take over its slots. Bring it back (the query "
                "resumes from its checkpoint); CLUSTER NODES lists the failed node"
            ) from None
        if "SELECT is not allowed in cluster mode" in text:  # redis-py selects before HELLO
            _forget(endpoint)
            raise ConfigurationError(_unsupported_mode(endpoint, "cluster")) from None
        if "DB index is out of range" in text:
            _forget(endpoint)
            raise ConfigurationError(
                f"{named('url')} selects database {endpoint.database}, which Redis at "
                f"{endpoint.description} does not have (DB index is out of range): use an index "
                "below the server's 'databases' setting (16 by default), e.g. /0"
            ) from None
        raise
    except redis.exceptions.RedisClusterException as exc:  # no node of the slot map answers
        detail = scrubbed(str(exc), endpoint).rstrip(".")
        raise RedisUnavailableError(
            f"cannot reach the Redis Cluster at {endpoint.description}: {detail}. Check that its "
            f"nodes are running and that {named('url or env')} names one of them."
        ) from None
    except redis.exceptions.InvalidResponse as exc:
        _forget(endpoint)
        detail = scrubbed(str(exc), endpoint).rstrip(".")
        raise RedisUnavailableError(
            f"what answers at {endpoint.description} does not speak Redis's protocol ({detail}): "
            f"check that {named('url or env')} points to a Redis server, with rediss:// "
            "if it serves TLS"
        ) from None
    except redis.ConnectionError as exc:
        _forget(endpoint)
        detail = scrubbed(str(exc), endpoint).rstrip(".")
        if _handshake_refused_without_client_certificate(endpoint, detail):
            raise RedisUnavailableError(
                f"cannot reach Redis at {endpoint.description}: {detail}. The server ended the "
                "TLS handshake: if it requires a client certificate (tls-auth-clients), add "
                f"ssl_certfile and ssl_keyfile to {named('url')}."
            ) from None
        raise RedisUnavailableError(
            f"cannot reach Redis at {endpoint.description}: {detail}. Check that "
            f"the server is running and that {named('url or env')} points to it."
        ) from None


def _handshake_refused_without_client_certificate(endpoint: RedisEndpoint, detail: str) -> bool:
    """A TLS server that requires client certificates drops a client that sends none."""
    if not endpoint.url.lower().startswith("rediss://") or "ssl_certfile" in endpoint.url:
        return False
    text = detail.lower()
    return any(
        sign in text
        for sign in ("eof occurred in violation of protocol", "certificate required", "reset by")
    )


def timeout_message(endpoint: RedisEndpoint, detail: str) -> str:
    """One wording for a server that accepted the connection (or not) but did not answer."""
    if "connect" in detail.lower() and endpoint.url.lower().startswith("rediss://"):
        return (
            f"Redis at {endpoint.description} did not complete the connection: TCP connect within "
            f"{endpoint.connect_timeout_s:g} s, then the TLS handshake within "
            f"{endpoint.read_timeout_s:g} s. If that port serves plain-text Redis, use redis:// "
            f"instead of rediss://; the limits are the URL parameters {CONNECT_TIMEOUT_PARAM} "
            f"and {READ_TIMEOUT_PARAM} (seconds, in {named('url')})."
        )
    if "connect" in detail.lower():
        limit, what = endpoint.connect_timeout_s, "connect"
        names = f"the URL parameter {CONNECT_TIMEOUT_PARAM} (seconds, in {named('url')})"
    else:
        limit, what = endpoint.read_timeout_s, "answer"
        names = f"the URL parameter {READ_TIMEOUT_PARAM} (seconds, in {named('url')})"
    return (
        f"Redis at {endpoint.description} did not {what} within {limit:g} s. Check that a "
        "Redis server (not another service) listens there and is not overloaded; the limit "
        f"is {names}."
    )


def _refused(endpoint: RedisEndpoint, text: str) -> str:
    if "must be called with the client already authenticated" in text:
        text = "Authentication required"  # the server's NOAUTH reply to redis-py's HELLO
    detail = scrubbed(text, endpoint).split(".")[0]
    return (
        f"Redis at {endpoint.description} refused {endpoint.user_description}: {detail}. "
        f"Check {named('credentials')}."
    )


_COMMAND = re.compile(r"run the '([^']+)' command")


def _no_permission(endpoint: RedisEndpoint, text: str, key_pattern: str | None) -> str:
    user = endpoint.acl_user
    command = _COMMAND.search(text)
    if command is not None:
        name = command.group(1).lower()
        return (
            f"Redis at {endpoint.description} refused {endpoint.user_description} the command "
            f"'{name}': add it to the user's ACL (ACL SETUSER {user} +{name}), see "
            "docs/operations.md"
        )
    if "key" in text.lower():
        pattern = key_pattern or "{streamPrefix}:*"
        return (
            f"Redis at {endpoint.description} refused {endpoint.user_description} access to a "
            f"key: add the stream prefix's keys to the user's ACL (ACL SETUSER {user} "
            f"~{pattern}), see docs/operations.md"
        )
    detail = scrubbed(text, endpoint).removeprefix("NOPERM").strip().rstrip(".")
    return (
        f"Redis at {endpoint.description} refused {endpoint.user_description}: {detail}. "
        f"Grant it in the user's ACL (ACL SETUSER {user} ...), see docs/operations.md"
    )


# Times an idempotent step is tried on a Sentinel URL's master when its connection drops (a
# failover closes every client's connection, on the old master and the new).
FAILOVER_ATTEMPTS = 4


def across_failovers(endpoint: RedisEndpoint, step: Callable[[], T]) -> T:
    """Run ``step``; for a Sentinel URL, again on the settled master when the connection to the
    old one dropped or it was demoted. Only for steps that may run twice (reads, idempotent
    writes). A URL naming one server fails at once, as before."""
    for attempt in range(FAILOVER_ATTEMPTS):
        try:
            return step()
        except RedisUnavailableError:
            if endpoint.is_sentinel and attempt < FAILOVER_ATTEMPTS - 1:
                log.info(
                    "the connection to the %s dropped: asking the Sentinels", endpoint.description
                )
                continue
            if not endpoint.known_cluster:
                raise
            return _across_cluster_failover(endpoint, step)
    raise AssertionError("unreachable")


def _across_cluster_failover(endpoint: RedisEndpoint, step: Callable[[], T]) -> T:
    """Run ``step`` again while a cluster replaces a failed master (its replica is promoted
    once the other masters agree it failed: ``cluster-node-timeout`` and an election), up to
    the URL's ``socket_timeout``; then the node's error stands."""
    import time

    from atlasbus.bus.slot_map import FAILOVER_POLL_S, refresh_slot_map

    deadline = time.monotonic() + endpoint.read_timeout_s
    while True:
        time.sleep(FAILOVER_POLL_S)
        try:
            refresh_slot_map(endpoint.client())
            return step()
        except RedisUnavailableError:
            if time.monotonic() > deadline:
                raise
            log.info(
                "a node of the cluster at %s did not answer: asking again", endpoint.description
            )


@contextmanager
def raw_connection(endpoint: RedisEndpoint, *, key: str | None = None) -> Iterator[Any]:
    """Borrow one pooled connection of the process's client for raw commands; executor or driver.

    Raw use (``send_command``/``read_response``) skips redis-py's reply parsing. A connection
    left with a reply unread (an error, or a reader stopped early) is closed, never handed to
    the next user. On a cluster the connection is to the master that owns ``key``'s slot (as
    the client's slot map says: a reply of MOVED or ASK means it moved).
    """
    client: Any = endpoint.client()
    node = None
    if is_cluster_client(client):
        if key is None:
            raise ValueError("a raw connection to a Redis Cluster needs the key it is for")
        with translate_errors(endpoint):
            node = client.get_node_from_key(key)
            pool = client.get_redis_connection(node).connection_pool
    else:
        pool = client.connection_pool
    with on_node(node.name if node is not None else None), translate_errors(endpoint):
        connection = pool.get_connection()
    clean = False
    try:
        yield connection
        clean = True
    finally:
        if not clean:
            connection.disconnect()
        pool.release(connection)


@contextmanager
def on_node(node: str | None) -> Iterator[None]:
    """Within the block, a cluster endpoint's ``description`` (and so every error
    ``translate_errors`` raises) names ``node`` (``host:port``), the node the block talks to."""
    outer = getattr(_routed, "node", None)
    _routed.node = node
    try:
        yield
    finally:
        _routed.node = outer


def node_of(endpoint: RedisEndpoint, key: str) -> str | None:
    """``host:port`` of the cluster node that owns ``key`` (None off a cluster)."""
    client: Any = endpoint.client()
    return client.get_node_from_key(key).name if is_cluster_client(client) else None


def _forget(endpoint: RedisEndpoint) -> None:
    """Drop the process's client, so the next use connects afresh; a cluster's client is kept
    (its other nodes still answer) and reads the slot map again instead."""
    if endpoint.known_cluster:
        from atlasbus.bus.slot_map import refresh_slot_map

        with _clients_lock:
            client = _clients.get(endpoint._key())
        if client is not None:
            with suppress(Exception):  # the node's own error is the one to report
                refresh_slot_map(client)
        return
    with _clients_lock:
        client = _clients.pop(endpoint._key(), None)
    if client is not None:
        _close(client)


def scrubbed(message: str, endpoint: RedisEndpoint) -> str:
    """``message`` with every password the endpoint holds (option, URL, query) as ``***``."""
    url_password = urlsplit(endpoint.url).password
    secrets = {endpoint.password, url_password, unquote(url_password) if url_password else None}
    for start, end in hidden_value_spans(endpoint.url):
        value = endpoint.url[start:end]
        secrets.update((value, unquote(value), unquote_plus(value)))
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):  # longest first
        message = message.replace(secret, "***")
    return message
