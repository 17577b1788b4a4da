"""atlasbus on a Redis Cluster, by the URL of any node: the source finds and reads streams on
every master, and the sink publishes to them exactly once, one lane per hash slot.

A three-master cluster (no replicas: the fault tests, tests/test_cluster_faults.py, have them)
from the suite's redis-server binary, shared by the module. Topics are picked so that their
streams sit on different masters.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis
from redis.cluster import RedisCluster

from atlasbus.bus.connection import RedisEndpoint
from atlasbus.bus.stream_catalog import Advance, StreamCatalog, Walk
from atlasbus.errors import ConfigurationError, PublishError
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.options.sink import parse_sink_options
from atlasbus.publishing.publisher import MARKER_NAMESPACE
from atlasbus.publishing.slot_lanes import SlotLanes, slot_tag
from atlasbus.sandbox.redis_cluster import LocalCluster
from helpers import BatchCollector, envelope, publish, stream_reader, wait_until


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3, replicas=0) as started:
        yield started


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[RedisCluster]:
    with RedisCluster.from_url(cluster.url) as routed:
        yield routed


def topics_on_each_master(client: RedisCluster, prefix: str, per_master: int = 1) -> list[str]:
    """``per_master`` topics for each master, their streams on that master: master by master."""
    wanted: dict[str, list[str]] = {node.name: [] for node in client.get_primaries()}
    for n in range(10_000):
        owner = client.get_node_from_key(f"{prefix}:t{n}").name
        if len(wanted[owner]) < per_master:
            wanted[owner].append(f"t{n}")
        if all(len(found) == per_master for found in wanted.values()):
            return [topic for found in wanted.values() for topic in found]
    raise AssertionError("no topics found for every master")


def node_keys(cluster: LocalCluster, pattern: str) -> dict[int, list[bytes]]:
    """The keys matching ``pattern`` that each master holds itself."""
    return {m.port: sorted(redis.Redis(port=m.port).keys(pattern)) for m in cluster.masters}


def test_the_client_follows_the_cluster_from_any_node(cluster: LocalCluster) -> None:
    for master in cluster.masters:
        endpoint = RedisEndpoint.from_options(master.url, None, None)
        assert endpoint.is_cluster
        assert len(endpoint.client().get_primaries()) == 3  # type: ignore[attr-defined]


def test_a_database_other_than_0_is_refused_naming_the_option(cluster: LocalCluster) -> None:
    port = cluster.masters[0].port
    endpoint = RedisEndpoint.from_options(f"redis://127.0.0.1:{port}/2", None, None)
    with pytest.raises(ConfigurationError) as refused:
        endpoint.client()
    assert str(refused.value) == (
        f"option 'url' selects database 2, but Redis at 127.0.0.1:{port} runs in "
        "cluster mode, which has database 0 only: end the URL with /0 (or no database)"
    )


def test_planning_reads_every_masters_streams_in_one_call(
    cluster: LocalCluster, client: RedisCluster, prefix: str
) -> None:
    topics = topics_on_each_master(client, prefix, per_master=2)
    for index, topic in enumerate(topics):
        publish(client, prefix, topic, index + 1)
    catalog = StreamCatalog(RedisEndpoint.from_options(cluster.url, None, None))
    streams = [f"{prefix}:{topic}" for topic in topics]
    info = catalog.info([*streams, f"{prefix}:absent"])
    assert [info[s].length for s in streams] == [1, 2, 3, 4, 5, 6]  # type: ignore[union-attr]
    assert info[f"{prefix}:absent"] is None
    ranges = {s: (ZERO, info[s].last) for s in streams}  # type: ignore[union-attr]
    assert catalog.first_in_ranges(ranges) == {s: info[s].first for s in streams}  # type: ignore[union-attr]
    walks = [Advance(s, ZERO, EntryId(2**63, 0), None, Walk(piece_size=2)) for s in streams]
    assert catalog.advance_many(walks) == [(info[s].last, info[s].length) for s in streams]  # type: ignore[union-attr]


@pytest.mark.spark
def test_a_pattern_reads_every_stream_on_every_master_once(
    spark: Any, cluster: LocalCluster, client: RedisCluster, prefix: str
) -> None:
    topics = topics_on_each_master(client, prefix, per_master=2)
    published = {
        topic: publish(client, prefix, topic, 500 * (i + 1)) for i, topic in enumerate(topics)
    }
    rows = (
        spark.read.format("atlasbus")
        .option("url", cluster.url)
        .option("streamPrefix", prefix)
        .option("topicPattern", "*")
        .option("maxEntriesPerPartition", "400")
        .load()
        .select("topic", "id", "payload")
        .collect()
    )
    for topic in topics:
        mine = [row for row in rows if row["topic"] == topic]
        assert [row["id"] for row in mine] == published[topic]
        assert [json.loads(row["payload"])["n"] for row in mine] == list(range(len(mine)))
    assert len(rows) == sum(len(ids) for ids in published.values())


class ClusterPublisher(threading.Thread):
    """Publishes numbered envelopes to each topic in turn through redis-py's cluster client
    until stopped; ``sent[topic]`` the IDs Redis acknowledged."""

    def __init__(self, url: str, prefix: str, topics: list[str]) -> None:
        super().__init__(daemon=True)
        self.client = RedisCluster.from_url(url)
        self.prefix, self.topics = prefix, topics
        self.sent: dict[str, list[str]] = {topic: [] for topic in topics}
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for topic in self.topics:
                    n = len(self.sent[topic])
                    entry_id = self.client.xadd(f"{self.prefix}:{topic}", envelope(topic, n))
                    self.sent[topic].append(entry_id.decode())
                time.sleep(0.002)
        except BaseException as exc:  # pragma: no cover - reported by the test
            self.error = exc


@pytest.mark.spark
def test_a_query_reads_a_growing_bus_on_three_masters_and_mirrors_its_group(
    spark: Any, cluster: LocalCluster, client: RedisCluster, prefix: str, tmp_path: Path
) -> None:
    topics = topics_on_each_master(client, prefix)
    for topic in topics:
        publish(client, prefix, topic, 200)
    publisher = ClusterPublisher(cluster.url, prefix, topics)
    collector = BatchCollector(columns=("topic", "id", "payload"))
    query = (
        stream_reader(spark, cluster.url, prefix, topicPattern="*", group="readers")
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    publisher.start()
    try:
        wait_until(lambda: len(collector.batches) >= 4 and len(publisher.sent[topics[0]]) > 300)
        publisher.stop.set()
        publisher.join(30)
        assert publisher.error is None
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        publisher.stop.set()
        query.stop()
    for topic in topics:
        read = [row["id"] for row in collector.rows if row["topic"] == topic]
        held = [entry_id.decode() for entry_id, _ in client.xrange(f"{prefix}:{topic}")]
        assert read == held  # each entry once, in order, none missing
        assert held[200:] == publisher.sent[topic]
        groups = client.xinfo_groups(f"{prefix}:{topic}")
        assert [(g["name"], g["last-delivered-id"]) for g in groups] == [
            (b"readers", held[-1].encode())
        ]


@pytest.mark.spark
def test_the_sink_publishes_to_every_master_once_and_leaves_no_marker(
    spark: Any, cluster: LocalCluster, client: RedisCluster, prefix: str
) -> None:
    topics = topics_on_each_master(client, prefix, per_master=2)
    rows = [(topic, json.dumps({"n": n})) for n in range(400) for topic in topics]
    (
        spark.createDataFrame(rows, "topic string, payload string")
        .repartition(3)
        .sortWithinPartitions("payload")
        .write.format("atlasbus")
        .mode("append")
        .option("url", cluster.url)
        .option("streamPrefix", prefix)
        .save()
    )
    for topic in topics:
        numbers = [
            json.loads(fields[b"payload"])["n"] for _, fields in client.xrange(f"{prefix}:{topic}")
        ]
        assert sorted(numbers) == list(range(400))
    assert node_keys(cluster, f"{prefix}:{MARKER_NAMESPACE}:*") == {
        m.port: [] for m in cluster.masters
    }


@pytest.mark.spark
def test_a_streaming_pipeline_on_the_cluster_publishes_each_entry_once(
    spark: Any, cluster: LocalCluster, client: RedisCluster, prefix: str, tmp_path: Path
) -> None:
    """Source and sink on the cluster; three micro-batches, then a restart that replays
    nothing. Markers of earlier batches are retired from every master."""
    topics = topics_on_each_master(client, prefix)
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> None:
        query = (
            stream_reader(
                spark, cluster.url, prefix, topics=",".join(topics), maxEntriesPerTrigger="300"
            )
            .selectExpr(
                "concat('out-', topic) AS topic", "to_json(named_struct('src', id)) AS payload"
            )
            .writeStream.format("atlasbus")
            .option("url", cluster.url)
            .option("streamPrefix", prefix)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None

    for topic in topics:
        publish(client, prefix, topic, 300)
    run()
    for topic in topics:
        publish(client, prefix, topic, 100, start=300)
    run()
    for topic in topics:
        kept = [entry_id.decode() for entry_id, _ in client.xrange(f"{prefix}:{topic}")]
        out = [
            json.loads(fields[b"payload"])["src"]
            for _, fields in client.xrange(f"{prefix}:out-{topic}")
        ]
        assert out == kept
    markers = [
        key
        for keys in node_keys(cluster, f"{prefix}:{MARKER_NAMESPACE}:*").values()
        for key in keys
    ]
    registries = [key for key in markers if key.endswith(b":markers")]
    assert len(registries) == 1
    lanes = [key for key in markers if not key.endswith(b":markers")]
    registry = json.loads(next(iter(client.hgetall(registries[0].decode()).values())))
    assert sorted(k.encode() for k in registry) == sorted(lanes)  # only the last batch's lanes


def sink_options(url: str, prefix: str, **extra: str) -> Any:
    return parse_sink_options({"url": url, "streamPrefix": prefix, **extra})


def rows(topics: list[str], first: int, count: int) -> pa.RecordBatch:
    names = [topic for n in range(first, first + count) for topic in topics]
    payloads = [json.dumps({"n": n}) for n in range(first, first + count) for _ in topics]
    return pa.RecordBatch.from_pydict({"topic": names, "payload": payloads})


def test_a_retried_task_skips_what_each_lane_published(
    cluster: LocalCluster, client: RedisCluster, prefix: str
) -> None:
    """The first attempt publishes its first batch and dies; the retry sees the same rows and
    publishes only the second batch, in every slot's lane."""
    topics = topics_on_each_master(client, prefix)
    options = sink_options(cluster.url, prefix)
    marker = f"{prefix}:{MARKER_NAMESPACE}:wtest:0"
    with pytest.raises(RuntimeError), SlotLanes(options, marker=marker) as first:
        first.publish(rows(topics, 0, 50))
        raise RuntimeError("the executor dies")
    assert first.published == 150
    with SlotLanes(options, marker=marker) as retry:
        retry.publish(rows(topics, 0, 50))
        retry.publish(rows(topics, 50, 30))
        retry.finish()
    assert (retry.published, retry.skipped) == (90, 150)
    for topic in topics:
        numbers = [
            json.loads(fields[b"payload"])["n"] for _, fields in client.xrange(f"{prefix}:{topic}")
        ]
        assert numbers == list(range(80))
    assert sorted(retry.markers) == sorted(
        f"{marker}:{{{slot_tag(client.keyslot(f'{prefix}:{topic}'))}}}" for topic in topics
    )
    for lane_marker in retry.markers:  # each marker sits in its streams' slot
        topic = next(
            t for t in topics if client.keyslot(f"{prefix}:{t}") == client.keyslot(lane_marker)
        )
        assert client.get(lane_marker).startswith(b"80:")  # type: ignore[union-attr]
        assert topic


def test_a_rejected_row_stops_the_task_before_any_lane_publishes(
    cluster: LocalCluster, client: RedisCluster, prefix: str
) -> None:
    topics = topics_on_each_master(client, prefix)
    batch = pa.RecordBatch.from_pydict(
        {"topic": [*topics, topics[0]], "payload": ['{"n": 0}', '{"n": 1}', '{"n": 2}', "not json"]}
    )
    with (
        pytest.raises(PublishError, match="cannot publish row 3"),
        SlotLanes(sink_options(cluster.url, prefix), marker=None) as lanes,
    ):
        lanes.publish(batch)
    assert [client.exists(f"{prefix}:{topic}") for topic in topics] == [0, 0, 0]


def test_slot_tags_put_a_marker_in_its_slot() -> None:
    from redis.crc import key_slot

    for slot in (0, 1, 5_000, 16_383):
        tag = slot_tag(slot)
        assert key_slot(f"any:prefix:{{{tag}}}".encode()) == slot
        assert tag == next(str(n) for n in range(200_000) if key_slot(str(n).encode()) == slot)


@pytest.mark.spark
def test_the_documented_acl_with_its_cluster_line_reads_and_publishes(
    spark: Any, cluster: LocalCluster, client: RedisCluster
) -> None:
    """docs/operations.md's reader and writer, plus its cluster line, on every node."""
    from test_acl import ACL, PASSWORD, READER_RULES, WRITER_RULES, with_our_password

    prefix = "atlas_bus"  # the documented key pattern
    for master in cluster.masters:
        with redis.Redis(port=master.port) as admin:
            for user, rules in (("reader", READER_RULES), ("writer", WRITER_RULES)):
                admin.execute_command(
                    "ACL", "SETUSER", user, "reset", *with_our_password(rules), *ACL["<user>"]
                )
    topics = topics_on_each_master(client, prefix)
    for topic in topics:
        publish(client, prefix, topic, 20)

    def url(user: str) -> str:
        return cluster.url.replace("redis://", f"redis://{user}:{PASSWORD}@")

    frame = (
        spark.read.format("atlasbus")
        .option("url", url("reader"))
        .option("streamPrefix", prefix)
        .option("topics", ",".join(topics))
        .load()
    )
    assert frame.count() == 60
    frame.selectExpr("concat('copy-', topic) AS topic", "payload").write.format("atlasbus").mode(
        "append"
    ).option("url", url("writer")).option("streamPrefix", prefix).save()
    assert [client.xlen(f"{prefix}:copy-{topic}") for topic in topics] == [20, 20, 20]


def test_planning_follows_ask_to_a_key_that_migrated_before_its_slot(
    cluster: LocalCluster, client: RedisCluster, prefix: str
) -> None:
    """Mid-migration: the stream has moved (MIGRATE), its slot not yet (no SETSLOT NODE), so
    its old master answers ASK; planning asks the new one, with ASKING, and gets the stream."""
    stream = f"{prefix}:asked"
    publish(client, prefix, "asked", 7)
    slot = client.keyslot(stream)
    source = client.get_node_from_key(stream).port
    target = next(m.port for m in cluster.masters if m.port != source)
    nodes = {port: redis.Redis(port=port) for port in (source, target)}
    ids = {port: node.execute_command("CLUSTER", "MYID").decode() for port, node in nodes.items()}
    nodes[target].execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source])
    nodes[source].execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target])
    try:
        for key in nodes[source].execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            nodes[source].execute_command("MIGRATE", "127.0.0.1", target, key, 0, 5000)
        with pytest.raises(redis.exceptions.AskError):
            nodes[source].xlen(stream)
        catalog = StreamCatalog(RedisEndpoint.from_options(cluster.url, None, None))
        assert catalog.info([stream])[stream].length == 7  # type: ignore[union-attr]
        assert catalog.last_at_or_before_each({stream: EntryId(2**63, 0)})[stream] is not None
    finally:
        for port in (target, source, *(m.port for m in cluster.masters)):
            with redis.Redis(port=port) as node:
                node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target])
        for node in nodes.values():
            node.close()


@pytest.mark.parametrize("exactly_once", [True, False], ids=["marker", "no-marker"])
def test_a_lane_whose_slot_moved_goes_on_on_the_new_master(
    cluster: LocalCluster,
    client: RedisCluster,
    prefix: str,
    exactly_once: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The slot moves between two batches of a task: the lane's next chunk meets MOVED, reads
    the slot map again and goes on on the new master, each row once."""
    topics = topics_on_each_master(client, prefix)
    options = sink_options(cluster.url, prefix)
    marker = f"{prefix}:{MARKER_NAMESPACE}:wmoved:0" if exactly_once else None
    RedisEndpoint.from_options(cluster.url, None, None).client()  # the map, before the move
    with SlotLanes(options, marker=marker) as lanes:
        lanes.publish(rows(topics, 0, 10))
        moved = f"{prefix}:{topics[0]}"
        owner = client.get_node_from_key(moved).port
        target = next(m for m in cluster.masters if m.port != owner)
        cluster.migrate_slot(client.keyslot(moved), target)
        lanes.publish(rows(topics, 10, 10))
        lanes.finish()
    assert (lanes.published, lanes.skipped) == (60, 0)
    resumed = [r.getMessage() for r in caplog.records if "publishing again" in r.getMessage()]
    assert len(resumed) == 1 and "MOVED" not in resumed[0] and "moved on the Redis" in resumed[0]
    client.nodes_manager.initialize()
    assert client.get_node_from_key(moved).port == target.port
    for topic in topics:
        numbers = [
            json.loads(fields[b"payload"])["n"] for _, fields in client.xrange(f"{prefix}:{topic}")
        ]
        assert numbers == list(range(20))


@pytest.mark.spark
def test_trim_consumed_and_loss_checks_work_per_stream_on_each_master(
    spark: Any, cluster: LocalCluster, client: RedisCluster, prefix: str, tmp_path: Path
) -> None:
    """``trimConsumed`` trims each stream, on its own master, to what its groups and the
    query consumed; then entries trimmed on one master before the query read them stop the
    query, naming that stream."""
    first, second, _ = topics_on_each_master(client, prefix)
    ids = publish(client, prefix, first, 40)
    other = publish(client, prefix, second, 10)
    client.xgroup_create(f"{prefix}:{first}", "slow", id=ids[19])
    query = (
        stream_reader(spark, cluster.url, prefix, topics=f"{first},{second}", trimConsumed="true")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        query.processAllAvailable()  # the last batch's commit comes with the next trigger
        held = [entry.decode() for entry, _ in client.xrange(f"{prefix}:{first}")]
        assert held == ids[19:]  # the group "slow" stands on the 20th, which is kept
        assert [e.decode() for e, _ in client.xrange(f"{prefix}:{second}")] == other[-1:]
        publish(client, prefix, second, 30, start=10)
        client.xtrim(f"{prefix}:{second}", maxlen=5, approximate=False)  # 25 unread, gone
        with pytest.raises(Exception) as stopped:
            query.processAllAvailable()
        message = str(stopped.value)
        assert f"stream '{prefix}:{second}'" in message, message
        assert "were removed (trimmed or deleted) before the query read them" in message
    finally:
        query.stop()
