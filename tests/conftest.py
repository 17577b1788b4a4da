"""Shared fixtures: one private redis-server and one local SparkSession per test session."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest
import redis

from atlasbus.connection import forget_clients
from atlasbus.redis_server import RedisServer

# Spark starts Python workers with $PYSPARK_PYTHON; it must be this interpreter (and set before
# the JVM starts) or the workers cannot import atlasbus.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.pop("REDIS_URL", None)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server
    forget_clients()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    """A stream prefix no other test uses, so tests never see each other's streams."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark_atlasbus.session import local_session

    session = local_session(
        "atlasbus-tests",
        config={
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.stopTimeout": "30s",
        },
    )
    yield session
    session.stop()
