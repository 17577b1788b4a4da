"""A URL that points at a Redis Cluster node or a Sentinel is refused when atlasbus connects.

atlasbus reads and writes one standalone Redis. Before this check, a cluster node answered for
its own slots only: ``atlasbus status`` and a ``topicPattern`` query found none of the streams
another node holds ("no streams", a query that reads nothing, forever), and a named topic on
another node failed with MOVED's bare text. A Sentinel holds no streams at all. The mode comes
from HELLO (the reply a RESP3 connection opens with, or ``HELLO 2``); a server without
HELLO still connects. The connect still PINGs, so a user whose ACL lacks ``+ping`` (which
redis-py's health checks send later) is refused at once, as before.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus import cli
from atlasbus.bus.connection import RedisEndpoint
from atlasbus.errors import ConfigurationError, RedisPermissionError
from atlasbus.sandbox.redis_server import RedisServer
from helpers import BatchCollector, publish, run_available_now, stream_reader

PREFIX = "clusterbus"
SLOTS = 16384


def cluster_message(port: int, flag: str = "option 'url'") -> str:
    return (
        f"Redis at 127.0.0.1:{port} runs in cluster mode, which atlasbus does not support yet: "
        "it would miss the streams other nodes hold and fail on keys in their slots (MOVED), "
        "and the exactly-once sink's transactions span several keys (CROSSSLOT). Point "
        f"{flag} (or $REDIS_URL) at a standalone Redis (a primary, with or without replicas)"
    )


def topic_in_slots(client: redis.Redis, low: int, high: int) -> str:
    """A topic whose stream hashes to a slot in ``[low, high)``."""
    for n in range(1000):
        slot = int(client.execute_command("CLUSTER", "KEYSLOT", f"{PREFIX}:t{n}"))
        if low <= slot < high:
            return f"t{n}"
    raise AssertionError("no topic found for the slot range")


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[RedisServer, RedisServer, list[str]]]:
    """Two nodes, half the slots each, one three-entry stream on each."""
    with RedisServer(cluster_enabled=True) as first, RedisServer(cluster_enabled=True) as second:
        nodes = [redis.Redis.from_url(first.url), redis.Redis.from_url(second.url)]
        half = SLOTS // 2
        nodes[0].execute_command("CLUSTER", "ADDSLOTS", *range(half))
        nodes[1].execute_command("CLUSTER", "ADDSLOTS", *range(half, SLOTS))
        nodes[0].execute_command("CLUSTER", "MEET", "127.0.0.1", second.port)
        deadline = time.monotonic() + 30
        while not all(node.cluster("INFO")["cluster_state"] == "ok" for node in nodes):
            assert time.monotonic() < deadline, "the two nodes did not form a cluster in 30 s"
            time.sleep(0.1)
        topics = [topic_in_slots(nodes[0], 0, half), topic_in_slots(nodes[0], half, SLOTS)]
        for node, topic in zip(nodes, topics, strict=True):
            publish(node, PREFIX, topic, 3)
        yield first, second, topics
        for node in nodes:
            node.close()


@pytest.mark.parametrize(
    "url_end", ["/0", "/0?protocol=2", "/1"], ids=["resp3", "resp2", "database-1"]
)
def test_status_refuses_either_node_by_name(
    url_end: str,
    cluster: tuple[RedisServer, RedisServer, list[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before: "no streams under 'clusterbus:'" from either node (each saw only its own); with
    a database other than 0, "Redis replied: SELECT is not allowed in cluster mode"."""
    for server in cluster[:2]:
        url = server.url.removesuffix("/0") + url_end
        code = cli.main(["status", "--url", url, "--prefix", PREFIX])
        out, err = capsys.readouterr()
        assert (code, out) == (2, "")
        assert err == f"atlasbus status: error: {cluster_message(server.port, '--url')}\n"


@pytest.mark.spark
def test_a_query_on_a_cluster_node_fails_before_reading(
    spark: Any, cluster: tuple[RedisServer, RedisServer, list[str]], tmp_path: Path
) -> None:
    """Before: the pattern matched only the first node's stream, and the query read its three
    entries as if they were the bus's all."""
    first, _, _ = cluster
    collector = BatchCollector()
    frame = stream_reader(spark, first.url, PREFIX, topicPattern="*")
    with pytest.raises(Exception) as failed:
        run_available_now(frame, str(tmp_path / "ck"), collector)
    assert cluster_message(first.port) in str(failed.value)
    assert collector.rows == []


@pytest.mark.spark
def test_the_sink_on_a_cluster_node_writes_nothing(
    spark: Any, cluster: tuple[RedisServer, RedisServer, list[str]]
) -> None:
    first, second, topics = cluster
    rows = [(topic, '{"n": 1}') for topic in topics]
    frame = spark.createDataFrame(rows, "topic string, payload string")
    with pytest.raises(Exception) as failed:
        frame.write.format("atlasbus").mode("append").option("url", first.url).option(
            "streamPrefix", PREFIX
        ).save()
    assert cluster_message(first.port) in str(failed.value)
    for server, topic in zip((first, second), topics, strict=True):
        assert redis.Redis.from_url(server.url).xlen(f"{PREFIX}:{topic}") == 3


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
