"""The publisher's core (atlasbus.publishing.publisher) on a real Redis, without Spark.

tests/test_sink.py covers retries that skip what an earlier attempt published, inputs that lost
rows, concurrent attempts, at-least-once, and transactions cut by size; this file covers the
rest: markers, entry IDs, chunks by row count, refused XADDs, the connection handed back, and
the driver's marker housekeeping.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import redis

from atlasbus.errors import PublishError
from atlasbus.options.sink import SinkOptions, parse_sink_options
from atlasbus.publishing.publisher import (
    ANCHOR_ROWS,
    CHUNK_ROWS,
    MARKER_TTL_SECONDS,
    Publisher,
    delete_markers,
    marker_key,
    marker_registry_key,
    retire_streaming_markers,
)
from atlasbus.sandbox.redis_server import RedisServer


def sink(redis_url: str, prefix: str, **extra: str) -> SinkOptions:
    return parse_sink_options({"url": redis_url, "streamPrefix": prefix, "topic": "t", **extra})


def numbered(start: int, stop: int) -> pa.RecordBatch:
    return pa.record_batch(
        {"payload": pa.array([json.dumps({"n": n}) for n in range(start, stop)])}
    )


def numbers(r: redis.Redis, stream: str) -> list[int]:
    return [json.loads(fields[b"payload"])["n"] for _, fields in r.xrange(stream)]


def exec_calls(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_exec", {}).get("calls", 0))


def test_markers_live_under_the_stream_prefix(redis_url: str) -> None:
    options = sink(redis_url, "bus")
    assert marker_key(options, "w1", 3) == "bus:__atlasbus_sink__:w1:3"
    assert marker_registry_key(options, "q1") == "bus:__atlasbus_sink__:q1:markers"


def test_entry_ids_are_collected_in_input_order(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = sink(redis_url, prefix)
    for marker in (None, marker_key(options, "wids", 0)):
        with Publisher(options, marker=marker, collect_entry_ids=True) as publisher:
            publisher.publish(numbered(0, 3))
            publisher.publish(numbered(3, 5))
        assert publisher.entry_ids is not None
        stream = r.xrange(f"{prefix}:t")[-5:]
        assert publisher.entry_ids == [entry_id.decode() for entry_id, _ in stream]
    with Publisher(options, marker=None) as plain:
        plain.publish(numbered(0, 1))
    assert plain.entry_ids is None


def test_an_empty_batch_publishes_nothing_and_touches_no_marker(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = sink(redis_url, prefix)
    marker = marker_key(options, "wempty", 0)
    with Publisher(options, marker=marker) as publisher:
        publisher.publish(numbered(0, 0))
        publisher.finish()
    assert (publisher.published, publisher.skipped) == (0, 0)
    assert r.exists(marker, f"{prefix}:t") == 0


def test_chunks_of_rows_are_one_transaction_each_and_the_marker_keeps_the_last_fingerprints(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = sink(redis_url, prefix)
    marker = marker_key(options, "wchunks", 0)
    rows = 2 * CHUNK_ROWS + 500
    before = exec_calls(r)
    with Publisher(options, marker=marker) as publisher:
        publisher.publish(numbered(0, rows))
    assert exec_calls(r) - before == 3
    assert numbers(r, f"{prefix}:t") == list(range(rows))
    count, _, anchors = (r.get(marker) or b"").decode().partition(":")
    assert int(count) == rows and len(anchors.split(",")) == ANCHOR_ROWS
    assert 0 < r.ttl(marker) <= MARKER_TTL_SECONDS


def test_a_count_only_marker_of_atlasbus_0_1_skips_rows_by_position(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = sink(redis_url, prefix)
    marker = marker_key(options, "wold", 0)
    r.set(marker, "30")
    with Publisher(options, marker=marker) as retry:
        retry.publish(numbered(0, 20))
        retry.publish(numbered(20, 50))
        retry.finish()
    assert (retry.skipped, retry.published) == (30, 20)
    assert numbers(r, f"{prefix}:t") == list(range(30, 50))
    assert (r.get(marker) or b"").startswith(b"50:")


def test_a_marker_that_is_not_a_row_count_is_refused_naming_it(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = sink(redis_url, prefix)
    marker = marker_key(options, "wforeign", 0)
    r.set(marker, "hello")
    with pytest.raises(PublishError) as caught, Publisher(options, marker=marker) as publisher:
        publisher.publish(numbered(0, 5))
    assert str(caught.value) == (
        f"exactly-once marker {marker!r} holds b'hello', not a row count: was it written by "
        "something else? Delete it or set exactlyOnce=false"
    )
    assert r.exists(f"{prefix}:t") == 0


def test_an_xadd_redis_refuses_fails_the_task_naming_the_stream(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = sink(redis_url, prefix, exactlyOnce="false")
    r.set(f"{prefix}:t", "a string, not a stream")
    with pytest.raises(PublishError) as caught, Publisher(options, marker=None) as publisher:
        publisher.publish(numbered(0, 3))
    assert str(caught.value) == (
        f"cannot publish to '{prefix}:t': that key holds a Redis string, not a stream; nothing "
        "of this batch was published. Rename or delete the key, or publish to another topic "
        "(or streamPrefix)"
    )
    assert publisher.published == 0


def test_xadds_refused_when_queued_leave_the_marker_so_a_retry_publishes_them() -> None:
    """Redis refuses commands at MULTI time when over maxmemory: EXEC then runs nothing."""
    with RedisServer() as server, redis.Redis.from_url(server.url) as r:
        options = sink(server.url, "p")
        marker = marker_key(options, "woom", 0)
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", "1")
        with pytest.raises(PublishError) as caught, Publisher(options, marker=marker) as attempt:
            attempt.publish(numbered(0, 3))
        assert str(caught.value).startswith(
            "Redis refused the XADDs of rows 0..2 (e.g. to stream 'p:t'): command not allowed "
            "when used memory > 'maxmemory'"
        )
        assert str(caught.value).endswith("; nothing of them was published")
        assert r.exists(marker, "p:t") == 0
        r.config_set("maxmemory", "0")
        with Publisher(options, marker=marker) as retry:
            retry.publish(numbered(0, 3))
        assert (retry.skipped, retry.published) == (0, 3)
        assert numbers(r, "p:t") == [0, 1, 2]


def test_xadds_refused_when_executed_leave_the_marker_so_a_retry_publishes_them(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = sink(redis_url, prefix)
    marker = marker_key(options, "wrefused", 0)
    r.set(f"{prefix}:t", "a string, not a stream")
    with pytest.raises(PublishError) as caught, Publisher(options, marker=marker) as attempt:
        attempt.publish(numbered(0, 3))
    assert str(caught.value).startswith(
        f"cannot publish to '{prefix}:t': that key holds a Redis string, not a stream; nothing "
        "of this batch was published."
    )
    assert attempt.published == 0
    assert r.get(marker) is None  # no transaction ran: nothing counted
    r.delete(f"{prefix}:t")  # the key is fixed, the task retried
    with Publisher(options, marker=marker) as retry:
        retry.publish(numbered(0, 3))
    assert (retry.skipped, retry.published) == (0, 3)
    assert numbers(r, f"{prefix}:t") == [0, 1, 2]


def test_the_connection_goes_back_to_the_pool_without_its_watch(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    """A WATCH left on a pooled connection would abort the next user's transaction."""
    options = sink(redis_url, prefix)
    marker = marker_key(options, "wwatch", 0)
    with Publisher(options, marker=marker) as publisher:
        publisher.publish(numbered(0, 10))
    r.set(marker, "changed")  # what the publisher watched changes after it is done
    client = options.endpoint.client()
    pipe = client.pipeline(transaction=True)  # on the connection the publisher gave back
    pipe.set(f"{prefix}:after", "1")
    assert pipe.execute() == [True]


def test_a_failed_attempt_closes_its_connection_and_the_next_user_gets_clean_replies(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = sink(redis_url, prefix)
    marker = marker_key(options, "wfail", 0)
    with pytest.raises(RuntimeError), Publisher(options, marker=marker) as publisher:
        publisher.publish(numbered(0, 10))
        raise RuntimeError("the task's input failed")
    assert options.endpoint.client().ping() is True
    with Publisher(options, marker=marker) as retry:
        retry.publish(numbered(0, 12))
    assert (retry.skipped, retry.published) == (10, 2)


def test_a_sink_with_a_dead_letter_table_needs_somewhere_to_record_rejects(
    redis_url: str, prefix: str
) -> None:
    options = sink(redis_url, prefix, deadLetterTable="/tmp/unused-dlq")
    with pytest.raises(ValueError, match="needs somewhere to record rejects"):
        Publisher(options, marker=None)


# --- marker housekeeping on the driver -----------------------------------------------------------


def test_delete_markers_drops_the_keys_given_and_nothing_else(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = sink(redis_url, prefix)
    keys = [marker_key(options, "wdone", p) for p in range(3)]
    for key in keys:
        r.set(key, "1:")
    delete_markers(options.endpoint, [keys[0], keys[1], keys[0]])
    assert [r.exists(key) for key in keys] == [0, 0, 1]
    delete_markers(options.endpoint, [])  # nothing to do: no command at all


def test_each_streaming_commit_keeps_its_markers_and_drops_those_of_earlier_batches(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    options = sink(redis_url, prefix)
    registry = marker_registry_key(options, "q1")

    def markers_of(batch: int) -> list[str]:
        keys = [marker_key(options, f"qq1:{batch}", p) for p in range(2)]
        for key in keys:
            r.set(key, "1:")
        return keys

    first, second, third = markers_of(0), markers_of(1), markers_of(2)
    retire_streaming_markers(options, "q1", 0, first)
    assert r.hkeys(registry) == [b"0"] and all(r.exists(k) for k in first)
    retire_streaming_markers(options, "q1", 1, second)
    retire_streaming_markers(options, "q1", 1, second)  # a commit retried: the same outcome
    assert r.hkeys(registry) == [b"1"]
    assert json.loads(r.hget(registry, "1") or b"[]") == sorted(second)
    assert [r.exists(k) for k in first + second] == [0, 0, 1, 1]
    retire_streaming_markers(options, "q1", 2, third)
    assert [r.exists(k) for k in second + third] == [0, 0, 1, 1]
    assert 0 < r.ttl(registry) <= MARKER_TTL_SECONDS
    other = marker_registry_key(options, "q2")
    retire_streaming_markers(options, "q2", 0, [])  # another query's registry is its own
    assert r.hkeys(other) == [b"0"] and r.hkeys(registry) == [b"2"]
