"""TLS: the source, the sink and dead-letter routing over ``rediss://``, and TLS mistakes.

Real certificates (``tls_certs``, made with the ``openssl`` binary) and TLS-only redis-servers:
``tls_server`` checks no client certificate (the client verifies the server), ``mtls_server``
requires one signed by the CA (mutual TLS). The URLs are the ones docs/operations.md shows.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus.bus.connection import RedisEndpoint, forget_clients
from atlasbus.dead_letters import DeadLetterTable
from atlasbus.errors import RedisUnavailableError
from atlasbus.sandbox.redis_server import RedisServer, find_redis_server, tls_unsupported_reason
from conftest import in_ci
from helpers import (
    BatchCollector,
    envelope,
    payload_numbers,
    publish,
    run_available_now,
    stream_reader,
)
from tls_certs import Certificates, make_certificates, openssl_missing_reason

# A TLS mistake must fail at once: the handshake is local, there is nothing to wait for.
# The ceiling is generous for a loaded CI machine; Spark's planning is most of it.
FAIL_FAST_SECONDS = 20.0


def _skip_reason() -> str | None:
    try:
        binary = find_redis_server()
    except FileNotFoundError as exc:
        return str(exc)
    return openssl_missing_reason() or tls_unsupported_reason(binary)


SKIP_REASON = _skip_reason()
if SKIP_REASON is not None and in_ci():  # CI installs a redis-server with TLS: never skip there
    raise RuntimeError(f"CI needs a redis-server with TLS and openssl: {SKIP_REASON}")
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=f"TLS tests: {SKIP_REASON}")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_server(certs: Certificates) -> Iterator[RedisServer]:
    with RedisServer(
        tls_cert_file=certs.server.cert,
        tls_key_file=certs.server.key,
        tls_ca_cert_file=certs.ca,
        tls_auth_clients="no",
    ) as server:
        yield server
    forget_clients()


@pytest.fixture(scope="module")
def mtls_server(certs: Certificates) -> Iterator[RedisServer]:
    with RedisServer(
        tls_cert_file=certs.server.cert,
        tls_key_file=certs.server.key,
        tls_ca_cert_file=certs.ca,
        tls_auth_clients="yes",
        tls_client_cert_file=certs.client.cert,
        tls_client_key_file=certs.client.key,
    ) as server:
        yield server
    forget_clients()


def verified_url(server: RedisServer, ca: Path) -> str:
    """Server verification: the server's certificate must chain to ``ca`` and name the host."""
    return f"{server.url}?ssl_cert_reqs=required&ssl_ca_certs={ca}"


def mutual_url(server: RedisServer, certs: Certificates) -> str:
    """Mutual TLS: server verification plus this client's certificate and key."""
    return (
        f"{verified_url(server, certs.ca)}"
        f"&ssl_certfile={certs.client.cert}&ssl_keyfile={certs.client.key}"
    )


@pytest.fixture(scope="module")
def url(tls_server: RedisServer, certs: Certificates) -> str:
    return verified_url(tls_server, certs.ca)


@pytest.fixture(scope="module")
def mtls_url(mtls_server: RedisServer, certs: Certificates) -> str:
    return mutual_url(mtls_server, certs)


@pytest.fixture
def r_tls(url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(url)
    yield client
    client.close()


@pytest.fixture
def r_mtls(mtls_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(mtls_url)
    yield client
    client.close()


def test_the_servers_speak_only_tls(
    tls_server: RedisServer, mtls_server: RedisServer, r_tls: redis.Redis, r_mtls: redis.Redis
) -> None:
    assert tls_server.url.startswith("rediss://127.0.0.1:")
    assert r_tls.ping() and r_mtls.ping()
    assert r_tls.config_get("port") == {"port": "0"}  # no plain-text port
    for server in (tls_server, mtls_server):  # plain text on the TLS port gets no PONG
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as plain:
            plain.sendall(b"PING\r\n")
            try:
                reply = plain.recv(64)
            except OSError:
                reply = b""
        assert not reply.startswith(b"+PONG"), reply


def test_batch_read_with_server_verification(
    spark: Any, r_tls: redis.Redis, url: str, prefix: str
) -> None:
    publish(r_tls, prefix, "orders", 20)
    rows = (
        spark.read.format("atlasbus")
        .option("url", url)
        .option("streamPrefix", prefix)
        .option("topics", "orders")
        .load()
        .collect()
    )
    assert payload_numbers(rows) == list(range(20))
    assert all(row["error"] is None for row in rows)


def test_streaming_read_with_server_verification(
    spark: Any, r_tls: redis.Redis, url: str, prefix: str, tmp_path: Path
) -> None:
    ids = publish(r_tls, prefix, "orders", 30)
    collector = BatchCollector()
    frame = stream_reader(spark, url, prefix, topics="orders", startingOffsets="earliest")
    query = run_available_now(frame, str(tmp_path / "ck"), collector)
    assert query.exception() is None
    assert [row["id"] for row in collector.rows] == ids
    assert payload_numbers(collector.rows) == list(range(30))


def test_sink_writes_with_mutual_tls(
    spark: Any, r_mtls: redis.Redis, mtls_url: str, prefix: str
) -> None:
    frame = spark.createDataFrame(
        [("orders", i % 10, json.dumps({"n": i}), f"corr-{i}") for i in range(25)],
        "topic string, priority int, payload string, correlation_id string",
    )
    frame.write.format("atlasbus").mode("append").option("url", mtls_url).option(
        "streamPrefix", prefix
    ).save()
    entries = r_mtls.xrange(f"{prefix}:orders")
    assert sorted(json.loads(fields[b"payload"])["n"] for _, fields in entries) == list(range(25))

    back = (
        spark.read.format("atlasbus")
        .option("url", mtls_url)
        .option("streamPrefix", prefix)
        .option("topics", "orders")
        .load()
        .collect()
    )
    assert sorted(row["correlation_id"] for row in back) == sorted(f"corr-{i}" for i in range(25))


def test_dead_letter_routing_over_tls(
    spark: Any, r_tls: redis.Redis, url: str, prefix: str, tmp_path: Path
) -> None:
    stream = f"{prefix}:t"
    good = r_tls.xadd(stream, envelope("t", 1)).decode()
    bad = r_tls.xadd(stream, {"payload": "[1]", "priority": "1"}).decode()
    rows = (
        spark.read.format("atlasbus")
        .option("url", url)
        .option("streamPrefix", prefix)
        .option("topics", "t")
        .option("deadLetterTable", str(tmp_path / "dlq"))
        .load()
        .collect()
    )
    assert [row["id"] for row in rows] == [good]
    (letter,) = DeadLetterTable(tmp_path / "dlq").to_arrow().to_pylist()
    assert (letter["stream"], letter["entry_id"], letter["reason"]) == (
        stream,
        bad,
        "not-json-object",
    )


def read_fails(spark: Any, url: str) -> tuple[str, float]:
    """Plan and run a batch read of ``url``; the error's text and how long it took to fail."""
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        spark.read.format("atlasbus").option("url", url).option("topics", "t").load().collect()
    return str(info.value), time.monotonic() - started


def test_wrong_ca_fails_fast_and_says_the_certificate_was_not_verified(
    spark: Any, tls_server: RedisServer, certs: Certificates
) -> None:
    message, seconds = read_fails(spark, verified_url(tls_server, certs.wrong_ca))
    assert seconds < FAIL_FAST_SECONDS, seconds
    assert f"cannot reach Redis at 127.0.0.1:{tls_server.port} (TLS)" in message, message
    assert "CERTIFICATE_VERIFY_FAILED" in message, message
    assert "self-signed certificate in certificate chain" in message, message


def test_hostname_mismatch_fails_fast_and_names_the_address(
    spark: Any, certs: Certificates
) -> None:
    # a certificate for other.example only, signed by the right CA, served at 127.0.0.1
    with RedisServer(
        tls_cert_file=certs.other_name.cert,
        tls_key_file=certs.other_name.key,
        tls_ca_cert_file=certs.ca,
        tls_auth_clients="no",
    ) as server:
        message, seconds = read_fails(spark, verified_url(server, certs.ca))
    assert seconds < FAIL_FAST_SECONDS, seconds
    assert f"cannot reach Redis at 127.0.0.1:{server.port} (TLS)" in message, message
    assert "CERTIFICATE_VERIFY_FAILED" in message, message
    assert "certificate is not valid for '127.0.0.1'" in message, message


def test_missing_client_certificate_fails_fast(
    spark: Any, mtls_server: RedisServer, certs: Certificates
) -> None:
    message, seconds = read_fails(spark, verified_url(mtls_server, certs.ca))
    assert seconds < FAIL_FAST_SECONDS, seconds
    assert f"cannot reach Redis at 127.0.0.1:{mtls_server.port} (TLS)" in message, message


def test_missing_client_certificate_is_named(
    spark: Any, mtls_server: RedisServer, certs: Certificates
) -> None:
    message, _ = read_fails(spark, verified_url(mtls_server, certs.ca))
    assert "client certificate" in message, message


def test_missing_ca_file_fails_fast(spark: Any, tls_server: RedisServer, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-ca.pem"
    message, seconds = read_fails(
        spark, f"{tls_server.url}?ssl_cert_reqs=required&ssl_ca_certs={missing}"
    )
    assert seconds < FAIL_FAST_SECONDS, seconds
    # today "cannot reach Redis at 127.0.0.1:PORT (TLS): Error 2 ... No such file or directory"
    # (the check of the file that names it, coming in connection.py, says "no such file" too)
    assert "no such file" in message.lower(), message


def test_missing_ca_file_is_named(spark: Any, tls_server: RedisServer, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-ca.pem"
    message, _ = read_fails(
        spark, f"{tls_server.url}?ssl_cert_reqs=required&ssl_ca_certs={missing}"
    )
    assert str(missing) in message or "ssl_ca_certs" in message, message
    assert "Check that the server is running" not in message, message


def test_a_tls_sentinel_names_the_tls_master_and_both_are_verified(
    tls_server: RedisServer, certs: Certificates, r_tls: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """``rediss+sentinel://``: TLS to the Sentinels and to the master they name, with the same
    ``ssl_*`` parameters; a wrong CA fails on the Sentinels, before any data moves."""
    config = tmp_path / "sentinel.conf"
    config.write_text(f"sentinel monitor bus 127.0.0.1 {tls_server.port} 1\ntls-replication yes\n")
    with RedisServer(
        config_file=config,
        extra_args=["--sentinel"],
        tls_cert_file=certs.server.cert,
        tls_key_file=certs.server.key,
        tls_ca_cert_file=certs.ca,
        tls_auth_clients="no",
    ) as sentinel:
        url = f"rediss+sentinel://127.0.0.1:{sentinel.port}/bus/0"
        verified = f"{url}?ssl_cert_reqs=required&ssl_ca_certs={certs.ca}"
        endpoint = RedisEndpoint.from_options(verified, None, None)
        endpoint.client().xadd(f"{prefix}:t", {"n": "1"})
        assert r_tls.xlen(f"{prefix}:t") == 1
        assert (
            endpoint.description
            == f"master 'bus' of the Sentinels at 127.0.0.1:{sentinel.port} (TLS)"
        )
        wrong_ca = f"{url}?ssl_cert_reqs=required&ssl_ca_certs={certs.server.cert}"
        endpoint = RedisEndpoint.from_options(wrong_ca + "&socket_timeout=1", None, None)
        with pytest.raises(RedisUnavailableError) as refused:
            endpoint.client()
    assert "certificate verify failed" in str(refused.value)
