"""A URL that points at a Sentinel is refused when atlasbus connects (a cluster node is
followed: tests/test_cluster.py).

A Sentinel holds no streams at all. The mode comes
from HELLO (the reply a RESP3 connection opens with, or ``HELLO 2``); a server without
HELLO still connects. The connect still PINGs, so a user whose ACL lacks ``+ping`` (which
redis-py's health checks send later) is refused at once, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from atlasbus import cli
from atlasbus.bus.connection import RedisEndpoint
from atlasbus.errors import ConfigurationError, RedisPermissionError
from atlasbus.sandbox.redis_server import RedisServer


@pytest.fixture
def sentinel(redis_server: RedisServer, tmp_path: Path) -> Iterator[int]:
    """A Sentinel monitoring the suite's server (it only watches; it never fails it over)."""
    config = tmp_path / "sentinel.conf"  # Sentinel rewrites its configuration file
    config.write_text(f"sentinel monitor bus 127.0.0.1 {redis_server.port} 1\n")
    with RedisServer(config_file=config, extra_args=["--sentinel"]) as server:
        yield server.port


def test_a_sentinel_is_refused_with_where_to_point_instead(
    sentinel: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["status", "--url", f"redis://127.0.0.1:{sentinel}/0"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (
        f"atlasbus status: error: Redis at 127.0.0.1:{sentinel} is a Sentinel, which holds no "
        "streams: name the Sentinels and the master they watch in --url (or $REDIS_URL), "
        "redis+sentinel://sentinel1:26379,sentinel2:26379/<master-name> (SENTINEL MASTERS lists "
        "the names), so atlasbus follows the master across failovers\n"
    )
    endpoint = RedisEndpoint.from_options(f"redis://127.0.0.1:{sentinel}/0", None, None)
    with pytest.raises(ConfigurationError, match="is a Sentinel, which holds no streams"):
        endpoint.client()


def test_a_server_without_hello_still_connects() -> None:
    """A server that renamed HELLO away (or is older than 6.0), reached over RESP2 (redis-py
    6's default; ``protocol=2`` in the URL), costs the check, not the connection: the connect
    falls back to PING. (HELLO is exempt from ACLs, like AUTH.)"""
    with RedisServer(extra_args=["--rename-command", "HELLO", '""']) as server:
        port = server.port
        url = f"{server.url}?protocol=2"
        client = RedisEndpoint.from_options(url, None, None).client()
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.execute_command("HELLO", 2)
        client.set("no-hello", "1")
        assert redis.Redis(port=port, protocol=2).get("no-hello") == b"1"


def test_a_user_without_ping_is_refused_at_connect(r: redis.Redis, redis_url: str) -> None:
    """redis-py's health checks PING a connection idle for 30 s: without ``+ping`` a query
    would fail at a later trigger, so the connect PINGs and names the command now."""
    r.acl_setuser(
        "noping",
        enabled=True,
        passwords=["+pw-noping"],
        keys=["*"],
        commands=["+@all", "-ping"],
    )
    try:
        url = redis_url.replace("redis://", "redis://noping:pw-noping@")
        with pytest.raises(RedisPermissionError, match=r"the command 'ping'.*SETUSER noping"):
            RedisEndpoint.from_options(url, None, None).client()
    finally:
        r.acl_deluser("noping")
