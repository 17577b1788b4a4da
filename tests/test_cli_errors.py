"""The command line on servers and tables that are not what it expects: one line and exit 2.

A port that answers but is not Redis, and a read-only replica under ``dlq sweep``, gave a
Python traceback (exit 1) before; the sink's refusal on a replica and a table path that is a
file were already one line, and are held to it here. A replay a replica refused did not say
that its dead letters stay claimed, nor how to replay them.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import redis

from atlasbus import cli
from atlasbus.bus.stream_catalog import StreamCatalog
from atlasbus.dead_letters import DeadLetter, DeadLetterTable
from atlasbus.errors import AtlasbusError, RedisUnavailableError
from atlasbus.options.sink import parse_sink_options
from atlasbus.options.source import parse_source_options
from atlasbus.publishing.publisher import Publisher
from atlasbus.sandbox.redis_server import RedisServer, free_port
from helpers import publish

PREFIX = "clierr"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse refusals
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def not_redis() -> Iterator[str]:
    """A TCP port that answers every connection as a web server would, then hangs up."""
    listener = socket.create_server(("127.0.0.1", free_port()))
    port = listener.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                connection.recv(4096)
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{port}/0"
    listener.close()


@pytest.fixture(scope="module")
def replica(redis_server: RedisServer) -> Iterator[str]:
    """A read-only replica of the suite's server, in sync."""
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        client.replicaof("127.0.0.1", redis_server.port)
        for _ in range(200):
            if client.info("replication").get("master_link_status") == "up":
                break
            threading.Event().wait(0.05)
        else:
            pytest.fail("the replica did not sync within 10 s")
        yield server.url


NOT_REDIS = 'does not speak Redis\'s protocol (Protocol error, got "H" as reply type byte)'


def test_status_on_a_port_that_is_not_redis(
    not_redis: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "status", "--url", not_redis)
    host = not_redis.removeprefix("redis://").removesuffix("/0")
    assert (code, out) == (2, "")
    assert err == (
        f"atlasbus status: error: what answers at {host} {NOT_REDIS}: check that --url (or "
        "$REDIS_URL) points to a Redis server, with rediss:// if it serves TLS\n"
    )


@pytest.mark.parametrize(
    "command", [("dlq", "sweep", "--group", "g", "--max-deliveries", "3"), ("trim",)]
)
def test_other_commands_on_a_port_that_is_not_redis(
    not_redis: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, command: tuple[str, ...]
) -> None:
    table = ("--table", str(tmp_path / "dlq")) if command[0] == "dlq" else ()
    code, out, err = run(capsys, *command, "--url", not_redis, *table)
    assert (code, out) == (2, "")
    assert NOT_REDIS in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_source_names_a_server_that_is_not_redis(not_redis: str) -> None:
    options = parse_source_options({"url": not_redis, "topics": "orders"})
    with pytest.raises(RedisUnavailableError, match="does not speak Redis's protocol"):
        StreamCatalog(options.endpoint).info(["atlas_bus:orders"])


def test_sweep_on_a_read_only_replica(
    r: redis.Redis, replica: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stream = f"{PREFIX}:orders"
    publish(r, PREFIX, "orders", 3)
    r.xgroup_create(stream, "workers", id="0")
    r.xreadgroup("workers", "c1", {stream: ">"})
    assert r.wait(1, 5000) == 1  # the replica has the stream, its group and the delivery
    code, _, err = run(
        capsys,
        "dlq",
        "sweep",
        "--url",
        replica,
        "--stream-prefix",
        PREFIX,
        "--group",
        "workers",
        "--max-deliveries",
        "1",
        "--min-idle",
        "0",
        "--table",
        str(tmp_path / "dlq"),
    )
    host = replica.removeprefix("redis://").removesuffix("/0")
    assert code == 2
    assert err == (
        f"atlasbus dlq: error: Redis at {host} is a read-only replica (You can't write against "
        "a read only replica.): point --url (or $REDIS_URL) at the primary\n"
    )


def test_the_sink_names_a_read_only_replica(replica: str) -> None:
    options = parse_sink_options({"url": replica, "topic": "orders", "streamPrefix": PREFIX})
    rows = pa.RecordBatch.from_pydict({"payload": ['{"n": 1}']})
    with pytest.raises(AtlasbusError) as caught, Publisher(options, marker=None) as publisher:
        publisher.publish(rows)
    assert "read only replica" in str(caught.value), str(caught.value)


def test_status_with_a_table_path_that_is_a_file(
    redis_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a_file = tmp_path / "afile"
    a_file.write_text("not a table")
    code, out, err = run(capsys, "status", "--url", redis_url, "--table", str(a_file))
    assert (code, out) == (2, "")
    assert err.startswith(
        f"atlasbus status: error: cannot read the dead-letter table {str(a_file)!r} (check "
        "--table): "
    )
    assert err.count("\n") == 1


def replayable_letters(path: Path, count: int) -> DeadLetterTable:
    """A dead-letter table of ``count`` sink rejections of topic orders, each replayable."""
    table = DeadLetterTable(path)
    table.append(
        [
            DeadLetter.for_row(
                "too-big", "row too big", write_id="w/-/0", row=i, topic="orders", payload="{}"
            )
            for i in range(count)
        ]
    )
    return table


def test_a_replay_refused_by_a_replica_says_what_stays_claimed(
    r: redis.Redis, redis_url: str, replica: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    table = replayable_letters(tmp_path / "dlq", 3)
    replay = ("dlq", "replay", "--table", table.uri, "--prefix", f"{PREFIX}-replay")
    code, _, err = run(capsys, *replay, "--url", replica)
    assert code == 2
    assert err.startswith("atlasbus dlq: error: XADD to stream ")
    claim = re.search(r"stay claimed by replay run ([0-9a-f]+) ", err)
    assert claim is not None, err
    assert err.endswith(
        f"3 dead letter(s) stay claimed by replay run {claim.group(1)} without a confirmed "
        "entry: look in the stream for them, then replay those it does not hold with --again\n"
    )
    # as it says: the stream holds none of them, and --again publishes them to the primary
    assert r.exists(f"{PREFIX}-replay:orders") == 0
    code, out, _ = run(capsys, *replay, "--url", redis_url, "--again")
    assert code == 0, out
    assert r.xlen(f"{PREFIX}-replay:orders") == 3


def test_a_database_the_server_lacks_is_named_by_the_flag(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "status", "--url", redis_url.removesuffix("/0") + "/99")
    host = redis_url.removeprefix("redis://").removesuffix("/0")
    assert (code, out) == (2, "")
    assert err == (
        f"atlasbus status: error: --url selects database 99, which Redis at {host} does not "
        "have (DB index is out of range): use an index below the server's 'databases' setting "
        "(16 by default), e.g. /0\n"
    )


def test_a_dry_run_replay_reaches_redis_as_the_real_run_would(
    not_redis: str, redis_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It said 'would replay 3' whatever --url named: a wrong host, a wrong password."""
    table = replayable_letters(tmp_path / "dlq", 3)
    replay = ("dlq", "replay", "--table", table.uri, "--dry-run", "--url")
    code, out, err = run(capsys, *replay, not_redis)
    assert (code, out) == (2, "")
    assert NOT_REDIS in err and err.count("\n") == 1
    code, out, err = run(capsys, *replay, redis_url)
    assert (code, err) == (0, "")
    assert "would replay 3 dead letter(s)" in out


def test_a_sweep_of_streams_that_do_not_exist_says_so(
    r: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Redis answers NOGROUP for an absent stream too: the group was blamed before."""
    sweep = ("dlq", "sweep", "--url", redis_url, "--prefix", PREFIX, "--group", "workers")
    flags = ("--max-deliveries", "3", "--table", str(tmp_path / "dlq"))
    code, _, err = run(capsys, *sweep, "--topics", "nope", *flags)
    assert code == 2
    assert err == (
        f"atlasbus dlq: error: none of the streams swept exists ({PREFIX}:nope): check "
        "--topics and --stream-prefix (a topic names the stream '{stream-prefix}:{topic}')\n"
    )
    r.xadd(f"{PREFIX}:groupless", {"n": "1"})
    code, _, err = run(capsys, *sweep, "--topics", "groupless,nope", *flags)
    assert code == 2
    assert err == (
        f"atlasbus dlq: error: --group: consumer group 'workers' does not exist on any of the "
        f"streams swept ({PREFIX}:groupless); these streams do not exist: {PREFIX}:nope. Check "
        "the group name (XINFO GROUPS <stream> lists a stream's groups) and --topics / "
        "--stream-prefix\n"
    )


@pytest.mark.parametrize("command", ["dlq show", "status", "trim"])
def test_a_reader_gone_from_the_output_ends_the_command_quietly(
    command: str, r: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """``atlasbus ... | head``: dlq reported the broken pipe as the table's fault, trim ended in
    a traceback."""
    r.xadd(f"{PREFIX}:orders", {"n": "1"})
    if command == "dlq show":
        flags = ["--table", replayable_letters(tmp_path / "dlq", 3).uri]
    else:
        flags = ["--url", redis_url, "--stream-prefix", PREFIX] + (
            ["--dry-run"] if command == "trim" else []
        )
    argv = [sys.executable, "-m", "atlasbus.cli", *command.split(), *flags]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before the command writes its first line (it takes a second)
    err = process.stderr.read()
    assert process.wait(timeout=120) == 1
    assert err == ""


@pytest.mark.parametrize(
    ("argv", "usage", "error"),
    [
        (
            ["status", "--prefx", "x"],
            "usage: atlasbus status ",
            "atlasbus status: error: unrecognized arguments: --prefx x; did you mean --prefix?",
        ),
        (
            ["dlq", "replay", "--table", "t", "--dryrun"],
            "usage: atlasbus dlq replay ",
            "atlasbus dlq replay: error: unrecognized arguments: --dryrun; did you mean --dry-run?",
        ),
        (
            ["trim", "--zzz"],
            "usage: atlasbus trim ",
            "atlasbus trim: error: unrecognized arguments: --zzz\n",
        ),
    ],
    ids=["status", "dlq-replay", "no-close-flag"],
)
def test_a_mistyped_flag_gets_the_subcommands_usage_and_the_closest_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str], usage: str, error: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith(usage), err
    assert err.endswith(error if error.endswith("\n") else error + "\n"), err
