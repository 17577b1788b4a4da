"""The bus tools on a Redis Cluster of three masters: ``atlasbus status``, ``atlasbus trim``,
``atlasbus dlq sweep`` and the pending DataFrame, each over streams on different masters.

Each case is the standalone test's own (imported from its file and called with the cluster's
client and URL), so the cluster gives the very rows, counts and output the standalone server
gives; prefixes are drawn until the case's streams land on different masters. Real
redis-server processes (``LocalCluster``, no replicas), no mocks.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

import test_dead_letter_replay as replay_tests
import test_pending as pending_tests
import test_reaper as reaper_tests
import test_retention as retention_tests
import test_status as status_tests
import test_sweep_source as sweep_source_tests
from atlasbus.bus.connection import RedisEndpoint, forget_clients
from atlasbus.cli.status_report import render_table
from atlasbus.dead_letters import DeadLetterTable
from atlasbus.dead_letters.replay import replay_dead_letters
from atlasbus.model.entry_id import EntryId
from atlasbus.operations.bus_status import bus_status
from atlasbus.operations.reaper import (
    acknowledge,
    claim_exhausted,
    find_exhausted,
    record_dead_letters,
    start_cursors,
)
from atlasbus.operations.retention import TRIM_SCRIPT, Holder, TrimResult, trim_consumed
from atlasbus.sandbox.redis_cluster import LocalCluster
from helpers import publish, redis_major


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3, 0) as started:
        yield started
    forget_clients()


@pytest.fixture(scope="module")
def rc(cluster: LocalCluster) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(cluster.url)
    yield client
    client.close()


@pytest.fixture
def url(cluster: LocalCluster) -> str:
    return cluster.url


def master_of(client: RedisCluster, key: str) -> str:
    return str(client.get_node_from_key(key).name)


def spread(client: RedisCluster, topics: Sequence[str]) -> str:
    """A fresh prefix (as conftest's ``prefix``: 11 characters) whose streams for ``topics``
    are each on a different master (on all three when there are three)."""
    for _ in range(1000):
        prefix = f"t{uuid.uuid4().hex[:10]}"
        masters = {master_of(client, f"{prefix}:{topic}") for topic in topics}
        if len(masters) == min(len(topics), 3):
            return prefix
    raise AssertionError("no prefix spreads the streams")


# --- atlasbus status -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def status_fx(
    rc: RedisCluster, cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> status_tests.Fixture:
    table = str(tmp_path_factory.mktemp("status") / "dead_letters")
    now = datetime.now(UTC).replace(microsecond=0)
    status_tests.build(rc, table, now)
    return status_tests.Fixture(cluster.url, table, now, redis_major(rc))


def test_status_fixture_streams_are_on_two_masters(rc: RedisCluster) -> None:
    p = status_tests.P
    keys = (f"{p}:orders", f"{p}:payments", f"{p}:{status_tests.ODD}")
    assert len({master_of(rc, key) for key in keys}) == 2


def test_status_core_figures_on_a_cluster(status_fx: status_tests.Fixture) -> None:
    status_tests.test_core_figures(status_fx)
    status_tests.test_named_topics_and_missing_ones(status_fx)


def test_status_cli_table_json_and_prometheus_on_a_cluster(
    status_fx: status_tests.Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    status_tests.test_cli_table(status_fx, capsys)
    status_tests.test_json_of_the_core_and_of_the_cli(status_fx, capsys)
    status_tests.test_prometheus_of_the_cli(status_fx, capsys)


def test_status_lists_every_stream_on_every_master(rc: RedisCluster, url: str) -> None:
    topics = ("a", "b", "c")
    prefix = spread(rc, topics)
    for count, topic in enumerate(topics, start=1):
        stream = f"{prefix}:{topic}"
        publish(rc, prefix, topic, count)
        rc.xgroup_create(stream, "g", id="0")
        rc.xreadgroup("g", "c1", {stream: ">"}, count=1)
    status = bus_status(RedisEndpoint.from_options(url, None, None), stream_prefix=prefix)

    assert [
        (s.topic, s.length, [(g.name, g.pending) for g in s.groups]) for s in status.streams
    ] == [
        ("a", 1, [("g", 1)]),
        ("b", 2, [("g", 1)]),
        ("c", 3, [("g", 1)]),
    ]
    assert status.redis_version == redis_version(rc)
    lines = render_table(status).splitlines()
    for topic in topics:
        assert sum(line.startswith(f"{prefix}:{topic} ") for line in lines) == 1, lines


def test_status_least_acl_on_a_cluster(status_fx: status_tests.Fixture, rc: RedisCluster) -> None:
    """The standalone monitoring ACL, on every master (a cluster does not share ACL users), plus
    what redis-py's cluster client asks: CLUSTER SLOTS (the slot map) and COMMAND (key
    positions). INFO on every master only for the version."""
    user, secret = "status-cluster", "s3cret-cluster"
    masters = [rc.get_redis_connection(node) for node in rc.get_primaries()]
    for master in masters:
        master.execute_command(
            f"ACL SETUSER {user} on >{secret} ~{status_tests.P}:* resetchannels +ping +hello "
            "+auth +client|setname +select +scan +xinfo|stream +xinfo|groups +xpending "
            "+cluster|slots +command"
        )
    url = status_fx.url.replace("redis://", f"redis://{user}:{secret}@")
    try:
        status = bus_status(
            RedisEndpoint.from_options(url, None, None),
            stream_prefix=status_tests.P,
            now=status_fx.now,
        )
        assert status.redis_version == "unknown"
        idle = status_tests.idle_of(status)
        assert status.streams == status_tests.expected_streams(status_fx, *idle)
        for master in masters:
            master.execute_command(f"ACL SETUSER {user} +info")
        status = bus_status(
            RedisEndpoint.from_options(url, None, None), stream_prefix=status_tests.P
        )
        assert status.redis_version == redis_version(rc)
    finally:
        for master in masters:
            master.execute_command(f"ACL DELUSER {user}")
        forget_clients()


def redis_version(client: RedisCluster) -> str:
    infos = client.info("server", target_nodes="primaries").values()
    [version] = {info["redis_version"] for info in infos}  # one binary for every node
    return str(version)


# --- atlasbus trim -------------------------------------------------------------------------------


def test_trim_cli_on_a_cluster(rc: RedisCluster, url: str) -> None:
    prefix = spread(rc, ("orders", "payments", "audit"))
    retention_tests.test_cli_trims_and_dry_runs_with_a_report(rc, url, prefix)


def test_trim_loads_the_script_on_each_master_after_a_script_flush(
    rc: RedisCluster, url: str
) -> None:
    topics = ("orders", "payments", "audit")
    prefix = spread(rc, topics)
    streams = [f"{prefix}:{topic}" for topic in topics]
    for stream in streams:
        retention_tests.write(rc, stream, range(1, 11))
    endpoint = RedisEndpoint.from_options(url, None, None)
    masters = [rc.get_redis_connection(node) for node in rc.get_primaries()]
    for master in masters:
        master.script_flush()

    results = trim_consumed(endpoint, dict.fromkeys(streams, EntryId(4)))

    query = Holder("query", "committed")
    assert results == [
        TrimResult(s, True, EntryId(4), (query,), 3, True, 7, False) for s in streams
    ]
    for stream in streams:
        assert retention_tests.left(rc, stream) == retention_tests.ids(*range(4, 11))
    sha = rc.register_script(TRIM_SCRIPT).sha
    assert [master.script_exists(sha) for master in masters] == [[True]] * 3
    again = trim_consumed(endpoint, dict.fromkeys(streams, EntryId(6)))  # EVALSHA this time
    assert [(r.point, r.removed, r.remaining) for r in again] == [(EntryId(6), 2, 5)] * 3


# --- atlasbus dlq sweep --------------------------------------------------------------------------


def test_sweep_pages_three_streams_on_three_masters(
    rc: RedisCluster, url: str, tmp_path: Path
) -> None:
    prefix = spread(rc, ("orders", "payments", "audit"))
    reaper_tests.test_pages_and_streams_a_group_missing_on_one_stream(rc, url, prefix, tmp_path)


def test_sweep_of_a_group_on_no_stream_is_an_error_naming_it(
    rc: RedisCluster, url: str, tmp_path: Path
) -> None:
    prefix = spread(rc, ("orders", "absent"))
    reaper_tests.test_a_group_on_none_of_the_streams_is_an_error_naming_it(
        rc, url, prefix, tmp_path
    )


def test_sweep_command_line_on_a_cluster(rc: RedisCluster, url: str, tmp_path: Path) -> None:
    prefix = spread(rc, ("orders", "payments"))
    reaper_tests.test_the_command_line_sweeps_and_prints_a_summary_per_stream(
        rc, url, prefix, tmp_path
    )


@pytest.mark.spark
def test_the_sources_sweep_on_a_cluster(
    spark: Any, rc: RedisCluster, url: str, tmp_path: Path
) -> None:
    prefix = spread(rc, ("orders",))
    sweep_source_tests.test_the_source_sweeps_retry_exhausted_entries_once_per_trigger(
        spark, url, rc, prefix, tmp_path
    )


# --- the pending DataFrame -----------------------------------------------------------------------


def test_pending_plan_on_a_cluster(rc: RedisCluster, url: str) -> None:
    prefix = spread(rc, ("a", "b"))
    pending_tests.test_plan_is_one_read_per_stream_with_its_pending_count(rc, url, prefix)


@pytest.mark.parametrize("page_size", ["1", "1000"])
def test_pending_rows_on_a_cluster(rc: RedisCluster, url: str, page_size: str) -> None:
    prefix = spread(rc, ("a", "b"))
    pending_tests.test_rows_are_exact_whatever_the_page_size(rc, url, prefix, page_size)


@pytest.mark.spark
def test_pending_dataframe_on_a_cluster(spark: Any, rc: RedisCluster, url: str) -> None:
    warm = spread(rc, ("a", "b"))  # Python workers started first: idle_ms has a minute's slack
    pending_tests.build_pending(rc, warm)
    assert pending_tests.pending_frame(spark, url, warm).count() == 6
    prefix = spread(rc, ("a", "b"))
    pending_tests.test_pending_dataframe_has_exact_rows(spark, rc, url, prefix)


# --- atlasbus dlq replay -------------------------------------------------------------------------


def test_replay_publishes_each_letter_to_its_streams_master_once(
    rc: RedisCluster, url: str, tmp_path: Path
) -> None:
    """Letters for three topics on three masters: each published once, on its stream's master
    (one publisher per hash slot), the table recording each new entry ID; a second run
    replays nothing."""
    topics = ("orders", "payments", "refunds")
    prefix = spread(rc, topics)
    dlq = DeadLetterTable(tmp_path / "dlq")
    letters = [
        letter
        for index, topic in enumerate(topics)
        for letter in replay_tests.sink_letters(4, write=f"w/-/{index}", topic=topic)
    ]
    dlq.append(letters)
    endpoint = RedisEndpoint.from_options(url, None, None)
    result = replay_dead_letters(dlq, endpoint=endpoint, stream_prefix=prefix)
    assert len(result.replayed) == 12 and result.refused == ()
    for topic in topics:
        held = rc.xrange(f"{prefix}:{topic}")
        assert sorted(json.loads(fields[b"payload"])["n"] for _, fields in held) == [0, 1, 2, 3]
        mine = [r for r in result.replayed if r.topic == topic]
        assert [r.entry_id for r in mine] == [entry.decode() for entry, _ in held]
    recorded = {
        row["dead_letter_id"]: row["last_replay_entry_id"] for row in dlq.to_arrow().to_pylist()
    }
    assert recorded == {r.dead_letter_id: r.entry_id for r in result.replayed}
    again = replay_dead_letters(dlq, endpoint=endpoint, stream_prefix=prefix)
    assert (again.replayed, len(again.already_replayed)) == ((), 12)
    assert [rc.xlen(f"{prefix}:{topic}") for topic in topics] == [4, 4, 4]


# --- a slot moved to another master under the tools ----------------------------------------------


def move_slot(client: RedisCluster, key: str) -> str:
    """Migrate ``key``'s slot (and its keys) to another master, as ``redis-cli --cluster
    reshard`` does; the new master's ``host:port``. ``client``'s slot map is left stale."""
    slot = client.keyslot(key)
    source = client.get_node_from_key(key)
    target = next(n for n in client.get_primaries() if n.name != source.name)
    src, dst = (redis.Redis(host=n.host, port=n.port) for n in (source, target))
    src_id, dst_id = (c.execute_command("CLUSTER", "MYID").decode() for c in (src, dst))
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    for name in src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000):
        src.execute_command("MIGRATE", target.host, target.port, name, 0, 5000)
    for node in client.get_primaries():
        with redis.Redis(host=node.host, port=node.port) as each:
            each.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    src.close()
    dst.close()
    return str(target.name)


def test_trim_and_the_sweeps_transactions_follow_a_moved_slot(tmp_path: Path) -> None:
    with LocalCluster(3, 0) as moving:
        client = RedisCluster.from_url(moving.url)
        endpoint = RedisEndpoint.from_options(moving.url, None, None)
        prefix = f"t{uuid.uuid4().hex[:10]}"

        trimmed = f"{prefix}:audit"
        retention_tests.write(client, trimmed, range(1, 11))
        assert [r.removed for r in trim_consumed(endpoint, {trimmed: EntryId(2)})] == [1]
        moved_to = move_slot(client, trimmed)  # atlasbus's client still maps it to the old one
        [result] = trim_consumed(endpoint, {trimmed: EntryId(5)})
        assert (result.point, result.removed, result.remaining) == (EntryId(5), 3, 6)
        with RedisCluster.from_url(moving.url) as fresh:
            assert master_of(fresh, trimmed) == moved_to
            assert retention_tests.left(fresh, trimmed) == retention_tests.ids(*range(5, 11))

        d = reaper_tests.deliver(client, prefix)
        table = DeadLetterTable(tmp_path / "dlq")
        found = find_exhausted(endpoint, reaper_tests.POLICY, start_cursors([d.stream]))
        record_dead_letters(found, table, reaper_tests.POLICY, topic_of=lambda key: "orders")
        claimed = claim_exhausted(endpoint, found, reaper_tests.POLICY)
        move_slot(client, d.stream)  # MULTI ... EXEC meets MOVED: EXECABORT, sent again
        acked = acknowledge(endpoint, found, claimed, reaper_tests.POLICY)
        assert (acked.acked, acked.deleted) == ({d.stream: 30}, {d.stream: 0})
        with RedisCluster.from_url(moving.url) as fresh:
            reaper_tests.assert_only_the_30_left_the_pel(fresh, d)
        client.close()
    forget_clients()
