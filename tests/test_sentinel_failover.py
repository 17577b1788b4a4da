"""A ``SENTINEL FAILOVER`` under a running query: the source and the sink, both on a
``redis+sentinel://`` URL with ``minReplicas=1``, follow the master to the replica that takes
over, while a publisher keeps publishing; what the final master holds is read once and
published once, and the bus tools see it.

Slow tier: a master, a replica and three Sentinels of their own, and a failover that takes the
Sentinels a few seconds to agree on.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus import cli
from atlasbus.bus.connection import RedisEndpoint
from atlasbus.sandbox.redis_sentinel import LocalSentinels
from helpers import BatchCollector, envelope, stream_reader, wait_until

PUBLISH_EVERY_S = 0.005


@pytest.fixture
def sentinels() -> Iterator[LocalSentinels]:
    with LocalSentinels(replicas=1, sentinels=3) as started:
        yield started


class Publisher(threading.Thread):
    """Publishes envelopes through the Sentinel URL; each entry counts once a replica holds it
    (XADD then WAIT 1), and one that fails or is not replicated is published again, as a new
    entry. What the final master keeps is the truth the test compares against."""

    def __init__(self, url: str, stream: str) -> None:
        super().__init__(daemon=True)
        self.endpoint = RedisEndpoint.from_options(url, None, None)
        self.stream = stream
        self.stop = threading.Event()
        self.sent = 0
        self.retried = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    pipe = self.endpoint.client().pipeline(transaction=False)
                    pipe.xadd(self.stream, envelope("in", self.sent))
                    pipe.execute_command("WAIT", 1, 2000)
                    _, replicas = pipe.execute()
                    if int(replicas) < 1:
                        raise RuntimeError("not replicated")
                    self.sent += 1
                except Exception:
                    self.retried += 1
                    time.sleep(0.05)
                time.sleep(PUBLISH_EVERY_S)
        except BaseException as exc:  # pragma: no cover - reported by the test
            self.error = exc


def payload_sources(client: redis.Redis, stream: str) -> list[str]:
    return [json.loads(fields[b"payload"])["src"] for _, fields in client.xrange(stream)]


def test_a_failover_under_a_running_query_loses_and_duplicates_nothing(
    spark: Any, sentinels: LocalSentinels, prefix: str, tmp_path: Path
) -> None:
    url = sentinels.url
    publisher = Publisher(url, f"{prefix}:in")
    publisher.start()
    query = _start_query(spark, url, prefix, tmp_path)
    try:
        old_master = redis.Redis(port=sentinels.master.port)
        wait_until(lambda: old_master.exists(f"{prefix}:out") and publisher.sent > 300, 120)
        new_port = _fail_over(sentinels)
        _go_on_then_drain(publisher, query)
    finally:
        publisher.stop.set()
        query.stop()
    published = _assert_each_kept_entry_published_once(
        redis.Redis(port=new_port), prefix, publisher
    )
    # the bus tools follow the master too
    status = _status(url, prefix)
    assert f"{prefix}:in   {len(published):>6}" in status
    assert f"{prefix}:out  {len(published):>6}" in status


def test_a_master_killed_under_a_running_query_is_replaced_and_nothing_is_lost(
    spark: Any, prefix: str, tmp_path: Path
) -> None:
    """SIGKILL of the master: the Sentinels find it down after ``down_after_ms``, elect a
    leader and promote the replica; meanwhile the query's connections wait for them (up to the
    URL's socket_timeout), then go on on the new master. Two replicas: the one not promoted
    is what ``minReplicas=1`` counts on afterwards."""
    with LocalSentinels(replicas=2, sentinels=3, down_after_ms=2_000) as sentinels:
        url = sentinels.url
        publisher = Publisher(url, f"{prefix}:in")
        publisher.start()
        query = _start_query(spark, url, prefix, tmp_path)
        try:
            old_master = redis.Redis(port=sentinels.master.port)
            wait_until(lambda: old_master.exists(f"{prefix}:out") and publisher.sent > 300, 120)
            sentinels.master.kill()
            replicas = {("127.0.0.1", replica.port) for replica in sentinels.replicas}
            wait_until(lambda: sentinels.master_address() in replicas, 60)
            new_port = sentinels.master_address()[1]
            _go_on_then_drain(publisher, query)
        finally:
            publisher.stop.set()
            query.stop()
        _assert_each_kept_entry_published_once(redis.Redis(port=new_port), prefix, publisher)


def test_a_query_reading_through_a_failover_passes_on_only_what_survives_it(
    spark: Any, sentinels: LocalSentinels, prefix: str, tmp_path: Path
) -> None:
    """The source alone (no sink whose WAIT would hold the batches back): entries the old
    master took after the replica was promoted, and lost with it, are never passed on."""
    url = sentinels.url
    publisher = Publisher(url, f"{prefix}:in")
    publisher.start()
    collector = BatchCollector(columns=("id",))
    query = (
        stream_reader(spark, url, prefix, topics="in", minReplicas="1")
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: len(collector.rows) > 300, 120)
        new_port = _fail_over(sentinels)
        _go_on_then_drain(publisher, query)
    finally:
        publisher.stop.set()
        query.stop()
    kept = [entry_id.decode() for entry_id, _ in redis.Redis(port=new_port).xrange(f"{prefix}:in")]
    read = [row["id"] for row in collector.rows]
    assert len(read) == len(set(read)), "an entry was read twice"
    assert sorted(read) == sorted(kept), "the query read what the final master does not keep"


def _fail_over(sentinels: LocalSentinels) -> int:
    """``SENTINEL FAILOVER``; the port of the replica that is master once the Sentinels say so."""
    with redis.Redis(port=sentinels.sentinels[0].port) as sentinel:
        sentinel.execute_command("SENTINEL", "FAILOVER", sentinels.master_name)
    new_port = sentinels.replicas[0].port
    wait_until(lambda: sentinels.master_address() == ("127.0.0.1", new_port), 60)
    return new_port


def _start_query(spark: Any, url: str, prefix: str, tmp_path: Path) -> Any:
    """Topic ``in`` to topic ``out``, each output payload naming the entry ID it came from."""
    frame = stream_reader(spark, url, prefix, topics="in", minReplicas="1")
    return (
        frame.selectExpr("'out' AS topic", "to_json(named_struct('src', id)) AS payload")
        .writeStream.format("atlasbus")
        .option("url", url)
        .option("streamPrefix", prefix)
        .option("minReplicas", "1")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def _go_on_then_drain(publisher: Publisher, query: Any) -> None:
    """Publish 600 more after the failover, stop, and let the query read all there is."""
    sent_at_failover = publisher.sent
    wait_until(lambda: publisher.sent > sent_at_failover + 600, 120)
    publisher.stop.set()
    publisher.join(30)
    assert publisher.error is None
    query.processAllAvailable()
    assert query.exception() is None


def _assert_each_kept_entry_published_once(
    master: redis.Redis, prefix: str, publisher: Publisher
) -> list[str]:
    kept = [entry_id.decode() for entry_id, _ in master.xrange(f"{prefix}:in")]
    published = payload_sources(master, f"{prefix}:out")
    assert len(kept) >= publisher.sent > 900
    assert len(published) == len(set(published)), "an entry was published twice"
    assert sorted(published) == sorted(kept), "what the final master keeps was not read once"
    return published


def _status(url: str, prefix: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["status", "--url", url, "--stream-prefix", prefix]) == 0
    return out.getvalue()
