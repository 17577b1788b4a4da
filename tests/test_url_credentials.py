"""Credentials in the URL's query string: taken as redis-py takes them, and never shown.

redis-py reads ``?username=`` and ``?password=`` (the URL's ``user:password@`` winning over
them), so users write them. atlasbus takes them with one order: option ``username``/``password``,
then the URL's user part, then the query. Their values, and those of parameters atlasbus does not
know (``passwd=``, ``token=``: any may be a secret), never appear in an error, whether it comes
from the source's or the sink's options, the command line or ``atlasbus demo``. Against real
redis-servers: one with ``requirepass``, one with ACL users.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus import cli
from atlasbus.bus.connection import RedisEndpoint, forget_clients, translate_errors
from atlasbus.errors import ConfigurationError, RedisUnavailableError
from atlasbus.options.sink import parse_sink_options
from atlasbus.options.source import parse_source_options
from atlasbus.sandbox.redis_server import RedisServer

PASSWORD = "q-S3cr3t-locked-pw"
READER_PW = "q-reader-pw-5k"
NOBODY_PW = "q-nobody-pw-2m"
WRONG = "q-wr0ng-pw-9z"
CHECK_CREDENTIALS = "Check the 'username' and 'password' options (or the credentials in 'url')."


@pytest.fixture
def fresh_clients() -> Iterator[None]:
    forget_clients()
    yield
    forget_clients()


@pytest.fixture(scope="module")
def locked_server() -> Iterator[RedisServer]:
    """A redis-server that wants ``PASSWORD`` for the default user."""
    with RedisServer() as server:
        with redis.Redis(port=server.port) as admin:
            admin.config_set("requirepass", PASSWORD)
        yield server


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    """A redis-server with ACL users ``reader`` and ``nobody`` (PING and ACL WHOAMI only)."""
    with RedisServer() as server:
        with redis.Redis(port=server.port) as admin:
            admin.execute_command("ACL", "SETUSER", "reader", "on", f">{READER_PW}", "~*", "+@all")
            admin.execute_command(
                "ACL",
                "SETUSER",
                "nobody",
                "on",
                f">{NOBODY_PW}",
                "+ping",
                "+hello",
                "+client",
                "+acl|whoami",
            )
        yield server


def base(server: RedisServer) -> str:
    return f"redis://127.0.0.1:{server.port}/0"


def whoami(endpoint: RedisEndpoint) -> str:
    reply = endpoint.client().execute_command("ACL", "WHOAMI")
    return reply.decode() if isinstance(reply, bytes) else str(reply)


# --- no secret in a refused URL, wherever it is parsed ---------------------------------------------

# (url, what the error must name, the secrets it must not show). Each secret is also looked for
# percent-decoded. Before the fix every one of these showed its query secret.
LEAKY_URLS = [
    ("redis://h:6379/0?password=S3cr3t-q0&x=1", "'x'", ["S3cr3t-q0"]),
    ("redis://h:6379/0?passwd=S3cr3t-q1", "'passwd'", ["S3cr3t-q1"]),
    ("redis://h:6379/0?pwd=S3cr3t-q2", "'pwd'", ["S3cr3t-q2"]),
    ("redis://h:6379/0?db=1&token=S3cr3t-q3", "'token'", ["S3cr3t-q3"]),
    ("redis://h:6379/0?PASSWORD=S3cr3t-q4", "'PASSWORD'", ["S3cr3t-q4"]),
    ("redis://h:6379/0?Pass%77ord=S3cr%33t-q5", "'Password'", ["S3cr%33t-q5", "S3cr3t-q5"]),
    (
        "redis://:S3cr3t-u6@h:6379/0?password=S3cr3t-q6&pwd=S3cr3t-p6",
        "'pwd'",
        ["S3cr3t-u6", "S3cr3t-q6", "S3cr3t-p6"],
    ),
    # a bad value of a known parameter, or a bad path or port, next to the query's password
    ("redis://h:6379/0?password=S3cr3t-q7&db=abc", "db='abc'", ["S3cr3t-q7"]),
    ("redis://h:6379/x?pass%77ord=S3cr3t-q8", "database path '/x'", ["S3cr3t-q8"]),
    ("redis://h:0/0?password=S3cr3t-q9", "invalid port", ["S3cr3t-q9"]),
    (
        "redis://h:6379/0?password=S3cr3t-qa&ssl_password=S3cr3t-qb",
        "ssl_password, which only a TLS URL takes",
        ["S3cr3t-qa", "S3cr3t-qb"],
    ),
]
LEAKY_IDS = [url.partition("?")[2][:28] or url for url, _, _ in LEAKY_URLS]

PARSERS: dict[str, Callable[[str], Any]] = {
    "source": lambda url: parse_source_options({"topics": "a", "url": url}),
    "source with password": lambda url: parse_source_options(
        {"topics": "a", "url": url, "password": "option-pw"}
    ),
    "sink": lambda url: parse_sink_options({"topic": "a", "url": url}),
    "endpoint": lambda url: RedisEndpoint.from_options(url, None, None),
}


def assert_hidden(text: str, named: str, secrets: list[str]) -> None:
    assert named in text, text
    for secret in secrets:
        assert secret not in text, f"{secret!r} shown in: {text}"


@pytest.mark.parametrize("parser", sorted(PARSERS))
@pytest.mark.parametrize(("url", "named", "secrets"), LEAKY_URLS, ids=LEAKY_IDS)
def test_a_refused_url_names_the_parameter_never_its_secret_value(
    parser: str, url: str, named: str, secrets: list[str]
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        PARSERS[parser](url)
    assert_hidden(str(caught.value), named, secrets)


def test_the_unknown_parameter_error_names_it_and_lists_the_accepted_ones() -> None:
    with pytest.raises(ConfigurationError) as caught:
        RedisEndpoint.from_options("redis://h:6379/0?passwd=S3cr3t-e1", None, None)
    assert str(caught.value) == (
        "option 'url' has unknown query parameter 'passwd', got 'redis://h:6379/0?passwd=***'; "
        "accepted parameters: client_name, db, health_check_interval, max_connections, password, "
        "protocol, sentinel_password, sentinel_username, socket_connect_timeout, socket_keepalive, socket_timeout, ssl_ca_certs, "
        "ssl_ca_path, ssl_cert_reqs, ssl_certfile, ssl_check_hostname, ssl_keyfile, "
        "ssl_min_version, ssl_password, username"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--url"],
        ["trim", "--dry-run", "--url"],
        ["dlq", "sweep", "--table", "{tmp}/dl", "--group", "g", "--max-deliveries", "3", "--url"],
        ["dlq", "replay", "--table", "{tmp}/dl", "--url"],
    ],
    ids=["status", "trim", "dlq-sweep", "dlq-replay"],
)
@pytest.mark.parametrize(("url", "named", "secrets"), LEAKY_URLS, ids=LEAKY_IDS)
def test_the_command_line_names_the_parameter_never_its_secret_value(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    argv: list[str],
    url: str,
    named: str,
    secrets: list[str],
) -> None:
    code = cli.main([part.replace("{tmp}", str(tmp_path)) for part in argv] + [url])
    out, err = capsys.readouterr()
    assert code == 2 and "--url" in err and "Traceback" not in err, err
    assert_hidden(out + err, named, secrets)


DEMO = [sys.executable, "-m", "atlasbus.cli", "demo"]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        (f"passwd={PASSWORD}", "'passwd'"),  # refused when parsed
        (f"password={WRONG}", "refused the default user"),  # refused by the server
        (f"username=default&pass%77ord={WRONG}", "refused user 'default'"),
    ],
    ids=["unknown-parameter", "wrong-password", "wrong-password-encoded-name"],
)
def test_the_demo_names_the_fault_never_the_secret(
    locked_server: RedisServer, tmp_path: Path, query: str, named: str
) -> None:
    done = subprocess.run(
        [*DEMO, "--url", f"{base(locked_server)}?{query}", "--output", "out"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1 and done.stderr.startswith("atlasbus demo: error: "), output
    assert "Traceback" not in output
    assert_hidden(output, named, [PASSWORD, WRONG])


# --- who logs in: option, then the URL's user part, then the query -----------------------------


@pytest.mark.parametrize(
    ("url", "username", "user"),
    [
        ("redis://h/0?username=bob", None, "bob"),
        ("redis://h/0?user%6Eame=bob&password=p", None, "bob"),
        ("redis://h/0?username=&username=bob", None, "bob"),  # as redis-py: blanks left out
        ("redis://al@h/0?username=bob", None, "al"),
        ("redis://al:pw@h/0?username=bob", "cy", "cy"),
        ("redis://:pw@h/0?username=bob", None, "bob"),  # an empty user part names no user
        ("redis://h/0?password=p", None, None),
    ],
)
def test_the_user_is_the_option_else_the_urls_user_else_the_querys(
    url: str, username: str | None, user: str | None
) -> None:
    endpoint = RedisEndpoint.from_options(url, username, None)
    assert endpoint.effective_username == user
    assert endpoint.acl_user == (user or "default")
    assert endpoint.user_description == (f"user {user!r}" if user else "the default user")


@pytest.mark.parametrize(
    ("query", "url_password", "password"),
    [
        (f"password={PASSWORD}", None, None),
        (f"pass%77ord={PASSWORD}", None, None),  # a name percent-encoded, as redis-py reads it
        (f"password=&password={PASSWORD}", None, None),
        (f"password={WRONG}", None, PASSWORD),  # the option wins over the query
        (f"password={WRONG}", PASSWORD, None),  # the URL's password wins over the query
        (f"password={WRONG}", WRONG, PASSWORD),  # the option wins over both
        (f"username=default&password={PASSWORD}", None, None),
    ],
    ids=["query", "encoded-name", "blank-first", "option", "user-part", "option-over-both", "user"],
)
@pytest.mark.usefixtures("fresh_clients")
def test_the_querys_password_logs_in_unless_the_option_or_user_part_gives_one(
    locked_server: RedisServer, query: str, url_password: str | None, password: str | None
) -> None:
    user_part = f":{url_password}@" if url_password else ""
    url = f"redis://{user_part}127.0.0.1:{locked_server.port}/0?{query}"
    assert RedisEndpoint.from_options(url, None, password).client().ping() is True


@pytest.mark.parametrize(
    ("query", "url_password", "password"),
    [
        (f"password={WRONG}", None, None),
        (f"password={PASSWORD}", None, WRONG),  # the option's wrong password is what is tried
        (f"password={PASSWORD}", WRONG, None),  # so is the URL's
    ],
    ids=["query", "option", "user-part"],
)
@pytest.mark.usefixtures("fresh_clients")
def test_a_password_that_wins_over_the_querys_is_the_one_tried(
    locked_server: RedisServer, query: str, url_password: str | None, password: str | None
) -> None:
    user_part = f":{url_password}@" if url_password else ""
    url = f"redis://{user_part}127.0.0.1:{locked_server.port}/0?{query}"
    endpoint = RedisEndpoint.from_options(url, None, password)
    with pytest.raises(RedisUnavailableError) as caught:
        endpoint.client()
    assert str(caught.value) == (
        f"Redis at 127.0.0.1:{locked_server.port} refused the default user: invalid "
        f"username-password pair or user is disabled. {CHECK_CREDENTIALS}"
    )
    assert PASSWORD not in repr(endpoint) and WRONG not in repr(endpoint)


@pytest.mark.parametrize(
    ("user_part", "query", "username", "password", "user"),
    [
        ("", f"username=reader&password={READER_PW}", None, None, "reader"),
        (f":{READER_PW}@", "username=reader", None, None, "reader"),
        ("reader@", f"password={READER_PW}", None, None, "reader"),
        (f"nobody:{NOBODY_PW}@", f"username=reader&password={READER_PW}", None, None, "nobody"),
        ("", f"username=nobody&password={READER_PW}", "reader", None, "reader"),
        ("", f"username=reader&password={WRONG}", "nobody", NOBODY_PW, "nobody"),
    ],
    ids=["query", "query-user", "query-password", "user-part-wins", "option-user", "options"],
)
@pytest.mark.usefixtures("fresh_clients")
def test_an_acl_user_in_the_query_logs_in_in_the_same_order(
    acl_server: RedisServer,
    user_part: str,
    query: str,
    username: str | None,
    password: str | None,
    user: str,
) -> None:
    url = f"redis://{user_part}127.0.0.1:{acl_server.port}/0?{query}"
    assert whoami(RedisEndpoint.from_options(url, username, password)) == user


@pytest.mark.usefixtures("fresh_clients")
def test_a_wrong_query_password_is_refused_naming_the_querys_user(acl_server: RedisServer) -> None:
    url = f"{base(acl_server)}?username=reader&password={WRONG}"
    with pytest.raises(RedisUnavailableError) as caught:
        RedisEndpoint.from_options(url, None, None).client()
    assert str(caught.value) == (
        f"Redis at 127.0.0.1:{acl_server.port} refused user 'reader': invalid username-password "
        f"pair or user is disabled. {CHECK_CREDENTIALS}"
    )


@pytest.mark.parametrize(
    ("query", "forms"),
    [
        (f"password={WRONG}", [WRONG]),
        ("pass%77ord=q-wr0ng%2Bpw%409z", ["q-wr0ng%2Bpw%409z", "q-wr0ng+pw@9z"]),
        ("password=q-wr0ng+pw%409z", ["q-wr0ng+pw%409z", "q-wr0ng+pw@9z", "q-wr0ng pw@9z"]),
    ],
    ids=["plain", "percent-encoded", "plus"],
)
def test_the_querys_password_is_scrubbed_from_errors(query: str, forms: list[str]) -> None:
    """Each form the password may take in redis-py's error texts: as written, decoded."""
    endpoint = RedisEndpoint.from_options(f"redis://127.0.0.1:6379/0?{query}", None, None)
    for form in forms:
        with pytest.raises(RedisUnavailableError) as caught, translate_errors(endpoint):
            raise redis.ConnectionError(f"Error connecting with {form}.")
        message = str(caught.value)
        assert "wr0ng" not in message and "127.0.0.1:6379" in message, message


def test_the_command_line_logs_in_with_the_querys_password(
    locked_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    forget_clients()
    assert cli.main(["status", "--url", f"{base(locked_server)}?password={PASSWORD}"]) == 0
    out, err = capsys.readouterr()
    assert "stream" in out and err == "" and PASSWORD not in out
    assert cli.main(["status", "--url", f"{base(locked_server)}?password={WRONG}"]) == 2
    out, err = capsys.readouterr()
    assert f"127.0.0.1:{locked_server.port} refused the default user" in err
    assert WRONG not in out + err and PASSWORD not in out + err
