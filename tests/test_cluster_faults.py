"""A Redis Cluster changing under a running pipeline (the atlasbus source into the atlasbus
sink, exactly once), while a publisher keeps publishing: a slot migrated to another master,
a replica taking over its master (``CLUSTER FAILOVER``), and a master with no replica killed
and brought back. What the cluster keeps is read once and published once.

Each input topic and its output topic share a hash tag (``a{7}`` and ``out-a{7}``), so both
streams and their lanes' markers live in one slot, and move together.

Slow tier: clusters of their own, migrations paced so that clients meet ASK, failovers.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.model.entry_id import EntryId
from atlasbus.options.source import parse_source_options
from atlasbus.planning.positions import batch_end
from atlasbus.sandbox.redis_cluster import LocalCluster
from atlasbus.sandbox.redis_server import RedisServer
from helpers import envelope, stream_reader, wait_until
from test_crash_recovery import (
    _kill,
    _start_query,
    _stop_if_running,
    batch_numbers,
    group_position,
)


class ClusterPublisher(threading.Thread):
    """Publishes numbered envelopes to each topic in turn through redis-py's cluster client
    (which follows MOVED and ASK itself); a failed XADD is retried as a new entry. What the
    cluster keeps at the end is the truth the test compares against."""

    def __init__(self, url: str, prefix: str, topics: list[str]) -> None:
        super().__init__(daemon=True)
        self.client = RedisCluster.from_url(url, socket_timeout=2)
        self.prefix, self.topics = prefix, topics
        self.acknowledged: dict[str, list[str]] = {topic: [] for topic in topics}
        self.failed = 0
        self.stop = threading.Event()

    @property
    def sent(self) -> int:
        return sum(len(ids) for ids in self.acknowledged.values())

    def run(self) -> None:
        while not self.stop.is_set():
            for topic in self.topics:
                try:
                    n = len(self.acknowledged[topic])
                    entry = self.client.xadd(f"{self.prefix}:{topic}", envelope(topic, n))
                    self.acknowledged[topic].append(entry.decode())
                except redis.RedisError:
                    self.failed += 1
                    time.sleep(0.1)
            time.sleep(0.003)


def topics_on_each_master(client: RedisCluster, prefix: str) -> list[str]:
    """One topic per master, named ``t{N}``: its stream's hash tag is ``N``."""
    wanted: dict[str, str] = {}
    for n in range(10_000):
        owner = client.get_node_from_key(f"{prefix}:t{{{n}}}").name
        wanted.setdefault(owner, f"t{{{n}}}")
        if len(wanted) == len(client.get_primaries()):
            return list(wanted.values())
    raise AssertionError("no topic found for every master")


def start_pipeline(
    spark: Any, url: str, prefix: str, topics: list[str], checkpoint: Path, **both: str
) -> Any:
    """Each input topic into ``out-<topic>``, each payload naming the entry it came from;
    ``both`` options go to the source and the sink."""
    frame = stream_reader(
        spark, url, prefix, topics=",".join(topics), maxEntriesPerTrigger="400", **both
    )
    writer = (
        frame.selectExpr(
            "concat('out-', topic) AS topic", "to_json(named_struct('src', id)) AS payload"
        )
        .writeStream.format("atlasbus")
        .option("url", url)
        .option("streamPrefix", prefix)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
    )
    for key, value in both.items():
        writer = writer.option(key, value)
    return writer.start()


def assert_each_kept_entry_published_once(
    client: RedisCluster, prefix: str, publisher: ClusterPublisher
) -> None:
    for topic in publisher.topics:
        kept = [entry.decode() for entry, _ in client.xrange(f"{prefix}:{topic}")]
        out = [
            json.loads(fields[b"payload"])["src"]
            for _, fields in client.xrange(f"{prefix}:out-{topic}")
        ]
        assert set(publisher.acknowledged[topic]) <= set(kept), f"{topic}: an acked entry is gone"
        assert len(out) == len(set(out)), f"{topic}: an entry was published twice"
        assert out == kept, f"{topic}: what the cluster keeps was not published once, in order"


def go_on_then_drain(publisher: ClusterPublisher, query: Any, more: int = 600) -> None:
    sent = publisher.sent
    wait_until(lambda: publisher.sent > sent + more, 120)
    publisher.stop.set()
    publisher.join(30)
    query.processAllAvailable()
    assert query.exception() is None


@pytest.fixture
def replicated() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3, replicas=1) as started:
        yield started


def test_a_slot_migrated_under_a_running_pipeline_loses_and_duplicates_nothing(
    spark: Any, replicated: LocalCluster, prefix: str, tmp_path: Path
) -> None:
    """The slot of the first topic (its input, its output and their markers) moves to the
    next master key by key, 0.3 s apart, while entries keep coming and the query reads and
    publishes: redirected commands follow the keys (ASK while they move, MOVED once moved)."""
    cluster = replicated
    client = RedisCluster.from_url(cluster.url)
    topics = topics_on_each_master(client, prefix)
    publisher = ClusterPublisher(cluster.url, prefix, topics)
    publisher.start()
    query = start_pipeline(spark, cluster.url, prefix, topics, tmp_path / "checkpoint")
    try:
        out = f"{prefix}:out-{topics[0]}"
        wait_until(lambda: client.exists(out) and publisher.sent > 600, 120)
        slot = client.keyslot(out)
        owner = client.get_node_from_key(out).port
        target = next(m for m in cluster.masters if m.port != owner)
        cluster.migrate_slot(slot, target, key_pause_s=0.3)
        client.nodes_manager.initialize()
        assert client.get_node_from_key(out).port == target.port
        go_on_then_drain(publisher, query)
    finally:
        publisher.stop.set()
        query.stop()
    assert_each_kept_entry_published_once(client, prefix, publisher)
    assert all(len(ids) > 300 for ids in publisher.acknowledged.values())


def test_a_failover_under_a_running_pipeline_loses_and_duplicates_nothing(
    spark: Any, replicated: LocalCluster, prefix: str, tmp_path: Path
) -> None:
    """``CLUSTER FAILOVER`` on the replica of the first topic's master: the old master hands
    over and becomes a replica (its clients get MOVED); nothing it acknowledged is lost. With
    ``minReplicas=1`` the source plans only what every master's replica holds, and the sink
    WAITs for the replica after each transaction."""
    cluster = replicated
    client = RedisCluster.from_url(cluster.url)
    topics = topics_on_each_master(client, prefix)
    publisher = ClusterPublisher(cluster.url, prefix, topics)
    publisher.start()
    query = start_pipeline(
        spark, cluster.url, prefix, topics, tmp_path / "checkpoint", minReplicas="1"
    )
    try:
        out = f"{prefix}:out-{topics[0]}"
        wait_until(lambda: client.exists(out) and publisher.sent > 600, 120)
        old = next(m for m in cluster.masters if m.port == client.get_node_from_key(out).port)
        new = cluster.fail_over(old)
        client.nodes_manager.initialize()
        assert client.get_node_from_key(out).port == new.port
        go_on_then_drain(publisher, query)
    finally:
        publisher.stop.set()
        query.stop()
    assert_each_kept_entry_published_once(client, prefix, publisher)


def test_after_a_failover_planning_reads_the_tails_again_and_asks_the_new_masters(
    replicated: LocalCluster, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``minReplicas`` on a cluster whose slot map a failover made stale (no stream of the
    batch on the master that handed over, so no MOVED refreshes it): the old master, asked
    for its replicas, is one now. Planning reads the map again, then the streams' tails (the
    first read may have come from a master since replaced), and asks the new masters."""
    cluster = replicated
    client = RedisCluster.from_url(cluster.url)
    moved, *others = topics_on_each_master(client, prefix)
    for topic in (moved, *others):
        client.xadd(f"{prefix}:{topic}", {"n": "0"})
    options = parse_source_options(
        {"url": cluster.url, "streamPrefix": prefix, "topics": ",".join(others)}
        | {"minReplicas": "1"}
    )
    catalog = StreamCatalog(options.endpoint)
    first = batch_end(catalog, options, {}, max_entries=None)
    old = next(
        m for m in cluster.masters if m.port == client.get_node_from_key(f"{prefix}:{moved}").port
    )
    cluster.fail_over(old)
    tails = {
        f"{prefix}:{topic}": EntryId.parse(client.xadd(f"{prefix}:{topic}", {"n": "1"}).decode())
        for topic in others
    }
    with caplog.at_level("INFO", logger="atlasbus.positions"):
        end = batch_end(catalog, options, first.positions, max_entries=None)
    assert end.positions == tails
    assert caplog.messages == [
        f"127.0.0.1:{old.port} is a replica now (a failover): the streams' tails read again"
    ]


def test_a_master_without_replica_that_dies_stops_the_query_naming_it_then_it_resumes(
    spark: Any, prefix: str, tmp_path: Path
) -> None:
    """A master killed (SIGKILL) with no replica to take over: the query fails with an error
    naming that node; once it is back (its append-only file kept every write), the query
    restarts from its checkpoint and publishes the rest, each entry once."""
    with LocalCluster(masters=3, replicas=0, node_timeout_ms=2_000, appendonly=True) as cluster:
        url = f"{cluster.url}?socket_timeout=3&socket_connect_timeout=1"
        client = RedisCluster.from_url(cluster.url)
        topics = topics_on_each_master(client, prefix)
        publisher = ClusterPublisher(cluster.url, prefix, topics)
        publisher.start()
        checkpoint = tmp_path / "checkpoint"
        query = start_pipeline(spark, url, prefix, topics, checkpoint)
        victim: RedisServer | None = None
        try:
            out = f"{prefix}:out-{topics[1]}"
            wait_until(lambda: client.exists(out) and publisher.sent > 600, 120)
            publisher.stop.set()
            publisher.join(30)
            victim = next(
                m for m in cluster.masters if m.port == client.get_node_from_key(out).port
            )
            victim.kill()
            wait_until(lambda: query.exception() is not None, 120)
            error = str(query.exception())
            assert f"127.0.0.1:{victim.port}" in error, error
            assert "cannot reach" in error or "cluster is down" in error, error
        finally:
            publisher.stop.set()
            query.stop()
        assert victim is not None
        victim.start()
        wait_until(lambda: _cluster_ok(cluster), 60)
        client = RedisCluster.from_url(cluster.url)
        query = start_pipeline(spark, url, prefix, topics, checkpoint)
        try:
            query.processAllAvailable()
            assert query.exception() is None
        finally:
            query.stop()
        assert_each_kept_entry_published_once(client, prefix, publisher)


def _cluster_ok(cluster: LocalCluster) -> bool:
    for master in cluster.masters:
        try:
            with redis.Redis(port=master.port) as node:
                if node.cluster("INFO").get("cluster_state") != "ok":
                    return False
        except redis.RedisError:
            return False
    return True


class Cleaner(threading.Thread):
    """The bus's XDEL-after-ack on a cluster: deletes entries at or before the query's
    mirrored group position, on each stream's master, while the query runs."""

    def __init__(self, url: str, streams: list[str]) -> None:
        super().__init__(daemon=True)
        self.client = RedisCluster.from_url(url)
        self.streams = streams
        self.deleted = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            for stream in self.streams:
                position = group_position(self.client, stream, "query")  # type: ignore[arg-type]
                if position is None:
                    continue
                read = [entry for entry, _ in self.client.xrange(stream, "-", position, count=20)]
                if read:
                    self.deleted += self.client.xdel(stream, *read)


def test_a_growing_bus_on_a_cluster_trimmed_and_deleted_under_it_across_driver_kills(
    spark: Any, tmp_path: Path
) -> None:
    """Topics ``a`` and ``b`` on two masters keep growing while the query (group mirror,
    ``trimConsumed``) is SIGKILLed three times mid-run and restarted from its checkpoint, and
    a cleaner XDELs what the query has read: every published entry is written once."""
    with LocalCluster(masters=3, replicas=0) as cluster:
        client = RedisCluster.from_url(cluster.url)
        prefix = next(
            p
            for p in (f"k{n}" for n in range(1000))
            if client.get_node_from_key(f"{p}:a").name != client.get_node_from_key(f"{p}:b").name
        )
        streams = [f"{prefix}:a", f"{prefix}:b"]
        checkpoint, out, log = tmp_path / "ck", tmp_path / "out", tmp_path / "query.log"
        args = ["--url", cluster.url, "--prefix", prefix, "--checkpoint", str(checkpoint)]
        args += ["--sink", "parquet", "--out", str(out)]
        args += ["--source-option", "group=query", "--source-option", "trimConsumed=true"]
        publisher = ClusterPublisher(cluster.url, prefix, ["a", "b"])
        cleaner = Cleaner(cluster.url, streams)
        publisher.start()
        cleaner.start()
        process = None
        try:
            for kill in range(3):
                process, _ = _start_query(args, log)
                target = len(batch_numbers(checkpoint, "commits")) + 1
                wait_until(lambda t=target: len(batch_numbers(checkpoint, "commits")) >= t, 240)
                time.sleep(0.5 * kill)
                assert publisher.is_alive()  # the streams grow through every kill
                _kill(process, log)
            publisher.stop.set()
            publisher.join(30)
            process, _ = _start_query(args, log)
            ends = {s: client.xrevrange(s, count=1)[0][0] for s in streams}
            wait_until(
                lambda: all(group_position(client, s, "query") == e for s, e in ends.items()), 240
            )  # type: ignore[arg-type]
            _kill(process, log)
        finally:
            _stop_if_running(process)
            publisher.stop.set()
            cleaner.stop.set()
            cleaner.join(30)
    assert publisher.failed == 0
    written = [
        (json.loads(row["payload"])["topic"], json.loads(row["payload"])["n"])
        for row in spark.read.parquet(str(out)).collect()
    ]
    published = [(t, n) for t, ids in publisher.acknowledged.items() for n in range(len(ids))]
    assert Counter(written) == Counter(published)  # no loss, no duplicate
    assert len(published) > 1000 and cleaner.deleted > 0
