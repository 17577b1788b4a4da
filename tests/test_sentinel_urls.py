"""``redis+sentinel://`` URLs and options ``minReplicas``/``replicaTimeout``: their forms, their
refusals, and what they do against one Sentinel watching the suite's server (the failover
itself is in tests/test_sentinel_failover.py, of the slow tier)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import redis

from atlasbus import cli
from atlasbus.bus.connection import RedisEndpoint
from atlasbus.bus.redis_url import SentinelParts, sentinel_parts, shown_url
from atlasbus.driver.micro_batch import MicroBatchDriver
from atlasbus.errors import (
    ConfigurationError,
    DataLossError,
    PublishError,
    RedisUnavailableError,
)
from atlasbus.model.offsets import StreamOffsets
from atlasbus.options.sink import parse_sink_options
from atlasbus.options.source import parse_source_options
from atlasbus.publishing.publisher import Publisher, marker_key
from atlasbus.reading.range_reader import read_range
from atlasbus.sandbox.redis_server import RedisServer
from helpers import payload_numbers, publish


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        (
            "redis+sentinel://s1,s2:26380,[::1]:7/bus",
            SentinelParts((("s1", 26379), ("s2", 26380), ("::1", 7)), "bus", 0),
        ),
        (
            "rediss+sentinel://u:pw@s1:1/bus/3?sentinel_password=x",
            SentinelParts((("s1", 1),), "bus", 3),
        ),
        ("REDIS+SENTINEL://s1/bus/", SentinelParts((("s1", 26379),), "bus", 0)),
        ("redis+sentinel://s1/bus/3?db=5", SentinelParts((("s1", 26379),), "bus", 5)),
    ],
)
def test_a_sentinel_url_names_the_sentinels_the_master_and_the_database(
    url: str, parts: SentinelParts
) -> None:
    endpoint = RedisEndpoint.from_options(url, None, None)
    assert sentinel_parts(endpoint.url) == parts
    assert endpoint.is_sentinel and endpoint.database == parts.database
    where = ",".join(f"{host}:{port}" for host, port in parts.sentinels)
    assert endpoint.description.startswith(f"master 'bus' of the Sentinels at {where}")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://s1", "names no master"),
        ("redis+sentinel://s1/", "names no master"),
        ("redis+sentinel://s1/bus/x", "has database 'x' after the master name"),
        ("redis+sentinel://s1/bus/0/1", "names no master"),
        ("redis+sentinel://s1:0/bus", "names a Sentinel 's1:0' that is not host[:port]"),
        ("redis+sentinel://s1,,s2/bus", "names a Sentinel '' that is not host[:port]"),
        ("redis+sentinel://s1:99999/bus", "names a Sentinel 's1:99999'"),
        ("redis://h?sentinel_username=u", "which only a Sentinel URL takes"),
        ("redis+sentinel://s1/bus?ssl_cert_reqs=none", "which only a TLS URL takes"),
    ],
)
def test_a_malformed_sentinel_url_is_refused_naming_the_fault(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match="option 'url'") as refused:
        RedisEndpoint.from_options(url, None, None)
    assert message in str(refused.value)


def test_the_sentinels_password_is_hidden_like_the_masters() -> None:
    url = "redis+sentinel://app:s3cret@s1,s2/bus?sentinel_username=watch&sentinel_password=hush"
    assert shown_url(url) == (
        "redis+sentinel://app:***@s1,s2/bus?sentinel_username=watch&sentinel_password=***"
    )
    with pytest.raises(ConfigurationError) as refused:
        RedisEndpoint.from_options(url + "&db=x", None, None)
    assert "s3cret" not in str(refused.value) and "hush" not in str(refused.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"minReplicas": "0"}, "option 'minReplicas' must be a positive integer, got '0'"),
        ({"minReplicas": "two"}, "option 'minReplicas' must be a positive integer, got 'two'"),
        ({"replicaTimeout": "5s"}, "option 'replicaTimeout' needs option 'minReplicas'"),
        (
            {"minReplicas": "1", "replicaTimeout": "0"},
            "option 'replicaTimeout' must be a positive duration such as 10s, got '0'",
        ),
    ],
)
def test_replication_options_are_checked_for_the_source_and_the_sink(
    options: dict[str, str], message: str
) -> None:
    for parse, extra in ((parse_source_options, {"topics": "a"}), (parse_sink_options, {})):
        with pytest.raises(ConfigurationError) as refused:
            parse({"url": "redis://h", **extra, **options})
        assert str(refused.value).startswith(message)


@pytest.fixture(scope="module")
def sentinel(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Sentinel watching the suite's server as 'bus' (it never fails it over); its URL."""
    config = Path(tmp_path_factory.mktemp("sentinel")) / "sentinel.conf"
    config.write_text(f"sentinel monitor bus 127.0.0.1 {redis_server.port} 1\n")
    with RedisServer(config_file=config, extra_args=["--sentinel"]) as server:
        yield f"redis+sentinel://127.0.0.1:{server.port}/bus/0"


def test_the_bus_tools_and_the_source_reach_the_master_through_the_sentinel(
    sentinel: str, r: redis.Redis, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(r, prefix, "orders", 3)
    code = cli.main(["status", "--url", sentinel, "--stream-prefix", prefix])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    port = sentinel.split(":")[2].split("/")[0]
    assert f"at master 'bus' of the Sentinels at 127.0.0.1:{port}, streams under" in out
    assert f"{prefix}:orders       3" in out
    driver = MicroBatchDriver(
        parse_source_options({"url": sentinel, "streamPrefix": prefix, "topics": "orders"})
    )
    start = driver.initial_offset()
    end = driver.latest_offset(start, None)
    rows = [
        row
        for read in driver.plan(start, end)
        for batch in read_range(driver.options, read)
        for row in batch.to_pylist()
    ]
    assert payload_numbers(rows) == [0, 1, 2]


def test_a_wrong_master_name_or_a_server_named_as_sentinel_is_refused_at_once(
    sentinel: str, redis_url: str
) -> None:
    wrong = sentinel.replace("/bus/", "/orders/")
    with pytest.raises(ConfigurationError) as refused:
        RedisEndpoint.from_options(wrong, None, None).client()
    assert "know no master named 'orders'" in str(refused.value)
    not_sentinel = redis_url.replace("redis://", "redis+sentinel://").rsplit("/", 1)[0] + "/bus"
    with pytest.raises(ConfigurationError) as refused:
        RedisEndpoint.from_options(not_sentinel, None, None).client()
    assert "named as a Sentinel in the URL, is not one" in str(refused.value)


def test_a_sink_waiting_for_a_replica_the_server_lacks_fails_naming_the_rows(
    sentinel: str, r: redis.Redis, prefix: str
) -> None:
    options = parse_sink_options(
        {
            "url": sentinel,
            "streamPrefix": prefix,
            "topic": "t",
            "minReplicas": "1",
            "replicaTimeout": "100ms",
        }
    )
    rows = pa.record_batch({"payload": [json.dumps({"n": n}) for n in range(3)]})
    for marker in (marker_key(options, "wreplicas", 0), None):
        with pytest.raises(PublishError) as failed, Publisher(options, marker=marker) as sink:
            sink.publish(rows)
        assert str(failed.value).startswith(
            "only 0 of the 1 replicas that option minReplicas asks for acknowledged rows 0..2 "
            "within 100 ms (option replicaTimeout) on the master 'bus' of the Sentinels at "
        )


def test_a_source_waiting_for_a_replica_the_server_lacks_reads_nothing_new(
    redis_url: str, r: redis.Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(r, prefix, "orders", 5)
    options = {"url": redis_url, "streamPrefix": prefix, "topics": "orders"}
    waiting = MicroBatchDriver(
        parse_source_options({**options, "minReplicas": "1", "replicaTimeout": "200ms"})
    )
    start = StreamOffsets.from_dict({f"{prefix}:orders": "0-0"}, what="start")
    with caplog.at_level(logging.WARNING, logger="atlasbus.positions"):
        assert waiting.latest_offset(start, None) == start
    assert "fewer than 1 replicas of Redis at" in caplog.text
    assert "within 200 ms (option minReplicas): this trigger reads nothing new" in caplog.text
    plain = MicroBatchDriver(parse_source_options(options))
    assert plain.latest_offset(start, None) != start


def test_the_sentinels_own_login_needs_one_command_and_a_wrong_one_is_named(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """The URL's sentinel_username/sentinel_password log in to the Sentinels, whose ACL needs
    only ``+sentinel|get-master-addr-by-name``; the master's login is the URL's own."""
    config = tmp_path / "sentinel.conf"
    config.write_text(
        f"sentinel monitor bus 127.0.0.1 {redis_server.port} 1\n"
        "user default on nopass +ping +info\n"  # what the sandbox's start-up check runs
        "user watcher on >hush +sentinel|get-master-addr-by-name\n"
    )
    with RedisServer(config_file=config, extra_args=["--sentinel"]) as server:
        url = f"redis+sentinel://127.0.0.1:{server.port}/bus/0?sentinel_username=watcher"
        assert (
            RedisEndpoint.from_options(url + "&sentinel_password=hush", None, None).client().ping()
        )
        with pytest.raises(RedisUnavailableError) as refused:
            RedisEndpoint.from_options(url + "&sentinel_password=nope", None, None).client()
    assert str(refused.value).startswith(
        f"the Sentinel at 127.0.0.1:{server.port} refused the login ("
    )
    assert str(refused.value).endswith(
        "check the URL's sentinel_username and sentinel_password (the Sentinels' own user, "
        "not the master's)"
    )
    assert "nope" not in str(refused.value)


def test_a_loss_on_a_sentinel_url_names_a_failover_as_a_cause(
    sentinel: str, r: redis.Redis, prefix: str
) -> None:
    ids = publish(r, prefix, "orders", 4)
    driver = MicroBatchDriver(
        parse_source_options({"url": sentinel, "streamPrefix": prefix, "topics": "orders"})
    )
    start = driver.initial_offset()
    end = driver.latest_offset(start, None)
    (read,) = driver.plan(start, end)
    r.xdel(f"{prefix}:orders", ids[2])
    with pytest.raises(DataLossError) as lost:
        list(read_range(driver.options, read))
    assert str(lost.value) == (
        f"stream '{prefix}:orders': 1 entry after 0-0 up to {ids[3]} was removed (trimmed "
        "or deleted) before the query read them, or lost in a failover of the master (written "
        "to the old one, not yet to the replica that took over: options minReplicas on the sink "
        "and the source keep that from happening). The query stops so nothing is skipped "
        "silently; set option failOnDataLoss=false to continue from the entries still in the "
        "stream."
    )
