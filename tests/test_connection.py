"""One client per process, clear connection errors, pooled raw connections (atlasbus.bus.connection).

Against real redis-servers: the session's, and servers of this module's own where a test needs
a password or a server that goes away.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import atlasbus
from atlasbus.bus.connection import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_READ_TIMEOUT_S,
    RedisEndpoint,
    forget_clients,
    raw_connection,
    translate_errors,
)
from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.errors import ConfigurationError, RedisPermissionError, RedisUnavailableError
from atlasbus.publishing.publisher import delete_markers
from atlasbus.sandbox.redis_server import RedisServer, free_port
from helpers import redis_major

PASSWORD = "s3cret-conn-pw"
CHECK_URL = "Check that the server is running and that option 'url' (or $REDIS_URL) points to it."
CHECK_CREDENTIALS = "Check the 'username' and 'password' options (or the credentials in 'url')."


@pytest.fixture
def fresh_clients() -> Iterator[None]:
    """No cached clients before or after the test (other tests reconnect on first use)."""
    forget_clients()
    yield
    forget_clients()


@pytest.fixture(scope="module")
def locked_server() -> Iterator[RedisServer]:
    """A redis-server of the module's own that wants a password."""
    with RedisServer() as server:
        with redis.Redis(port=server.port) as admin:
            admin.config_set("requirepass", PASSWORD)
        yield server


def client_id(connection: Any) -> int:
    connection.send_command("CLIENT", "ID")
    return int(connection.read_response())


def host(server: RedisServer) -> str:
    return f"127.0.0.1:{server.port}"


# --- one client per process ----------------------------------------------------------------------


@pytest.mark.usefixtures("fresh_clients")
def test_one_client_per_endpoint_per_process_and_a_new_one_after_forget_clients(
    redis_url: str,
) -> None:
    endpoint = RedisEndpoint(redis_url)
    client = endpoint.client()
    assert endpoint.client() is client
    assert RedisEndpoint(redis_url).client() is client  # an equal endpoint (an unpickled copy)
    other_db = RedisEndpoint(redis_url.rsplit("/", 1)[0] + "/1").client()
    assert other_db is not client
    forget_clients()
    again = endpoint.client()
    assert again is not client and again.ping() is True


@pytest.mark.usefixtures("fresh_clients")
def test_connections_name_atlasbus_and_never_look_up_redis_pys_version(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CLIENT SETINFO names atlasbus (Redis 7.2+ shows it in CLIENT LIST), and redis-py is told
    its version: looking it up in the packages' metadata read pyspark.zip's directory in every
    Spark Python process, about 60 ms of each query's start."""
    lookups: list[str] = []
    real_version = importlib.metadata.version

    def counted(name: str) -> str:
        lookups.append(name)
        return real_version(name)

    monkeypatch.setattr(importlib.metadata, "version", counted)
    client = RedisEndpoint(redis_url).client()
    connection = client.connection_pool.get_connection()
    try:
        assert client.ping() is True
        kwargs = client.connection_pool.connection_kwargs
        if "driver_info" in kwargs:  # redis-py 7.1+
            info = kwargs["driver_info"]
            assert (info.formatted_name, info.lib_version) == (
                f"redis-py(atlasbus_v{atlasbus.__version__})",
                redis.__version__,
            )
        else:  # redis-py 6.x
            assert (kwargs["lib_name"], kwargs["lib_version"]) == (
                f"redis-py(atlasbus_v{atlasbus.__version__})",
                redis.__version__,
            )
    finally:
        client.connection_pool.release(connection)
    assert lookups == []


@pytest.mark.usefixtures("fresh_clients")
def test_threads_that_connect_at_once_share_the_first_client_cached(redis_url: str) -> None:
    endpoint = RedisEndpoint(redis_url)
    start = threading.Barrier(8)
    clients: list[redis.Redis] = []

    def connect() -> None:
        start.wait()
        clients.append(endpoint.client())

    threads = [threading.Thread(target=connect) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(clients) == 8 and len({id(c) for c in clients}) == 1
    assert clients[0] is endpoint.client()


@pytest.mark.usefixtures("fresh_clients")
def test_a_client_whose_server_went_away_is_dropped_and_the_next_use_reconnects() -> None:
    with RedisServer() as server:
        endpoint = RedisEndpoint(server.url)
        client = endpoint.client()
        server.kill()  # as a crash between two tasks of the same Python worker
        with pytest.raises(RedisUnavailableError) as caught, translate_errors(endpoint):
            client.ping()
        message = str(caught.value)
        assert message.startswith(f"cannot reach Redis at {host(server)}: ")
        assert message.endswith(CHECK_URL)
        server.start()  # back on the same port
        again = endpoint.client()
        assert again is not client and again.ping() is True


# --- error wording -------------------------------------------------------------------------------


@pytest.mark.usefixtures("fresh_clients")
def test_a_refused_port_is_named_by_host_and_port_without_the_password() -> None:
    port = free_port()  # nothing listens there any more
    endpoint = RedisEndpoint.from_options(f"redis://:{PASSWORD}@127.0.0.1:{port}/0", None, None)
    with pytest.raises(RedisUnavailableError) as caught:
        endpoint.client()
    message = str(caught.value)
    assert message.startswith(f"cannot reach Redis at 127.0.0.1:{port}: Error 111 connecting to ")
    assert "Connection refused" in message and ".." not in message
    assert message.endswith(CHECK_URL)
    assert PASSWORD not in message and PASSWORD not in repr(endpoint)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize(
    ("url_credentials", "username", "password", "refused"),
    [
        ("", None, "wrong-pw", "the default user: invalid username-password pair"),
        (":wrong-pw@", None, None, "the default user: invalid username-password pair"),
        ("bob:wrong-pw@", None, None, "user 'bob': invalid username-password pair"),
        ("", "bob", "wrong-pw", "user 'bob': invalid username-password pair"),
        ("", None, None, "the default user: Authentication required"),
    ],
    ids=["password-option", "password-in-url", "user-in-url", "user-option", "no-password"],
)
@pytest.mark.usefixtures("fresh_clients")
def test_wrong_credentials_are_refused_naming_the_user_never_the_password(
    locked_server: RedisServer,
    url_credentials: str,
    username: str | None,
    password: str | None,
    refused: str,
) -> None:
    url = f"redis://{url_credentials}127.0.0.1:{locked_server.port}/0"
    endpoint = RedisEndpoint.from_options(url, username, password)
    with pytest.raises(RedisUnavailableError) as caught:
        endpoint.client()
    message = str(caught.value)
    assert message.startswith(f"Redis at {host(locked_server)} refused {refused}")
    assert message.endswith(f". {CHECK_CREDENTIALS}")
    assert "wrong-pw" not in message and PASSWORD not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert RedisEndpoint.from_options(locked_server.url, None, PASSWORD).client().ping() is True


def test_other_redis_errors_pass_through_unchanged(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    r.set(f"{prefix}:s", "x")
    endpoint = RedisEndpoint(redis_url)
    with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"), translate_errors(endpoint):
        endpoint.client().xlen(f"{prefix}:s")


# --- raw connections -----------------------------------------------------------------------------


@pytest.mark.usefixtures("fresh_clients")
def test_a_raw_connection_goes_back_to_the_pool_and_is_reused(redis_url: str) -> None:
    endpoint = RedisEndpoint(redis_url)
    pool = endpoint.client().connection_pool
    with raw_connection(endpoint) as connection:
        assert connection in pool._in_use_connections
        first = client_id(connection)
    assert connection not in pool._in_use_connections
    with raw_connection(endpoint) as again:
        assert client_id(again) == first  # the same open connection


def _read_one_entry(endpoint: RedisEndpoint, stream: str) -> Iterator[Any]:
    """Pipelines two pages; a caller that stops after the first leaves the second unread."""
    with raw_connection(endpoint) as connection:
        connection.send_command("XRANGE", stream, "-", "+", "COUNT", 1)
        connection.send_command("XRANGE", stream, "-", "+")
        yield connection.read_response()
        yield connection.read_response()


@pytest.mark.parametrize("how", ["error", "generator-closed"])
@pytest.mark.usefixtures("fresh_clients")
def test_a_raw_connection_left_mid_reply_is_closed_not_handed_on(
    redis_url: str, r: redis.Redis, prefix: str, how: str
) -> None:
    stream = f"{prefix}:t"
    for n in range(3):
        r.xadd(stream, {"n": str(n)})
    endpoint = RedisEndpoint(redis_url)
    pool = endpoint.client().connection_pool
    if how == "error":
        with pytest.raises(RuntimeError, match="stopped"), raw_connection(endpoint) as connection:
            first = client_id(connection)
            connection.send_command("XRANGE", stream, "-", "+")  # its reply is never read
            raise RuntimeError("stopped")
    else:
        with raw_connection(endpoint) as connection:
            first = client_id(connection)
        reader = _read_one_entry(endpoint, stream)
        assert len(next(reader)) == 1
        reader.close()
    assert connection not in pool._in_use_connections
    with raw_connection(endpoint) as again:
        assert client_id(again) != first  # a new connection: no stale reply waits on it
        again.send_command("PING")
        assert again.read_response() in (b"PONG", "PONG")


# --- credentials: the options win over the URL's ------------------------------------------------

READER_PW = "reader-pw-7x"
NOBODY_PW = "nobody-pw-3q"


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    """A redis-server with ACL users: ``reader`` (all commands), ``nobody``, ``limited``."""
    with RedisServer() as server:
        with redis.Redis(port=server.port) as admin:
            admin.execute_command("ACL", "SETUSER", "reader", "on", f">{READER_PW}", "~*", "+@all")
            admin.execute_command("ACL", "SETUSER", "nobody", "on", f">{NOBODY_PW}", "+ping")
            admin.execute_command(
                "ACL", "SETUSER", "limited", "on", f">{READER_PW}", "~atlas_bus:*",
                "+ping", "+hello", "+auth", "+client", "+xrange", "+xinfo|groups",
            )  # fmt: skip
        yield server


def whoami(endpoint: RedisEndpoint) -> str:
    reply = endpoint.client().execute_command("ACL", "WHOAMI")
    return reply.decode() if isinstance(reply, bytes) else str(reply)


@pytest.mark.usefixtures("fresh_clients")
def test_username_and_password_options_replace_the_urls_credentials(
    acl_server: RedisServer,
) -> None:
    url = f"redis://nobody:{NOBODY_PW}@127.0.0.1:{acl_server.port}/0"
    endpoint = RedisEndpoint.from_options(url, "reader", READER_PW)
    assert whoami(endpoint) == "reader"
    # the password option alone replaces the URL's password, for the URL's user
    url = f"redis://reader:wrong-pw@127.0.0.1:{acl_server.port}/0"
    assert whoami(RedisEndpoint.from_options(url, None, READER_PW)) == "reader"


@pytest.mark.parametrize(
    ("url_credentials", "username", "password", "refused"),
    [
        (f"reader:{READER_PW}@", None, "wrong-pw", "user 'reader'"),
        (f"nobody:{NOBODY_PW}@", "reader", "wrong-pw", "user 'reader'"),
        (f"nobody:{NOBODY_PW}@", "ghost", READER_PW, "user 'ghost'"),
    ],
    ids=["url-right-password-option-wrong", "url-nobody-options-reader", "url-nobody-option-user"],
)
@pytest.mark.usefixtures("fresh_clients")
def test_wrong_credential_options_are_refused_naming_the_user_actually_tried(
    acl_server: RedisServer,
    url_credentials: str,
    username: str | None,
    password: str | None,
    refused: str,
) -> None:
    url = f"redis://{url_credentials}127.0.0.1:{acl_server.port}/0"
    endpoint = RedisEndpoint.from_options(url, username, password)
    with pytest.raises(RedisUnavailableError) as caught:
        endpoint.client()
    assert str(caught.value) == (
        f"Redis at {host(acl_server)} refused {refused}: invalid username-password pair or user "
        f"is disabled. {CHECK_CREDENTIALS}"
    )
    with redis.Redis(port=acl_server.port) as admin:
        tried = admin.acl_log(count=1)[0]
    assert tried["username"] == refused.split("'")[1]
    for secret in ("wrong-pw", READER_PW, NOBODY_PW):
        assert secret not in str(caught.value) and secret not in repr(endpoint)


# --- ACL refusals name the user, the command and the rule to add ----------------------------------


@pytest.mark.usefixtures("fresh_clients")
def test_a_refused_command_names_the_user_the_command_and_the_acl_rule(
    acl_server: RedisServer,
) -> None:
    url = f"redis://127.0.0.1:{acl_server.port}/0"
    endpoint = RedisEndpoint.from_options(url, "limited", READER_PW)
    with pytest.raises(RedisPermissionError) as caught, translate_errors(endpoint):
        endpoint.client().execute_command("XINFO", "STREAM", "atlas_bus:orders")
    admin = redis.Redis(host="127.0.0.1", port=acl_server.port)
    command = "xinfo|stream" if redis_major(admin) >= 7 else "xinfo"  # 6.2 names no subcommand
    admin.close()
    assert str(caught.value) == (
        f"Redis at {host(acl_server)} refused user 'limited' the command '{command}': add it "
        f"to the user's ACL (ACL SETUSER limited +{command}), see docs/operations.md"
    )
    assert isinstance(caught.value, RedisUnavailableError)
    assert READER_PW not in str(caught.value)


@pytest.mark.usefixtures("fresh_clients")
def test_a_refused_key_names_the_user_and_the_key_pattern_rule(acl_server: RedisServer) -> None:
    url = f"redis://limited:{READER_PW}@127.0.0.1:{acl_server.port}/0"
    endpoint = RedisEndpoint.from_options(url, None, None)
    with (
        pytest.raises(RedisPermissionError) as caught,
        translate_errors(endpoint, key_pattern="other:*"),
    ):
        endpoint.client().execute_command("XRANGE", "other:orders", "-", "+")
    assert str(caught.value) == (
        f"Redis at {host(acl_server)} refused user 'limited' access to a key: add the stream "
        "prefix's keys to the user's ACL (ACL SETUSER limited ~other:*), see docs/operations.md"
    )


@pytest.mark.usefixtures("fresh_clients")
def test_a_database_the_server_does_not_have_is_named_with_option_url(redis_url: str) -> None:
    base = redis_url.rsplit("/", 1)[0]
    endpoint = RedisEndpoint.from_options(f"{base}/99", None, None)
    with pytest.raises(ConfigurationError) as caught:
        endpoint.client()
    assert str(caught.value) == (
        f"option 'url' selects database 99, which Redis at {endpoint.description} does not have "
        "(DB index is out of range): use an index below the server's 'databases' setting (16 by "
        "default), e.g. /0"
    )


# --- bounded waits ------------------------------------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never answers (not Redis, or hung)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join(timeout=5)
    for conn in accepted:
        conn.close()
    listener.close()


def test_the_default_timeouts_are_bounded() -> None:
    endpoint = RedisEndpoint.from_options("redis://127.0.0.1:1/0", None, None)
    assert (endpoint.connect_timeout_s, endpoint.read_timeout_s) == (
        DEFAULT_CONNECT_TIMEOUT_S,
        DEFAULT_READ_TIMEOUT_S,
    )
    assert (DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S) == (5.0, 30.0)
    tuned = RedisEndpoint.from_options(
        "redis://127.0.0.1:1/0?socket_connect_timeout=2&socket_timeout=0.5", None, None
    )
    assert (tuned.connect_timeout_s, tuned.read_timeout_s) == (2.0, 0.5)


@pytest.mark.parametrize("core", ["source", "sink"])
@pytest.mark.usefixtures("fresh_clients")
def test_a_server_that_never_answers_fails_within_the_read_timeout(
    silent_server: int, core: str
) -> None:
    bound = 1.0
    endpoint = RedisEndpoint.from_options(
        f"redis://:{PASSWORD}@127.0.0.1:{silent_server}/0?socket_timeout={bound:g}", None, None
    )
    started = time.monotonic()
    with pytest.raises(RedisUnavailableError) as caught:
        if core == "source":
            StreamCatalog(endpoint).info(["atlas_bus:orders"])
        else:
            delete_markers(endpoint, ["atlas_bus:orders:marker"])
    elapsed = time.monotonic() - started
    assert elapsed < 3 * bound, f"took {elapsed:.1f} s"
    assert str(caught.value) == (
        f"Redis at 127.0.0.1:{silent_server} did not answer within 1 s. Check that a Redis "
        "server (not another service) listens there and is not overloaded; the limit is the "
        "URL parameter socket_timeout (seconds, in option 'url')."
    )
    assert PASSWORD not in str(caught.value)


@pytest.mark.usefixtures("fresh_clients")
def test_a_server_that_never_accepts_fails_within_the_connect_timeout() -> None:
    """A full accept queue: Linux drops the SYN, so the TCP connect itself hangs."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    queued = []
    for _ in range(3):
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        queued.append(filler)
    try:
        endpoint = RedisEndpoint.from_options(
            f"redis://127.0.0.1:{port}/0?socket_connect_timeout=1&socket_timeout=1", None, None
        )
        started = time.monotonic()
        with pytest.raises(RedisUnavailableError) as caught:
            endpoint.client()
        elapsed = time.monotonic() - started
    finally:
        for filler in queued:
            filler.close()
        listener.close()
    assert elapsed < 3.0, f"took {elapsed:.1f} s"
    assert str(caught.value) == (
        f"Redis at 127.0.0.1:{port} did not connect within 1 s. Check that a Redis server (not "
        "another service) listens there and is not overloaded; the limit is the URL parameter "
        "socket_connect_timeout (seconds, in option 'url')."
    )


def test_rediss_against_a_plain_text_port_says_so_within_the_read_timeout(redis_url: str) -> None:
    import time

    from atlasbus.bus.connection import RedisEndpoint
    from atlasbus.bus.stream_catalog import StreamCatalog
    from atlasbus.errors import RedisUnavailableError

    url = redis_url.replace("redis://", "rediss://") + "?socket_timeout=1"
    endpoint = RedisEndpoint.from_options(url, None, None)
    began = time.monotonic()
    with pytest.raises(RedisUnavailableError) as caught:
        StreamCatalog(endpoint).info(["x"])
    assert time.monotonic() - began < 4
    host_port = redis_url.split("//")[1].split("/")[0]
    assert str(caught.value) == (
        f"Redis at {host_port} (TLS) did not complete the connection: TCP connect within 5 s, "
        "then the TLS handshake within 1 s. If that port serves plain-text Redis, use redis:// "
        "instead of rediss://; the limits are the URL parameters socket_connect_timeout and "
        "socket_timeout (seconds, in option 'url')."
    )


@pytest.mark.parametrize("core", ["source", "sink"])
@pytest.mark.usefixtures("fresh_clients")
def test_a_refused_connection_fails_at_once_naming_host_and_port(core: str) -> None:
    """Nothing listens there: retrying cannot help, and it took 7-12 s with redis-py's retries
    (issue 58). The ceiling is generous: the machine may be loaded."""
    port = free_port()
    endpoint = RedisEndpoint.from_options(f"redis://127.0.0.1:{port}/0", None, None)
    started = time.monotonic()
    with pytest.raises(RedisUnavailableError) as caught:
        if core == "source":
            StreamCatalog(endpoint).info(["atlas_bus:orders"])
        else:
            delete_markers(endpoint, ["atlas_bus:orders:marker"])
    elapsed = time.monotonic() - started
    assert elapsed < 3.0, f"took {elapsed:.1f} s"
    assert str(caught.value).startswith(
        f"cannot reach Redis at 127.0.0.1:{port}: Error 111 connecting to 127.0.0.1:{port}. "
        "Connection refused."
    )
