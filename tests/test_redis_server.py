"""The private redis-server the tests, benchmarks and ``atlasbus demo`` start."""

from __future__ import annotations

import os

import pytest
import redis

from atlasbus.sandbox.redis_server import RedisServer


def test_stop_ends_the_server_and_removes_its_folder() -> None:
    server = RedisServer().start()
    folder = server.folder
    assert folder is not None and (folder / "redis.log").exists()
    assert redis.Redis.from_url(server.url).ping()
    server.stop()
    assert not folder.exists() and server.pid is None
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(server.url, socket_connect_timeout=1).ping()


def test_own_session_keeps_the_server_out_of_the_callers_process_group() -> None:
    with RedisServer(own_session=True) as server:
        assert server.pid is not None
        assert os.getsid(server.pid) == server.pid != os.getsid(0)
    with RedisServer() as server:
        assert server.pid is not None
        assert os.getsid(server.pid) == os.getsid(0)


def test_a_server_that_cannot_start_is_reported_with_its_log() -> None:
    with RedisServer() as first:
        second = RedisServer(port=first.port)
        with pytest.raises(RuntimeError, match=r"(?s)exited with code 1: .*Address already in use"):
            second.start()
        assert second.folder is None and second.pid is None
        assert redis.Redis.from_url(first.url).ping()
