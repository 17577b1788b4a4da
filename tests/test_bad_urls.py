"""Bad URLs and out-of-range option values fail at load()/start, naming option, value and fix.

One table: each bad value with the exact error it must give, for the source and the sink alike
(they parse ``url`` with one function). No Redis, no Spark: parsing does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from atlasbus.bus.connection import RedisEndpoint
from atlasbus.bus.redis_url import shown_url
from atlasbus.errors import ConfigurationError
from atlasbus.options.sink import parse_sink_options
from atlasbus.options.source import parse_source_options

URL_FORM = (
    "redis://[user:password@]host[:port][/db], rediss://... (TLS), unix:///path/to.sock or "
    "redis+sentinel://[user:password@]sentinel[:port][,sentinel[:port]...]/master-name[/db]"
)
MAX = 2**63 - 1
SOURCE_ACCEPTED = (
    "deadLetterTable, endingOffsets, endingTimestamp, failOnDataLoss, filterPushdown, format, "
    "group, includeRawFields, maxEntriesPerPartition, maxEntriesPerTrigger, maxTriggerDelay, "
    "minEntriesPerTrigger, minPartitions, minReplicas, pageSize, password, pendingOf, "
    "replicaTimeout, startingOffsets, startingTimestamp, streamPrefix, streams, sweepDelete, "
    "sweepGroup, sweepMaxDeliveries, sweepMinIdle, topicPattern, topics, trimConsumed, url, "
    "username"
)
URL_PARAMETERS = (
    "client_name, db, health_check_interval, max_connections, password, protocol, "
    "sentinel_password, sentinel_username, socket_connect_timeout, socket_keepalive, socket_timeout, ssl_ca_certs, ssl_ca_path, "
    "ssl_cert_reqs, ssl_certfile, ssl_check_hostname, ssl_keyfile, ssl_min_version, "
    "ssl_password, username"
)

BAD_URLS = [
    (
        "redis:/x",
        "option 'url' must be a Redis URL starting with redis://, rediss://, unix://, redis+sentinel:// or rediss+sentinel://, got "
        f"'redis:/x'; accepted: {URL_FORM}",
    ),
    (
        "http://h:6379",
        "option 'url' must be a Redis URL starting with redis://, rediss://, unix://, redis+sentinel:// or rediss+sentinel://, got "
        f"http://...; accepted: {URL_FORM}",
    ),
    (
        " redis://h:6379/0",
        "option 'url' must not start or end with whitespace, got ' redis://h:6379/0'; accepted: "
        f"{URL_FORM}",
    ),
    (
        "redis://h:6379/0\n",
        "option 'url' must not start or end with whitespace, got 'redis://h:6379/0\\n'; "
        f"accepted: {URL_FORM}",
    ),
    (
        "",
        f"option 'url' must not be empty: give a Redis URL ({URL_FORM}), or leave the option out "
        "to use $REDIS_URL, else redis://localhost:6379/0",
    ),
    (
        "redis://h:6379/0?socket_timeout=abc",
        "option 'url' has query parameter socket_timeout='abc', which is not a positive number: "
        "it must be a positive number of seconds",
    ),
    (
        "redis://h:6379/0?socket_connect_timeout=0",
        "option 'url' has query parameter socket_connect_timeout='0', which is not a positive "
        "number: it must be a positive number of seconds",
    ),
    (
        "redis://h:6379?db=abc",
        "option 'url' has query parameter db='abc', which is not a non-negative integer: it "
        "must be a non-negative integer",
    ),
    (
        "redis://h:6379/-1",
        "option 'url' has database path '/-1', got 'redis://h:6379/-1': the path selects a "
        "database and must be a non-negative integer such as /0",
    ),
    (
        "redis://h:6379/abc",
        "option 'url' has database path '/abc', got 'redis://h:6379/abc': the path selects a "
        "database and must be a non-negative integer such as /0",
    ),
    (
        "redis://h:port/0",
        "option 'url' has an invalid port (host 'h'), got 'redis://h:port/0': a port is an integer "
        "from 1 to 65535 (or leave it out for 6379)",
    ),
    (  # redis-py reads port 0, and an empty port, as 6379: another server than the one meant
        "redis://127.0.0.1:0/0",
        "option 'url' has an invalid port (host '127.0.0.1'), got 'redis://127.0.0.1:0/0': a "
        "port is an integer from 1 to 65535 (or leave it out for 6379)",
    ),
    (
        "redis://u:pw@127.0.0.1:/0",
        "option 'url' has an invalid port (host '127.0.0.1'), got 'redis://u:***@127.0.0.1:/0': "
        "a port is an integer from 1 to 65535 (or leave it out for 6379)",
    ),
    (  # an unencoded # ends the place: urlsplit saw no password, and the URL was shown whole
        "redis://:S3cr#3tPw@127.0.0.1:6413/0",
        "option 'url' holds a user or password with a character that must be percent-encoded, "
        "got 'redis://:***@127.0.0.1:6413/0': write # as %23, / as %2F, ? as %3F, @ as %40 (or "
        "pass the password in option 'password')",
    ),
    (
        "redis://ops:S3cr/3tPw@127.0.0.1:6413/0",
        "option 'url' holds a user or password with a character that must be percent-encoded, "
        "got 'redis://ops:***@127.0.0.1:6413/0': write # as %23, / as %2F, ? as %3F, @ as %40 "
        "(or pass the password in option 'password')",
    ),
    (
        "redis://:pw@[::1/0",
        "option 'url' is not a valid URL (Invalid IPv6 URL), got 'redis://:***@[::1/0'",
    ),
    (
        "unix://h/tmp/redis.sock",
        "option 'url' names a host ('h') before the socket path, got 'unix://h/tmp/redis.sock': "
        "a socket URL has three slashes, unix:///path/to/redis.sock",
    ),
    (  # redis-py's TCP connection takes no ssl_* argument: a TypeError at connect
        "redis://h:6379/0?ssl_cert_reqs=none",
        "option 'url' has query parameter ssl_cert_reqs, which only a TLS URL takes, got "
        "'redis://h:6379/0?ssl_cert_reqs=none': use rediss:// for TLS, or leave ssl_cert_reqs out",
    ),
    (
        "unix:///tmp/r.sock?ssl_password=s3cret-url-pw",
        "option 'url' has query parameter ssl_password, which only a TLS URL takes, got "
        "'unix:///tmp/r.sock?ssl_password=***': use rediss:// for TLS, or leave ssl_password out",
    ),
    (
        "unix:///tmp/r.sock?socket_keepalive=true",
        "option 'url' has query parameter socket_keepalive, which a socket URL does not take (it "
        "is for TCP), got 'unix:///tmp/r.sock?socket_keepalive=true': leave it out",
    ),
    (  # redis-py reads " false" as true
        "redis://h:6379/0?socket_keepalive=%20false",
        "option 'url' has query parameter socket_keepalive=' false', which is not a boolean: it "
        "must be a boolean (true or false)",
    ),
    (  # Redis refuses it at CLIENT SETNAME, on the first connection
        "redis://h:6379/0?client_name=a%20b",
        "option 'url' has query parameter client_name='a b', which holds a space or a character "
        "Redis refuses: it must be printable ASCII without spaces (what CLIENT SETNAME takes)",
    ),
    (
        "unix://",
        "option 'url' names no socket path, got 'unix://': write unix:///path/to/redis.sock",
    ),
    (
        "rediss://h:6380/0?ssl_cert_reqs=bogus",
        "option 'url' has query parameter ssl_cert_reqs='bogus', which is not a certificate "
        "requirement: it must be none, optional or required",
    ),
    (
        "rediss://h:6380/0?ssl_ca_certs=/no/such/ca.pem",
        "option 'url' has query parameter ssl_ca_certs='/no/such/ca.pem', but there is no such "
        "file: it must be the path of an existing file",
    ),
    (  # an unknown parameter's value may be a secret: never shown
        "redis://h:6379/0?sockettimeout=5",
        "option 'url' has unknown query parameter 'sockettimeout', got "
        f"'redis://h:6379/0?sockettimeout=***'; accepted parameters: {URL_PARAMETERS}",
    ),
    (
        "redis://h:6379/0?passwd=s3cret-url-pw",
        "option 'url' has unknown query parameter 'passwd', got "
        f"'redis://h:6379/0?passwd=***'; accepted parameters: {URL_PARAMETERS}",
    ),
    (
        "redis://u:s3cret-url-pw@h:6379/x",
        "option 'url' has database path '/x', got 'redis://u:***@h:6379/x': the path selects a "
        "database and must be a non-negative integer such as /0",
    ),
    (
        "rediss://h:6380/0?ssl_password=s3cret-url-pw&protocol=9",
        "option 'url' has query parameter protocol='9', which is not a RESP version: it must be "
        "2 or 3",
    ),
]

BAD_SOURCE_VALUES = [
    (
        {"topics": "a", "pageSize": str(10**30)},
        f"option 'pageSize' must be a positive integer at most {MAX}, got '{10**30}'",
    ),
    (
        {"topics": "a", "pageSize": str(2**63)},
        f"option 'pageSize' must be a positive integer at most {MAX}, got '{2**63}'",
    ),
    (
        {"topics": "a", "startingTimestamp": str(10**30)},
        f"option 'startingTimestamp' must be epoch milliseconds at most {MAX}, got '{10**30}'",
    ),
    (
        {"topics": "a", "startingTimestamp": str(2**63)},
        f"option 'startingTimestamp' must be epoch milliseconds at most {MAX}, got '{2**63}'",
    ),
    (
        {"topic": "a"},
        f"unknown option 'topic'. Did you mean 'topics'? Accepted options: {SOURCE_ACCEPTED}",
    ),
]

BAD_SINK_VALUES = [
    (
        {"topic": "a", "maxLen": str(10**30)},
        f"option 'maxLen' must be a positive integer at most {MAX}, got '{10**30}'",
    ),
    (
        {"topic": "a", "maxLen": str(2**63)},
        f"option 'maxLen' must be a positive integer at most {MAX}, got '{2**63}'",
    ),
]

PARSERS: dict[str, Callable[[str], Any]] = {
    "source": lambda url: parse_source_options({"topics": "a", "url": url}),
    "sink": lambda url: parse_sink_options({"topic": "a", "url": url}),
    "endpoint": lambda url: RedisEndpoint.from_options(url, None, None),
}


@pytest.mark.parametrize("parser", sorted(PARSERS))
@pytest.mark.parametrize(("url", "message"), BAD_URLS, ids=[u or "empty" for u, _ in BAD_URLS])
def test_a_bad_url_is_refused_at_parse_with_what_is_accepted(
    url: str, message: str, parser: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        PARSERS[parser](url)
    assert str(caught.value) == message
    assert "s3cret-url-pw" not in str(caught.value)


@pytest.mark.parametrize(
    ("options", "message"), BAD_SOURCE_VALUES, ids=[m[:45] for _, m in BAD_SOURCE_VALUES]
)
def test_a_bad_source_value_is_refused_at_parse(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_source_options(options)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("options", "message"), BAD_SINK_VALUES, ids=[m[:45] for _, m in BAD_SINK_VALUES]
)
def test_a_bad_sink_value_is_refused_at_parse(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_sink_options(options)
    assert str(caught.value) == message


def test_the_largest_accepted_values_pass() -> None:
    source = parse_source_options(
        {"topics": "a", "pageSize": str(MAX), "startingTimestamp": str(MAX)}
    )
    assert source.page_size == MAX and source.starting.timestamp_ms == MAX
    assert parse_sink_options({"topic": "a", "maxLen": str(MAX)}).max_len == MAX


def test_a_url_from_redis_url_is_checked_and_named_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://h:6379/abc")
    with pytest.raises(ConfigurationError) as caught:
        RedisEndpoint.from_options(None, None, None)
    assert str(caught.value).startswith("option 'url' (from $REDIS_URL) has database path '/abc'")


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("REDIS://h:6379/1", "redis://h:6379/1"),
        ("Rediss://h:6380/0", "rediss://h:6380/0"),
        ("UNIX:///tmp/r.sock?db=2", "unix:///tmp/r.sock?db=2"),
    ],
)
def test_the_scheme_is_case_insensitive(url: str, kept: str) -> None:
    endpoint = RedisEndpoint.from_options(url, None, None)
    assert endpoint.url == kept


def test_good_urls_pass(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked at parse")
    for url in (
        "redis://localhost",
        "redis://localhost:6379",
        "redis://localhost:6379/",
        "redis://u:p@localhost:6379/15?socket_timeout=2.5&socket_connect_timeout=1",
        f"rediss://h:6380/0?ssl_cert_reqs=required&ssl_ca_certs={ca}&ssl_check_hostname=true",
        "unix:///var/run/redis.sock?db=3",
        "unix:///tmp/inst@main/redis.sock",  # an @ in the socket's path
        "unix://localhost/tmp/redis.sock",  # redis-py ignores the host
        "redis://h:6379/0?client_name=svc@host",  # an @ in a parameter's value
        f"rediss://h:6380/0?ssl_certfile={ca}&ssl_keyfile={ca}&ssl_password=p@ss",
        "redis://h:6379/0?client_name=",  # empty: redis-py names no client
        "redis://[::1]:6379/0",
        "redis://user@h:6379/0",
        "redis://:p%40ss%23w%2Frd@h:6379/0",
    ):
        RedisEndpoint.from_options(url, None, None)
    assert RedisEndpoint.from_options("redis://h/7", None, None).database == 7
    assert RedisEndpoint.from_options("redis://h/7?db=2", None, None).database == 2


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("unix:///tmp/r.sock?db=2", "unix:///tmp/r.sock?db=2"),
        ("unix://u:secret@/tmp/r.sock?db=2", "unix://u:***@/tmp/r.sock?db=2"),
        (
            "unix:///tmp/r.sock?db=2&ssl_password=secret",
            "unix:///tmp/r.sock?db=2&ssl_password=***",
        ),
        ("redis://u:secret@h:6379/0", "redis://u:***@h:6379/0"),
        ("redis://:S3cr#3t?x/y@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://us/er:S3cret@h:6379/0", "redis://***@h:6379/0"),
        (
            "rediss://h:6380/0?protocol=3&ssl_password=s3&db=1",
            "rediss://h:6380/0?protocol=3&ssl_password=***&db=1",
        ),
        # an @ in a parameter's value is not the end of a user part
        ("rediss://u:pw@h?ssl_password=TOP@SECRET", "rediss://u:***@h?ssl_password=***"),
        ("rediss://h?ssl%5Fpassword=TOPSECRET", "rediss://h?ssl%5Fpassword=***"),
        ("rediss://h?SSL_PASSWORD=TOPSECRET", "rediss://h?SSL_PASSWORD=***"),
        ("redis://:pa?ss@h:6379/0", "redis://:***@h:6379/0"),
        ("unix:///tmp/inst@main/r.sock", "unix:///tmp/inst@main/r.sock"),
        # the query's password, and every parameter atlasbus does not know, are hidden too
        ("redis://h/0?password=S3cr3t&db=1", "redis://h/0?password=***&db=1"),
        ("redis://u:pw@h/0?password=S3cr3t", "redis://u:***@h/0?password=***"),
        (
            "redis://h/0?username=bob&passwd=S3&pwd=S3&token=S3",
            "redis://h/0?username=bob&passwd=***&pwd=***&token=***",
        ),
        (
            "redis://h/0?pass%77ord=S3&PASSWORD=S3&Password=S3",
            "redis://h/0?pass%77ord=***&PASSWORD=***&Password=***",
        ),
        ("redis://h/0?password=", "redis://h/0?password=***"),
        ("redis://h/0?password=S3#frag", "redis://h/0?password=***"),
        # an @ in a hidden value: read as the end of a user part too, both readings are hidden
        ("rediss://h?ssl_password=TOP@SECRET", "rediss://***"),
        ("redis://:pa?x=1@h", "redis://:***"),
        ("default:SECRET@host:6379", "default:***@host:6379"),
    ],
)
def test_a_socket_url_is_shown_as_written_without_its_secrets(url: str, shown: str) -> None:
    assert shown_url(url) == shown
