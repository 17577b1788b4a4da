"""The least Redis ACL that docs/operations.md documents is enough, and nothing less is.

The rules are read out of the document's code blocks (not copied here), so the document and
this test cannot drift apart: a user made with exactly the documented ``ACL SETUSER`` runs
every feature (batch and streaming reads, a consumer group, the sink, a dead-letter replay) on
database 0 and on another database; a user missing one permission gets an error that names
the user, the command and what to run.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus.bus.connection import RedisEndpoint, forget_clients
from atlasbus.dead_letters import DeadLetterTable, replay_dead_letters
from atlasbus.sandbox.redis_server import RedisServer
from helpers import BatchCollector, envelope, payload_numbers, run_available_now

OPERATIONS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
PREFIX = "atlas_bus"  # the documented key pattern is ~atlas_bus:*
PASSWORD = "acl-test-pw"


def documented_acl() -> dict[str, list[str]]:
    """The documented ``ACL SETUSER`` rules by user name, from the ACL section's code blocks."""
    text = OPERATIONS.read_text()
    section = text.split("## The least Redis ACL", 1)[1].split("\n## ", 1)[0]
    users: dict[str, list[str]] = {}
    for block in re.findall(r"```[^\n]*\n(.*?)```", section, re.DOTALL):
        words = block.replace("\\\n", " ").split()
        if words[:2] == ["ACL", "SETUSER"]:
            users[words[2]] = words[3:]
    return users


ACL = documented_acl()
READER_RULES = next(rules for name, rules in ACL.items() if "reader" in name)
WRITER_RULES = next(rules for name, rules in ACL.items() if "writer" in name)
DATABASES = [pytest.param(0, id="db0"), pytest.param(1, id="db1")]  # db 1 needs +select


def with_our_password(rules: list[str]) -> list[str]:
    """The documented rules with the documented ``>secret`` swapped for this test's password."""
    return [f">{PASSWORD}" if rule.startswith(">") else rule for rule in rules]


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        admin = redis.Redis(port=server.port)
        admin.execute_command("ACL", "SETUSER", "reader", "reset", *with_our_password(READER_RULES))
        admin.execute_command("ACL", "SETUSER", "writer", "reset", *with_our_password(WRITER_RULES))
        for name, rules, dropped in (
            ("reader-no-xinfo", READER_RULES, ("+xinfo",)),
            ("writer-no-type", WRITER_RULES, ("+type",)),
            # documented as needed only with `group` and `topicPattern`
            ("reader-plain", READER_RULES, ("+xgroup", "+scan")),
        ):
            kept = [rule for rule in rules if not rule.lower().startswith(dropped)]
            assert len(kept) < len(rules), f"the documented ACL has no {dropped}"
            admin.execute_command("ACL", "SETUSER", name, "reset", *with_our_password(kept))
        admin.close()
        yield server
    forget_clients()


def url(server: RedisServer, user: str, db: int) -> str:
    return f"redis://{user}:{PASSWORD}@127.0.0.1:{server.port}/{db}"


def admin(server: RedisServer, db: int) -> redis.Redis:
    return redis.Redis(port=server.port, db=db)


def publish(client: redis.Redis, topic: str, count: int, **overrides: Any) -> list[str]:
    return [
        client.xadd(f"{PREFIX}:{topic}", envelope(topic, n, **overrides)).decode()
        for n in range(count)
    ]


def topic() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.mark.spark
@pytest.mark.parametrize("db", DATABASES)
def test_documented_reader_reads_in_batch_and_streaming(
    spark: Any, acl_server: RedisServer, db: int, tmp_path: Path
) -> None:
    name = topic()
    with admin(acl_server, db) as client:
        publish(client, name, 5)
    reader_url = url(acl_server, "reader", db)

    rows = (
        spark.read.format("atlasbus")
        .option("url", reader_url)
        .option("streamPrefix", PREFIX)
        .option("topics", name)
        .load()
        .collect()
    )
    assert payload_numbers(rows) == [0, 1, 2, 3, 4]

    # topicPattern uses SCAN (documented as +scan)
    collector = BatchCollector()
    frame = (
        spark.readStream.format("atlasbus")
        .option("url", reader_url)
        .option("streamPrefix", PREFIX)
        .option("topicPattern", f"{name}*")
        .load()
    )
    query = run_available_now(frame, str(tmp_path / "checkpoint"), collector)
    assert query.exception() is None
    assert payload_numbers(collector.rows) == [0, 1, 2, 3, 4]


@pytest.mark.spark
def test_a_reader_without_group_or_pattern_needs_no_xgroup_nor_scan(
    spark: Any, acl_server: RedisServer, tmp_path: Path
) -> None:
    name = topic()
    with admin(acl_server, 0) as client:
        publish(client, name, 3)
    frame = (
        spark.readStream.format("atlasbus")
        .option("url", url(acl_server, "reader-plain", 0))
        .option("streamPrefix", PREFIX)
        .option("topics", name)
        .load()
    )
    collector = BatchCollector()
    query = run_available_now(frame, str(tmp_path / "checkpoint"), collector)
    assert query.exception() is None
    assert payload_numbers(collector.rows) == [0, 1, 2]


@pytest.mark.spark
@pytest.mark.parametrize("db", DATABASES)
def test_documented_reader_mirrors_into_a_group(
    spark: Any, acl_server: RedisServer, db: int, tmp_path: Path
) -> None:
    name = topic()
    with admin(acl_server, db) as client:
        ids = publish(client, name, 4)
    collector = BatchCollector()
    frame = (
        spark.readStream.format("atlasbus")
        .option("url", url(acl_server, "reader", db))
        .option("streamPrefix", PREFIX)
        .option("topics", name)
        .option("group", "acl-group")
        .load()
    )
    query = run_available_now(frame, str(tmp_path / "checkpoint"), collector)
    assert query.exception() is None
    assert payload_numbers(collector.rows) == [0, 1, 2, 3]
    with admin(acl_server, db) as client:
        groups = client.xinfo_groups(f"{PREFIX}:{name}")
    assert [(g["name"], g["last-delivered-id"]) for g in groups] == [
        (b"acl-group", ids[-1].encode())
    ]


@pytest.mark.spark
@pytest.mark.parametrize("db", DATABASES)
def test_documented_writer_publishes_with_the_sink(
    spark: Any, acl_server: RedisServer, db: int
) -> None:
    name = topic()
    (
        spark.range(3)
        .selectExpr("to_json(named_struct('n', id)) as payload", f"'{name}' as topic")
        .write.format("atlasbus")
        .mode("append")
        .option("url", url(acl_server, "writer", db))
        .option("streamPrefix", PREFIX)
        .save()
    )
    with admin(acl_server, db) as client:
        entries = client.xrange(f"{PREFIX}:{name}")
    assert sorted(int(fields[b"payload"].decode()[5:-1]) for _, fields in entries) == [0, 1, 2]


@pytest.mark.spark
@pytest.mark.parametrize("db", DATABASES)
def test_documented_users_route_and_replay_dead_letters(
    spark: Any, acl_server: RedisServer, db: int, tmp_path: Path
) -> None:
    """The reader's query routes a malformed entry to the table; the writer replays it."""
    name = topic()
    with admin(acl_server, db) as client:
        publish(client, name, 1)
        publish(client, name, 1, priority="high")  # invalid-integer: replayable
    table = tmp_path / "dead_letters"
    frame = (
        spark.readStream.format("atlasbus")
        .option("url", url(acl_server, "reader", db))
        .option("streamPrefix", PREFIX)
        .option("topics", name)
        .option("deadLetterTable", str(table))
        .load()
    )
    collector = BatchCollector()
    query = run_available_now(frame, str(tmp_path / "checkpoint"), collector)
    assert query.exception() is None
    assert len(collector.rows) == 1

    endpoint = RedisEndpoint.from_options(url(acl_server, "writer", db), None, None)
    result = replay_dead_letters(DeadLetterTable(table), endpoint=endpoint, stream_prefix=PREFIX)
    assert len(result.replayed) == 1, result
    with admin(acl_server, db) as client:
        assert client.xlen(f"{PREFIX}:{name}") == 3


@pytest.mark.spark
def test_a_reader_missing_one_permission_is_told_which_and_how(
    spark: Any, acl_server: RedisServer
) -> None:
    name = topic()
    with admin(acl_server, 0) as client:
        publish(client, name, 2)
    with pytest.raises(Exception) as caught:
        (
            spark.read.format("atlasbus")
            .option("url", url(acl_server, "reader-no-xinfo", 0))
            .option("streamPrefix", PREFIX)
            .option("topics", name)
            .load()
            .collect()
        )
    message = str(caught.value)
    assert "reader-no-xinfo" in message, message
    assert "xinfo" in message.lower(), message
    assert "ACL SETUSER" in message, message


@pytest.mark.spark
def test_a_writer_missing_one_permission_is_told_which_and_how(
    spark: Any, acl_server: RedisServer
) -> None:
    with pytest.raises(Exception) as caught:
        (
            spark.range(1)
            .selectExpr("'{}' as payload", f"'{topic()}' as topic")
            .write.format("atlasbus")
            .mode("append")
            .option("url", url(acl_server, "writer-no-type", 0))
            .option("streamPrefix", PREFIX)
            .save()
        )
    message = str(caught.value)
    assert "writer-no-type" in message, message
    assert "type" in message.lower(), message
    assert "ACL SETUSER" in message, message
