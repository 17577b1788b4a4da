"""The foreachBatch router, replay and the ``atlasbus dlq`` command line, on real tables."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from deltalake import DeltaTable
from pyspark.sql.functions import col

from atlasbus.bus.connection import RedisEndpoint
from atlasbus.cli import dlq as dlq_cli
from atlasbus.dead_letters import (
    PROCESSING,
    DeadLetter,
    DeadLetterTable,
    dead_letter_id,
    replay_dead_letters,
)
from helpers import BatchCollector, publish, stream_reader
from pyspark_atlasbus import with_dead_letters

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


# --- foreachBatch helper -------------------------------------------------------------------------


@pytest.mark.spark
def test_foreach_batch_helper_routes_check_failures_and_returned_rows(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    stream = f"{prefix}:orders"
    ids = publish(r, prefix, "orders", 12)  # priority = n % 10, payload {"n": n}
    dlq = DeadLetterTable(tmp_path / "dlq")
    seen = BatchCollector(columns=("id", "payload"))

    def process(df: Any, batch_id: int) -> Any:
        seen(df, batch_id)
        # reject rows whose n is a multiple of 5, with a reason of our own for n = 10
        rejected = df.where("get_json_object(payload, '$.n') % 5 = 0")
        return rejected.selectExpr(
            "*",
            "if(get_json_object(payload, '$.n') = 10, 'ten', null) as dead_letter_reason",
            "'multiple of five' as dead_letter_error",
        )

    def run() -> Any:
        query = (
            stream_reader(spark, redis_url, prefix, topics="orders")
            .writeStream.queryName(f"router_{prefix}")
            .foreachBatch(with_dead_letters(process, dlq, check="priority < 8"))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None
        return query

    query = run()
    # priority 8 and 9 (n = 8, 9) fail the check and never reach the function
    assert [row["id"] for row in seen.rows] == [ids[n] for n in range(12) if n not in (8, 9)]
    letters = {x["entry_id"]: x for x in dlq.to_arrow().to_pylist()}
    assert sorted(letters) == sorted(ids[n] for n in (0, 5, 8, 9, 10))
    expected = {
        0: ("rejected", "multiple of five"),
        5: ("rejected", "multiple of five"),
        10: ("ten", "multiple of five"),
        8: ("check-failed", "failed check: priority < 8"),
        9: ("check-failed", "failed check: priority < 8"),
    }
    for n, (reason, error) in expected.items():
        letter = letters[ids[n]]
        assert letter["dead_letter_id"] == dead_letter_id(PROCESSING, stream, ids[n])
        assert (letter["stage"], letter["reason"], letter["error"]) == (PROCESSING, reason, error)
        assert (letter["topic"], letter["stream"], letter["priority"]) == ("orders", stream, n % 10)
        assert json.loads(letter["payload"])["n"] == n
        assert json.loads(dict(letter["fields"])["tracing"]) == {"trace_id": f"trace-{n}"}
        assert (letter["query_id"], letter["query_name"], letter["batch_id"]) == (
            str(query.id),
            f"router_{prefix}",
            0,
        )

    # a restart with nothing new runs no batch and records nothing
    version = dlq.version()
    run()
    assert dlq.version() == version


@pytest.mark.spark
def test_foreach_batch_helper_with_rows_not_from_the_bus_is_idempotent(
    spark: Any, tmp_path: Path
) -> None:
    dlq = DeadLetterTable(tmp_path / "dlq")
    got: list[int] = []

    def process(df: Any, batch_id: int) -> None:
        got.extend(row["n"] for row in df.collect())

    wrapped = with_dead_letters(process, dlq, check=col("n") % 3 != 0)
    frame = spark.createDataFrame([(n, f"item-{n}") for n in range(7)], "n int, name string")
    wrapped(frame, 4)
    wrapped(frame, 4)  # the same batch again (outside a query: no app transaction)
    assert sorted(got) == [1, 1, 2, 2, 4, 4, 5, 5]
    letters = sorted(dlq.to_arrow().to_pylist(), key=lambda x: x["payload"])
    assert [x["payload"] for x in letters] == [
        '{"n":0,"name":"item-0"}',
        '{"n":3,"name":"item-3"}',
        '{"n":6,"name":"item-6"}',
    ]
    assert {(x["stage"], x["reason"], x["batch_id"], x["stream"]) for x in letters} == {
        (PROCESSING, "check-failed", 4, None)
    }
    assert {x["error"] for x in letters} == {"failed check: Column<'!(=(%(n, 3), 0))'>"}
    assert [dict(x["fields"]) for x in letters] == [
        {"n": "0", "name": "item-0"},
        {"n": "3", "name": "item-3"},
        {"n": "6", "name": "item-6"},
    ]


# --- replay ------------------------------------------------------------------------------------


def seed(dlq: DeadLetterTable, stream: str) -> dict[str, DeadLetter]:
    letters = {
        "decode": DeadLetter.for_entry(
            "source-decode",
            "invalid-integer",
            "field 'priority' must be a decimal integer, got 'high'",
            stream=stream,
            entry_id="1-0",
            topic="orders",
            correlation_id="corr-1",
            delivery_attempts=2,
            payload='{"n": 1}',
            fields={
                "payload": '{"n": 1}',
                "priority": "high",
                "tracing": '{"trace_id": "t1"}',
                "metadata": '{"m": "1"}',
                "correlation_id": "corr-1",
                "delivery_attempts": "2",
            },
            at=T0,
        ),
        "sink": DeadLetter.for_row(
            "invalid-json",
            "cannot publish row 0 (topic 'orders'): column 'tracing' is not valid JSON",
            write_id="w/-/0",
            row=0,
            topic="orders",
            priority=1,
            payload='{"n": 2}',
            fields={"tracing": '{"trace_id": "t2"}', "priority": "1"},
            at=T0.replace(minute=1),
        ),
        "bad-json": DeadLetter.for_entry(
            "source-decode",
            "invalid-json",
            "field 'payload' is not valid JSON: '{oops'",
            stream=stream,
            entry_id="3-0",
            topic="orders",
            payload="{oops",
            fields={"payload": "{oops", "priority": "1"},
            at=T0.replace(minute=2),
        ),
        "loss": DeadLetter.for_data_loss(
            stream=stream, after="1-0", upto="2-5", topic="orders", at=T0.replace(minute=3)
        ),
    }
    dlq.append(letters.values())
    return letters


def test_replay_round_trip_is_read_back_by_the_source_and_refused_the_second_time(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    dlq = DeadLetterTable(tmp_path / "dlq")
    letters = seed(dlq, f"{prefix}:orders")
    endpoint = RedisEndpoint.from_options(redis_url, None, None)
    at = datetime(2024, 6, 1, tzinfo=UTC)

    dry = replay_dead_letters(
        dlq, endpoint=endpoint, where="topic = 'orders'", stream_prefix=prefix, dry_run=True
    )
    assert [x.dead_letter_id for x in dry.replayed] == [
        letters["decode"].dead_letter_id,
        letters["sink"].dead_letter_id,
    ]
    assert r.exists(f"{prefix}:orders") == 0 and dlq.to_arrow("replay_count > 0").num_rows == 0

    result = replay_dead_letters(
        dlq, endpoint=endpoint, where="topic = 'orders'", stream_prefix=prefix, at=at
    )
    assert [(x.dead_letter_id, x.stream) for x in result.replayed] == [
        (letters["decode"].dead_letter_id, f"{prefix}:orders"),
        (letters["sink"].dead_letter_id, f"{prefix}:orders"),
    ]
    assert [(x.dead_letter_id, x.why) for x in result.not_replayable] == [
        (
            letters["loss"].dead_letter_id,
            "a data-loss dead letter records removed entries, not a message: nothing to publish",
        ),
        (
            letters["bad-json"].dead_letter_id,
            "column 'payload' is not valid JSON (unexpected character, expected a string key: line "
            "1 column 2 (char 1)): "
            "'{oops'",
        ),
    ]
    new_ids = [x.entry_id for x in result.replayed]

    # the source reads them back, in the wire format, delivery_attempts one higher
    rows = (
        spark.read.format("atlasbus")
        .option("url", redis_url)
        .option("streamPrefix", prefix)
        .option("topics", "orders")
        .load()
        .collect()
    )
    assert [row["id"] for row in rows] == new_ids
    assert [row["error"] for row in rows] == [None, None]
    assert [
        (row["payload"], row["priority"], row["correlation_id"], row["delivery_attempts"])
        for row in rows
    ] == [('{"n": 1}', 5, "corr-1", 3), ('{"n": 2}', 1, rows[1]["correlation_id"], 1)]
    assert [(row["tracing"], row["metadata"]) for row in rows] == [
        ({"trace_id": "t1"}, {"m": "1"}),
        ({"trace_id": "t2"}, {}),
    ]

    # the table shows the replay
    table = {x["dead_letter_id"]: x for x in dlq.to_arrow().to_pylist()}
    for key, entry_id in zip(("decode", "sink"), new_ids, strict=True):
        row = table[letters[key].dead_letter_id]
        assert (row["replay_count"], row["last_replayed_at"], row["last_replay_entry_id"]) == (
            1,
            at,
            entry_id,
        )
    assert table[letters["loss"].dead_letter_id]["replay_count"] == 0

    # the same replay again is refused for what was replayed; --again replays explicitly
    second = replay_dead_letters(
        dlq, endpoint=endpoint, where="topic = 'orders'", stream_prefix=prefix
    )
    assert second.replayed == ()
    assert [x.why for x in second.already_replayed] == [
        f"already replayed 1 time(s), last as entry {new_ids[0]}; pass again=True to replay it again",
        f"already replayed 1 time(s), last as entry {new_ids[1]}; pass again=True to replay it again",
    ]
    assert [x.explain("use --again") for x in second.already_replayed] == [
        f"already replayed 1 time(s), last as entry {new_ids[0]}; use --again to replay it again",
        f"already replayed 1 time(s), last as entry {new_ids[1]}; use --again to replay it again",
    ]
    assert r.xlen(f"{prefix}:orders") == 2
    third = replay_dead_letters(
        dlq, endpoint=endpoint, where="stage = 'sink-publish'", stream_prefix=prefix, again=True
    )
    assert len(third.replayed) == 1 and r.xlen(f"{prefix}:orders") == 3
    assert dlq.to_arrow("stage = 'sink-publish'").column("replay_count").to_pylist() == [2]


def test_limit_takes_the_oldest_dead_letters_that_would_be_published(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """The issue: the oldest rows were replayed before, so ``limit`` replayed 0 of 86 eligible."""
    dlq = DeadLetterTable(tmp_path / "dlq")
    letters = sink_letters(10)  # all at T0, so oldest first is dead_letter_id order
    dlq.append(letters)
    ordered = sorted(x.dead_letter_id for x in letters)
    dlq.mark_replayed(ordered[:4], ["1-1", "1-2", "1-3", "1-4"], T0)  # the four oldest
    endpoint = RedisEndpoint.from_options(redis_url, None, None)

    dry = replay_dead_letters(dlq, endpoint=endpoint, stream_prefix=prefix, limit=3, dry_run=True)
    assert [x.dead_letter_id for x in dry.replayed] == ordered[4:7]
    # the rows passed over on the way are reported; the newer ones were not looked at
    assert [x.dead_letter_id for x in dry.already_replayed] == ordered[:4]
    assert dry.not_replayable == ()

    result = replay_dead_letters(dlq, endpoint=endpoint, stream_prefix=prefix, limit=3)
    assert [x.dead_letter_id for x in result.replayed] == ordered[4:7]
    assert r.xlen(f"{prefix}:orders") == 3
    counts = {x["dead_letter_id"]: x["replay_count"] for x in dlq.to_arrow().to_pylist()}
    assert [counts[i] for i in ordered] == [1] * 7 + [0] * 3

    # a limit larger than what is left replays what is left; --again counts replayed ones
    rest = replay_dead_letters(dlq, endpoint=endpoint, stream_prefix=prefix, limit=5)
    assert [x.dead_letter_id for x in rest.replayed] == ordered[7:]
    assert len(rest.already_replayed) == 7
    again = replay_dead_letters(
        dlq, endpoint=endpoint, stream_prefix=prefix, limit=2, again=True, dry_run=True
    )
    assert [x.dead_letter_id for x in again.replayed] == ordered[:2]
    assert again.already_replayed == ()


def test_limit_passes_over_dead_letters_with_nothing_to_publish(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    dlq = DeadLetterTable(tmp_path / "dlq")
    letters = seed(dlq, f"{prefix}:orders")  # decode, sink, bad-json, loss: oldest first
    endpoint = RedisEndpoint.from_options(redis_url, None, None)
    extra = [
        DeadLetter.for_row(
            "too-big",
            f"row {i} too big",
            write_id="w/-/1",
            row=i,
            topic="orders",
            payload=json.dumps({"n": i}),
            at=T0.replace(minute=10 + i),
        )
        for i in range(2)
    ]
    dlq.append(extra)
    dlq.mark_replayed([letters["decode"].dead_letter_id], ["5-0"], T0)

    dry = replay_dead_letters(dlq, endpoint=endpoint, stream_prefix=prefix, limit=2, dry_run=True)
    # sink (minute 1) and the first extra (minute 10): bad-json and loss are passed over
    assert [x.dead_letter_id for x in dry.replayed] == [
        letters["sink"].dead_letter_id,
        extra[0].dead_letter_id,
    ]
    assert [x.dead_letter_id for x in dry.already_replayed] == [letters["decode"].dead_letter_id]
    assert [x.dead_letter_id for x in dry.not_replayable] == [
        letters["loss"].dead_letter_id,
        letters["bad-json"].dead_letter_id,
    ]
    one = replay_dead_letters(dlq, endpoint=endpoint, stream_prefix=prefix, limit=1, dry_run=True)
    # the oldest publishable one is the sink's (minute 1): only the decode letter is older
    assert [x.dead_letter_id for x in one.replayed] == [letters["sink"].dead_letter_id]
    assert [x.dead_letter_id for x in one.refused] == [letters["decode"].dead_letter_id]


def test_replay_refuses_bad_arguments_naming_them(redis_url: str, tmp_path: Path) -> None:
    dlq = DeadLetterTable(tmp_path / "dlq")
    dlq.append(sink_letters(1))
    endpoint = RedisEndpoint.from_options(redis_url, None, None)
    with pytest.raises(ValueError, match=r"^limit must be a positive integer, got 0$"):
        replay_dead_letters(dlq, endpoint=endpoint, limit=0)
    with pytest.raises(ValueError, match=r"^stream_prefix must not be empty$"):
        replay_dead_letters(dlq, endpoint=endpoint, stream_prefix=" ")


def test_replay_with_redis_unreachable_claims_nothing(tmp_path: Path) -> None:
    from atlasbus.errors import RedisUnavailableError

    dlq = DeadLetterTable(tmp_path / "dlq")
    dlq.append(sink_letters(2))
    version = dlq.version()
    endpoint = RedisEndpoint.from_options("redis://127.0.0.1:1/0", None, None)
    with pytest.raises(RedisUnavailableError, match=r"cannot reach Redis at 127\.0\.0\.1:1"):
        replay_dead_letters(dlq, endpoint=endpoint)
    assert dlq.version() == version
    assert dlq.to_arrow().column("replay_count").to_pylist() == [0, 0]


# --- the command line --------------------------------------------------------------------------


def cli(*argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="atlasbus")
    dlq_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    out = io.StringIO()
    code = args.run(args, out)
    return code, out.getvalue()


def test_cli_show_summary_and_replay(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    dlq = DeadLetterTable(tmp_path / "dlq")
    letters = seed(dlq, f"{prefix}:orders")
    table = str(tmp_path / "dlq")

    code, out = cli(
        "dlq",
        "show",
        "--table",
        table,
        "--columns",
        "dead_letter_id,dead_lettered_at,stage,reason,entry_id,replay_count,error",
        "--width",
        "60",
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "dead_letter_id",
        "dead_lettered_at",
        "stage",
        "reason",
        "entry_id",
        "replay_count",
    ]
    assert set(lines[1]) == {"-", " "}
    assert lines[2].split() == [
        letters["loss"].dead_letter_id[:12],
        "2024-05-01",
        "12:03:00",
        "data-loss",
        "entries-removed",
        "2-5",
        "0",
    ]
    assert lines[2].index("12:03:00") == lines[0].index("dead_lettered_at") + 11
    # the error under its row, cut to --width in the middle: how it begins and how it ends
    assert lines[3].startswith("  error: entries of stream") and "..." in lines[3]
    assert lines[3].endswith("removed unread") and len(lines[3]) == 60
    assert lines[5] == "  error: field 'payload' is not valid JSON: '{oops'"

    code, out = cli("dlq", "show", "--table", table)  # the default: fits 100 columns
    assert code == 0
    assert max(map(len, out.splitlines())) <= 100
    assert out.splitlines()[0].split() == [
        "dead_letter_id",
        "dead_lettered_at",
        "stage",
        "reason",
        "topic",
        "entry_id",
    ]
    assert (
        f"  error: entries of stream '{prefix}:orders' after 1-0 up to 2-5 were removed unread"
        in (out.splitlines())
    )
    assert lines[-1] == "4 of 4 dead letter(s)"

    code, out = cli(
        "dlq", "summary", "--table", table, "--by", "stage,reason", "--where", "topic = 'orders'"
    )
    assert (code, out.splitlines()) == (
        0,
        [
            "stage          reason           count  first_dead_lettered_at  last_dead_lettered_at",
            "-------------  ---------------  -----  ----------------------  ---------------------",
            "data-loss      entries-removed      1  2024-05-01 12:03:00     2024-05-01 12:03:00",
            "sink-publish   invalid-json         1  2024-05-01 12:01:00     2024-05-01 12:01:00",
            "source-decode  invalid-integer      1  2024-05-01 12:00:00     2024-05-01 12:00:00",
            "source-decode  invalid-json         1  2024-05-01 12:02:00     2024-05-01 12:02:00",
            "4 dead letter(s)",
        ],
    )

    replay = (
        "dlq",
        "replay",
        "--table",
        table,
        "--url",
        redis_url,
        "--stream-prefix",
        prefix,
        "--where",
        "reason = 'invalid-integer'",
    )
    code, out = cli(*replay, "--dry-run")
    assert code == 0 and r.exists(f"{prefix}:orders") == 0
    assert (
        out.splitlines()[-1]
        == "would replay 1 dead letter(s); refused 0 already replayed (use --again), 0 not replayable"
    )
    code, out = cli(*replay)
    (entry_id,) = [i.decode() for i, _ in r.xrange(f"{prefix}:orders")]
    assert code == 0
    assert out.splitlines()[2].split() == [
        letters["decode"].dead_letter_id[:12],
        "orders",
        f"{prefix}:orders",
        entry_id,
    ]
    code, out = cli(*replay)
    assert code == 1 and r.xlen(f"{prefix}:orders") == 1
    assert (
        out.splitlines()[-1]
        == "replayed 0 dead letter(s); refused 1 already replayed (use --again), 0 not replayable"
    )
    code, out = cli(*replay, "--again")
    assert code == 0 and r.xlen(f"{prefix}:orders") == 2


def test_cli_errors_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = cli("dlq", "show", "--table", str(tmp_path / "nope"))
    assert code == 2
    assert capsys.readouterr().err == (
        f"atlasbus dlq: error: no dead-letter table at {str(tmp_path / 'nope')!r}: it is created "
        "by the first dead letter written there; check --table for a typo\n"
    )
    code, _ = cli("dlq", "summary", "--table", str(tmp_path / "nope"), "--by", "colour")
    assert code == 2
    assert "--by: unknown column(s) ['colour']" in capsys.readouterr().err
    DeadLetterTable(tmp_path / "dlq").append(
        [DeadLetter.for_data_loss(stream="s", after="1-0", upto="2-0", at=T0)]
    )
    code, _ = cli("dlq", "show", "--table", str(tmp_path / "dlq"), "--where", "stag = 1")
    assert code == 2
    assert capsys.readouterr().err == (
        "atlasbus dlq: error: cannot use the table (check --table, and --where if given): "
        "Schema error: No field named "
        "stag. Did you mean 'dead_letters.stage'?\n"
    )


def test_cli_runs_as_a_command_without_starting_spark(tmp_path: Path) -> None:
    DeadLetterTable(tmp_path / "dlq").append(
        [DeadLetter.for_data_loss(stream="s", after="1-0", upto="2-0", at=T0)]
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "atlasbus.cli.dlq",
            "dlq",
            "summary",
            "--table",
            str(tmp_path / "dlq"),
            "--by",
            "stage",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].split()[:2] == ["data-loss", "1"]
    assert "SparkContext" not in done.stderr and "JAVA" not in done.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "atlasbus.cli.dlq", "dlq", "replay", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "--again" in help_text and "--dry-run" in help_text and "$REDIS_URL" in help_text


# --- replay exactly once under concurrency -------------------------------------------------------

# A replay run in its own process, started at a given wall-clock time. With a barrier directory,
# each run waits after reading the table until every run has read it, so all of them choose the
# same dead letters from the same table version before any claims: the race at its tightest.
_REPLAY_RUN = r"""
import json, os, sys, time
from pathlib import Path
from atlasbus.bus.connection import RedisEndpoint
from atlasbus.dead_letters import DeadLetterTable, replay_dead_letters

uri, url, prefix, start, barrier, name, runs, where = sys.argv[1:9]
table = DeadLetterTable(uri)
if barrier != "-":
    read = DeadLetterTable.to_arrow

    def to_arrow_then_wait(self, *args, **kwargs):
        data = read(self, *args, **kwargs)
        Path(barrier, name).touch()
        deadline = time.time() + 60
        while len(os.listdir(barrier)) < int(runs) and time.time() < deadline:
            time.sleep(0.005)
        return data

    DeadLetterTable.to_arrow = to_arrow_then_wait
while time.time() < float(start):
    time.sleep(0.001)
result = replay_dead_letters(
    table,
    endpoint=RedisEndpoint.from_options(url, None, None),
    stream_prefix=prefix,
    where=where if where != "-" else None,
)
print(json.dumps({
    "replayed": [[r.dead_letter_id, r.entry_id] for r in result.replayed],
    "refused": [[r.dead_letter_id, r.why] for r in result.already_replayed],
    "not_replayable": len(result.not_replayable),
}))
"""


def sink_letters(count: int, *, write: str = "w/-/0", topic: str = "orders") -> list[DeadLetter]:
    return [
        DeadLetter.for_row(
            "too-big",
            f"row {i} too big",
            write_id=write,
            row=i,
            topic=topic,
            priority=i % 10,
            payload=json.dumps({"n": i}),
            fields={"tracing": json.dumps({"trace_id": f"t{i}"})},
            at=T0,
        )
        for i in range(count)
    ]


def start_replays(
    uri: Path | str,
    redis_url: str,
    prefix: str,
    runs: int,
    barrier: Path | None,
    start: float | None = None,
    where: str | None = None,
) -> list[subprocess.Popen[str]]:
    """``runs`` replays starting together at ``start`` (default: in 4 s, once imports are done)."""
    at = f"{start if start is not None else time.time() + 4:.3f}"
    if barrier is not None:
        barrier.mkdir()
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _REPLAY_RUN,
                str(uri),
                redis_url,
                prefix,
                at,
                str(barrier) if barrier is not None else "-",
                f"run{k}",
                str(runs),
                where or "-",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(runs)
    ]


def finish(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


def assert_replayed_exactly_once(
    r: redis.Redis, dlq: DeadLetterTable, stream: str, letters: list[DeadLetter]
) -> None:
    entries = r.xrange(stream)
    assert len(entries) == len(letters)  # each published once
    assert sorted(json.loads(f[b"payload"])["n"] for _, f in entries) == list(range(len(letters)))
    rows = dlq.to_arrow(all_rows=True).to_pylist()
    assert len(rows) == len(letters)
    assert {row["replay_count"] for row in rows} == {1}
    assert sorted(row["last_replay_entry_id"] for row in rows) == sorted(
        eid.decode() for eid, _ in entries
    )


def test_two_replays_started_together_publish_each_dead_letter_once(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """Both runs read the table before either claims (a barrier makes sure): one claims all."""
    dlq = DeadLetterTable(tmp_path / "dlq")
    letters = sink_letters(200)
    dlq.append(letters)
    runs = [finish(p) for p in start_replays(dlq.uri, redis_url, prefix, 2, tmp_path / "read")]

    assert sorted(len(run["replayed"]) for run in runs) == [0, 200]
    loser = next(run for run in runs if not run["replayed"])
    assert len(loser["refused"]) == 200
    assert {why for _, why in loser["refused"]} == {
        "another replay claimed it first (running at the same time, or it was replayed after "
        "this run read the table); that run publishes it"
    }
    assert_replayed_exactly_once(r, dlq, f"{prefix}:orders", letters)


def test_two_cli_replays_started_together_publish_each_dead_letter_once(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """``atlasbus dlq replay`` twice at once, as the issue ran it: 200 entries, not 400."""
    dlq = DeadLetterTable(tmp_path / "dlq")
    letters = sink_letters(200)
    dlq.append(letters)
    command = [
        sys.executable,
        "-m",
        "atlasbus.cli.dlq",
        "dlq",
        "replay",
        "--table",
        dlq.uri,
        "--url",
        redis_url,
        "--stream-prefix",
        prefix,
    ]
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(p.communicate(timeout=180), p.returncode) for p in processes]
    for (_, err), code in results:
        assert code in (0, 1), err
    # exactly one run published everything; the other refused all 200 (exit status 1)
    assert sorted(code for _, code in results) == [0, 1]
    summaries = sorted(out.splitlines()[-1] for (out, _), _ in results)
    assert summaries == [
        "replayed 0 dead letter(s); refused 200 already replayed (use --again), 0 not replayable",
        "replayed 200 dead letter(s); refused 0 already replayed (use --again), 0 not replayable",
    ]
    assert_replayed_exactly_once(r, dlq, f"{prefix}:orders", letters)


# A writer in its own process: `batches` appends of 10 letters under app ID (query, batch),
# each sent twice (a retried task), started at a given wall-clock time. Prints the commit
# conflicts it met (the retry's debug lines).
_WRITER_RUN = r"""
import json, logging, sys, time
from datetime import UTC, datetime
from atlasbus.dead_letters import DeadLetter, DeadLetterTable, QueryContext

uri, query, batches, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
conflicts = []
handler = logging.Handler()
handler.emit = lambda record: (
    conflicts.append(record.getMessage()) if "conflicted" in record.getMessage() else None
)
logger = logging.getLogger("atlasbus.dead_letters")
logger.addHandler(handler)
logger.setLevel(logging.DEBUG)
table = DeadLetterTable(uri)
while time.time() < start:
    time.sleep(0.001)
added = 0
for batch in range(batches):
    letters = [
        DeadLetter.for_entry(
            "source-decode", "invalid-json", "bad", stream=f"s:{query}", entry_id=f"{batch}-{j}",
            topic="orders", payload="{}", context=QueryContext(query, None, batch),
        )
        for j in range(10)
    ]
    for attempt in range(2):
        added += table.append(letters, app_id=f"{query}/source-decode/0", version=batch)
print(json.dumps({"added": added, "conflicts": conflicts}))
"""


def test_two_writers_and_a_replay_at_once_lose_and_duplicate_nothing(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    dlq = DeadLetterTable(tmp_path / "dlq")
    letters = sink_letters(100)
    dlq.append(letters)
    batches = 40
    start = time.time() + 6
    # the replay starts a little after the writers, so its commits land among theirs
    replays = start_replays(
        dlq.uri, redis_url, prefix, 1, None, start + 0.5, where="stage = 'sink-publish'"
    )
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER_RUN, dlq.uri, query, str(batches), f"{start:.3f}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for query in ("q-a", "q-b")
    ]
    written = [finish(w) for w in writers]
    replay = finish(replays[0])

    # each writer recorded each of its batches once; the appends never conflicted with each
    # other, only (and retried) when the replay's MERGE rewrote files under them
    assert [w["added"] for w in written] == [batches * 10] * 2
    for conflicts in (w["conflicts"] for w in written):
        assert len(conflicts) <= 2, conflicts  # at most one per MERGE commit of the replay
        assert all("a concurrent transaction deleted data" in c for c in conflicts), conflicts
    rows = dlq.to_arrow(all_rows=True)
    assert rows.num_rows == 100 + 2 * batches * 10
    assert len(set(rows.column("dead_letter_id").to_pylist())) == rows.num_rows
    for query in ("q-a", "q-b"):
        assert DeltaTable(dlq.uri).transaction_version(f"{query}/source-decode/0") == batches - 1
    # and the replay, which retried its MERGE around the appends, published each letter once
    assert len(replay["replayed"]) == 100
    replayed = dlq.to_arrow("stage = 'sink-publish'")
    assert replayed.num_rows == 100
    assert set(replayed.column("replay_count").to_pylist()) == {1}
    assert r.xlen(f"{prefix}:orders") == 100
    assert dlq.to_arrow("stage = 'source-decode'").column("replay_count").to_pylist() == [0] * (
        2 * batches * 10
    )
    # the replay's commits (claim, then the entry IDs) landed between the writers' appends
    operations = [
        entry["operation"]
        for entry in sorted(DeltaTable(dlq.uri).history(), key=lambda entry: entry["version"])
    ]
    merges = [i for i, operation in enumerate(operations) if operation == "MERGE"]
    writes = [i for i, operation in enumerate(operations) if operation == "WRITE"]
    assert len(merges) == 2, operations
    assert writes[1] < merges[0] and merges[-1] < writes[-1], operations


def test_a_replay_that_dies_after_claiming_leaves_its_claim_visible_and_publishes_nothing_twice(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from atlasbus.dead_letters import replay as replay_module
    from atlasbus.dead_letters.replay import CLAIM_PREFIX

    dlq = DeadLetterTable(tmp_path / "dlq")
    letters = sink_letters(5)
    dlq.append(letters)
    endpoint = RedisEndpoint.from_options(redis_url, None, None)
    stream = f"{prefix}:orders"

    class DiesAfterTwo(replay_module.Publisher):
        """Publishes the first two rows (one confirmed chunk), then the process 'dies'."""

        def publish(self, batch: Any) -> None:
            super().publish(batch.slice(0, 2))
            raise RuntimeError("killed")

    monkeypatch.setattr(replay_module, "Publisher", DiesAfterTwo)
    with pytest.raises(RuntimeError, match="killed"):
        replay_dead_letters(dlq, endpoint=endpoint, stream_prefix=prefix)
    monkeypatch.undo()
    entries = r.xrange(stream)
    assert len(entries) == 2
    rows = dlq.to_arrow().to_pylist()
    assert {row["replay_count"] for row in rows} == {1}  # all five were claimed
    # the two confirmed ones have their entry IDs; the other three show the dead run's claim
    published = {e.decode(): json.loads(f[b"payload"])["n"] for e, f in entries}
    recorded = {
        row["last_replay_entry_id"]: json.loads(row["payload"])["n"]
        for row in rows
        if not row["last_replay_entry_id"].startswith(CLAIM_PREFIX)
    }
    assert recorded == published
    claims = {row["last_replay_entry_id"] for row in rows} - set(published)
    assert len(claims) == 1 and claims.pop().startswith(CLAIM_PREFIX)

    # a later replay refuses all five, saying which were left claimed
    later = replay_dead_letters(dlq, endpoint=endpoint, stream_prefix=prefix)
    assert later.replayed == () and r.xlen(stream) == 2
    whys = sorted(refused.why for refused in later.already_replayed)
    assert sum("which has not recorded the entry it published" in why for why in whys) == 3
    assert sum(why.startswith("already replayed 1 time(s), last as entry") for why in whys) == 2
    # and again=True publishes the three left claimed (here: never published) on purpose
    again = replay_dead_letters(
        dlq,
        endpoint=endpoint,
        stream_prefix=prefix,
        again=True,
        where=f"replay_count = 1 AND last_replay_entry_id LIKE '{CLAIM_PREFIX}%'",
    )
    assert len(again.replayed) == 3 and r.xlen(stream) == 5
    assert sorted(json.loads(f[b"payload"])["n"] for _, f in r.xrange(stream)) == list(range(5))


def test_cli_replay_lists_ten_refusals_and_counts_the_rest(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """A replay that passes over many letters (a demo's 180, say) lists ten of them and
    counts the rest, rather than one line each."""
    dlq = DeadLetterTable(tmp_path / "dlq")
    dlq.append(
        [
            DeadLetter.for_data_loss(
                stream=f"{prefix}:orders",
                after=f"{index}-0",
                upto=f"{index}-1",
                topic="orders",
                at=T0.replace(second=index),
            )
            for index in range(25)
        ]
    )

    code, out = cli(
        "dlq", "replay", "--table", str(tmp_path / "dlq"), "--url", redis_url, "--dry-run"
    )

    lines = out.splitlines()
    assert code == 1
    assert lines[0].split() == ["not", "replayed", "why"]
    assert len([line for line in lines[2:] if "nothing to publish" in line]) == 10
    assert (
        "... and 15 more not replayed (narrow them with --where; 'dlq summary --by reason' "
        "counts them)" in lines
    )
    assert lines[-1] == (
        "would replay 0 dead letter(s); refused 0 already replayed (use --again), 25 not replayable"
    )
