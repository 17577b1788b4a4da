"""A Redis reached by its Unix socket (``unix:///path/to/redis.sock?db=n``), end to end.

The sink writes through the socket, the source reads back through it (the driver's planning,
the executors' raw reads and the group it mirrors), and ``atlasbus status`` reports it; the
same server's TCP port checks what landed, so a socket URL that reached another database or
nothing at all fails here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus import cli
from atlasbus.bus.connection import RedisEndpoint
from atlasbus.sandbox.redis_server import RedisServer
from helpers import BatchCollector, payload_numbers, publish, run_available_now, stream_reader

PREFIX = "unixbus"


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(unix_socket=True) as started:
        yield started


@pytest.fixture
def tcp(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(server.url.replace("/0", "/3"))
    client.flushdb()
    yield client
    client.close()


def socket_url(server: RedisServer) -> str:
    return server.unix_url.replace("db=0", "db=3")


def test_a_socket_url_connects_to_the_database_it_names(
    server: RedisServer, tcp: redis.Redis
) -> None:
    endpoint = RedisEndpoint.from_options(socket_url(server), None, None)
    endpoint.client().set("through-the-socket", "yes")
    assert tcp.get("through-the-socket") == b"yes"
    assert endpoint.description == f"unix socket {server.folder}/redis.sock"


@pytest.mark.spark
def test_the_sink_and_the_source_through_the_socket(
    spark: Any, server: RedisServer, tcp: redis.Redis, tmp_path: Path
) -> None:
    url = socket_url(server)
    rows = [("orders", json.dumps({"n": n})) for n in range(250)]
    (
        spark.createDataFrame(rows, "topic string, payload string")
        .write.format("atlasbus")
        .mode("append")
        .option("url", url)
        .option("streamPrefix", PREFIX)
        .save()
    )
    assert tcp.xlen(f"{PREFIX}:orders") == 250
    tcp.xgroup_create(f"{PREFIX}:orders", "mirror", id="0")
    published = [entry_id.decode() for entry_id, _ in tcp.xrange(f"{PREFIX}:orders")]
    later = publish(tcp, PREFIX, "orders", 50, start=250)

    collector = BatchCollector()
    run_available_now(
        stream_reader(spark, url, PREFIX, topics="orders", group="mirror"),
        str(tmp_path / "ck"),
        collector,
    )

    assert [row["id"] for row in collector.rows] == published + later
    assert sorted(payload_numbers(collector.rows)) == list(range(300))  # sink tasks interleave
    group = tcp.xinfo_groups(f"{PREFIX}:orders")[0]
    assert group["last-delivered-id"].decode() == later[-1]


def test_status_reports_a_stream_behind_the_socket(
    server: RedisServer, tcp: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(tcp, PREFIX, "payments", 7)
    code = cli.main(["status", "--url", socket_url(server), "--prefix", PREFIX, "--json"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    streams = {stream["stream"]: stream for stream in json.loads(out)["streams"]}
    assert streams[f"{PREFIX}:payments"]["length"] == 7
