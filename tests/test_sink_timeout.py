"""A Redis that hangs under a batch write: the write fails within one read timeout, not two.

The hung server is a real one behind a small TCP proxy (``FreezingProxy``, below) that forwards
faithfully until it sees a chosen word in what a client sends, then forwards nothing more, in
either direction, on any connection, old or new, while still accepting connections: what a
client sees of a Redis that stopped answering mid-write (SIGSTOP, a long fork on a starved
machine). The connection's handshake, the marker's ``WATCH``/``GET`` and the ``TYPE`` check of
the hanging task all pass; its first transaction is the one left unanswered.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from helpers import completed_tasks, wait_until

READ_TIMEOUT_S = 5
HANG_WORD = b"hang-here"


class FreezingProxy:
    """Forward loopback TCP to ``target`` until a client sends ``word``; then go silent.

    Runs in threads of the test process. Once frozen it keeps reading (and dropping) what
    clients send, so no sender blocks on a full buffer, and keeps accepting connections,
    which it never answers.
    """

    def __init__(self, target: tuple[str, int], word: bytes) -> None:
        self.target = target
        self.word = word
        self.frozen_at: float | None = None
        self._frozen = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            ready, _, _ = select.select([self._listener], [], [], 0.1)
            if not ready:
                continue
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._keep(client)
            server = None
            if not self._frozen.is_set():
                server = socket.create_connection(self.target)
                self._keep(server)
            thread = threading.Thread(target=self._pump, args=(client, server), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _pump(self, client: socket.socket, server: socket.socket | None) -> None:
        """Carry bytes both ways for one connection (no server: frozen from the start)."""
        peers = [client] if server is None else [client, server]
        tail = b""
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select(peers, [], [], 0.1)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        seen, tail = tail + data, data[-len(self.word) :]
                        if self.word in seen and not self._frozen.is_set():
                            self.frozen_at = time.monotonic()
                            self._frozen.set()
                    if self._frozen.is_set() or server is None:
                        continue  # a hung server reads nothing and answers nothing
                    (server if sock is client else client).sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()
        for thread in self._threads:
            thread.join(timeout=5)


@pytest.fixture
def proxy(redis_url: str) -> Iterator[FreezingProxy]:
    parts = urlsplit(redis_url)
    running = FreezingProxy((parts.hostname or "127.0.0.1", parts.port or 6379), HANG_WORD)
    yield running
    running.close()


def test_a_batch_write_to_a_redis_that_hangs_fails_within_one_read_timeout(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, proxy: FreezingProxy
) -> None:
    """Partition 0 publishes and finishes; then Redis hangs in partition 1's first transaction.

    The task fails after ``socket_timeout``; the job's abort then finds partition 0's marker
    to clean up, on the same hung server. It must not wait a second full timeout for it.
    A rerun of the whole write, on a Redis that answers again, publishes every row: the
    marker the abort left behind belongs to the failed write alone.
    """
    release = f"{prefix}:release"

    def rows(batches: Iterator[Any]) -> Iterator[Any]:
        """Partition 0: three rows. Partition 1 waits until partition 0 has finished, then
        has ten rows carrying the word that hangs the proxy."""
        import pyarrow as pa
        import redis as redis_client

        for batch in batches:
            for part in batch.column("id").to_pylist():
                if part == 0:
                    payloads = [json.dumps({"n": n}) for n in range(3)]
                else:
                    with redis_client.Redis.from_url(redis_url, socket_timeout=None) as client:
                        client.blpop([release], timeout=120)
                    word = HANG_WORD.decode()
                    payloads = [json.dumps({"n": 100 + n, "w": word}) for n in range(10)]
                yield pa.record_batch({"payload": pa.array(payloads)})

    frame = spark.range(0, 2, numPartitions=2).mapInArrow(rows, "payload string")
    group = f"hang-{prefix}"

    def release_when_partition_0_is_done() -> None:
        try:
            wait_until(lambda: completed_tasks(spark, group) >= 1)
        finally:
            r.rpush(release, "go")

    def save(url: str) -> None:
        (
            frame.write.format("atlasbus")
            .mode("append")
            .option("url", url)
            .option("streamPrefix", prefix)
            .option("topic", "t")
            .save()
        )

    hung_url = (
        f"redis://127.0.0.1:{proxy.port}/0"
        f"?socket_timeout={READ_TIMEOUT_S}&socket_connect_timeout={READ_TIMEOUT_S}"
    )
    spark.sparkContext.setJobGroup(group, "a batch write to a Redis that hangs")
    helper = threading.Thread(target=release_when_partition_0_is_done)
    helper.start()
    began = time.monotonic()
    try:
        with pytest.raises(Exception, match="did not answer") as caught:
            save(hung_url)
        failed = time.monotonic()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        r.rpush(release, "go")
        helper.join(timeout=300)
    assert proxy.frozen_at is not None, "the write never reached the hanging transaction"
    hung_for = failed - proxy.frozen_at
    print(f"save() took {failed - began:.1f} s, {hung_for:.1f} s of them on the hung server")
    assert hung_for < 2 * READ_TIMEOUT_S, f"failed {hung_for:.1f} s after Redis hung"
    assert f"Redis at 127.0.0.1:{proxy.port} did not answer within {READ_TIMEOUT_S} s" in str(
        caught.value
    )
    assert "the limit is the URL parameter socket_timeout" in str(caught.value)

    # partition 0 was published, partition 1's transaction never reached Redis
    stream = f"{prefix}:t"
    assert sorted(json.loads(f[b"payload"])["n"] for _, f in r.xrange(stream)) == [0, 1, 2]
    # the rerun is a new write (a new write ID): partition 0's leftover marker skips nothing
    save(redis_url)  # partition 1 takes the "go" pushed above
    assert sorted(json.loads(f[b"payload"])["n"] for _, f in r.xrange(stream)) == [
        0,
        0,
        1,
        1,
        2,
        2,
        *range(100, 110),
    ]


def test_the_tls_handshake_is_bounded_by_socket_timeout_not_the_connect_timeout() -> None:
    """What docs/operations.md's timeout table says: TCP connect within
    ``socket_connect_timeout``, then the TLS handshake within ``socket_timeout`` (redis-py sets
    the read timeout on the socket before it wraps it in TLS). The listener accepts and never
    answers the client's hello."""
    from atlasbus.bus.connection import RedisEndpoint
    from atlasbus.errors import RedisUnavailableError

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    url = f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=none&socket_connect_timeout=0.5&socket_timeout=2"
    endpoint = RedisEndpoint.from_options(url, None, None)
    began = time.monotonic()
    try:
        with pytest.raises(RedisUnavailableError) as caught:
            endpoint.client()
        elapsed = time.monotonic() - began
    finally:
        listener.close()
    assert 1.8 < elapsed < 3.5, f"took {elapsed:.1f} s"
    assert "then the TLS handshake within 2 s" in str(caught.value)


def test_a_failed_writes_marker_clean_up_takes_about_a_second_whatever_the_server_does(
    r: redis.Redis, redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The abort's clean-up (``discard_markers``) on its own, without Spark: on a healthy server
    it deletes the markers; on one that accepts and never answers it gives up after
    ``DISCARD_MARKERS_WITHIN_S``, not the URL's 30 s; on a closed port at once (a refused
    connection is not retried); either way it says what it left."""
    from atlasbus.bus.connection import RedisEndpoint
    from atlasbus.publishing.publisher import DISCARD_MARKERS_WITHIN_S, discard_markers

    keys = [f"{prefix}:__atlasbus_sink__:wtest:{n}" for n in range(3)]
    for key in keys:
        r.set(key, "3:")
    healthy = RedisEndpoint.from_options(redis_url, None, None)
    assert discard_markers(healthy, keys) == 0
    assert r.exists(*keys) == 0

    listener = socket.create_server(("127.0.0.1", 0))
    hung_port = listener.getsockname()[1]
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    try:
        # a hung server is waited for DISCARD_MARKERS_WITHIN_S; a refused connection is not
        # retried (connection._retry), so a closed port fails at once
        reasons = {
            hung_port: f"Redis at 127.0.0.1:{hung_port} did not answer within 1 s",
            closed_port: (
                f"cannot reach Redis at 127.0.0.1:{closed_port}: Error 111 connecting to "
                f"127.0.0.1:{closed_port}"
            ),
        }
        for port, reason in reasons.items():
            url = f"redis://127.0.0.1:{port}/0?socket_timeout=30&socket_connect_timeout=30"
            caplog.clear()
            began = time.monotonic()
            with caplog.at_level("WARNING", logger="atlasbus.publisher"):
                assert discard_markers(RedisEndpoint.from_options(url, None, None), keys) == 3
            elapsed = time.monotonic() - began
            if port == hung_port:
                assert DISCARD_MARKERS_WITHIN_S <= elapsed < DISCARD_MARKERS_WITHIN_S + 1
            else:
                assert elapsed < DISCARD_MARKERS_WITHIN_S, f"took {elapsed:.2f} s"
            assert caplog.messages == [
                f"the failed batch write left 3 exactly-once marker(s) behind (e.g. {keys[0]!r}): "
                f"deleting them failed ({reason}). No later write reads them; they expire "
                "within 7 days."
            ]
        # a finished write's clean-up (the commit) is as bounded, and says so
        url = f"redis://127.0.0.1:{hung_port}/0?socket_timeout=30"
        caplog.clear()
        with caplog.at_level("WARNING", logger="atlasbus.publisher"):
            left = discard_markers(
                RedisEndpoint.from_options(url, None, None), keys, write="finished"
            )
        assert left == 3
        assert caplog.messages[0].startswith("the finished batch write left 3 exactly-once")
        # a finished write's clean-up (the commit) is as bounded, and says so
        url = f"redis://127.0.0.1:{hung_port}/0?socket_timeout=30"
        caplog.clear()
        with caplog.at_level("WARNING", logger="atlasbus.publisher"):
            left = discard_markers(
                RedisEndpoint.from_options(url, None, None), keys, write="finished"
            )
        assert left == 3
        assert caplog.messages[0].startswith("the finished batch write left 3 exactly-once")
    finally:
        listener.close()
