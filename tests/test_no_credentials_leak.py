"""A Redis password never shows: not in errors, plans, progress, files, Spark's log or the CLI.

One server wants a distinctive password. The source, the sink (the password in the URL, in its
query string and in the ``password`` option), failing connections (a wrong password that
contains the right one, an unreachable port, an unknown query parameter holding it),
``atlasbus demo``, ``atlasbus status`` and ``atlasbus dlq summary/show/replay`` all run with it;
every output they make is captured (stdout and stderr, Spark's log at INFO, ``explain(True)``,
progress JSON, exception texts, every file written under the working folder: checkpoints and
Delta tables) and searched for the password.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from deltalake import DeltaTable

from atlasbus.sandbox.redis_server import RedisServer, free_port
from helpers import publish

PASSWORD = "pw-Zq81-leak-canary"
PREFIX = "leak"
CLI = [sys.executable, "-m", "atlasbus.cli"]

# Everything Spark does, in one child process whose stdout and stderr (Spark's log at INFO)
# are captured whole. Exceptions are printed with their full tracebacks.
SPARK_PARTS = r"""
import os, traceback

from pyspark_atlasbus.session import local_session

url, bare, wrong, unreachable, password, in_query, wrong_query = (
    os.environ[k]
    for k in (
        "LEAK_URL", "LEAK_BARE", "LEAK_WRONG", "LEAK_UNREACHABLE", "LEAK_PW", "LEAK_QUERY",
        "LEAK_WRONG_QUERY",
    )
)
spark = local_session("leak", log_level="INFO", delta=False)  # Redis credentials: no Delta needed
spark.sparkContext.setLogLevel("INFO")


def show(label, value):
    print(f"== {label}\n{value}", flush=True)


def attempt(label, action):
    try:
        action()
    except Exception as exc:
        show(f"{label}: str", str(exc))
        show(f"{label}: traceback", traceback.format_exc())
    else:
        show(label, "no error")


def read(**options):
    reader = spark.read.format("atlasbus").option("streamPrefix", "leak").option("topics", "orders")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


# batch reads: the password in the URL, in its query string, then in the option
for options in ({"url": url}, {"url": in_query}, {"url": bare, "password": password}):
    frame = read(**options)
    frame.explain(True)
    show("batch rows", frame.collect())

# streaming read with a dead-letter table, then a streaming sink with the password option
stream = (
    spark.readStream.format("atlasbus").option("url", url).option("streamPrefix", "leak")
    .option("topics", "orders").option("deadLetterTable", "dead_letters").load()
)
stream.explain(True)
query = (
    stream.writeStream.foreachBatch(lambda frame, batch: show("batch", frame.collect()))
    .option("checkpointLocation", "checkpoints/read").trigger(availableNow=True).start()
)
query.awaitTermination(300)
query.explain(True)
show("lastProgress", query.lastProgress.json)
show("recentProgress", [p.json for p in query.recentProgress])
show("status", query.status)

sink = (
    spark.readStream.format("atlasbus").option("url", bare).option("password", password)
    .option("streamPrefix", "leak").option("topics", "orders").load()
    .where("error is null").selectExpr("payload", "'copied' as topic")
    .writeStream.format("atlasbus").option("url", bare).option("password", password)
    .option("streamPrefix", "leak").option("checkpointLocation", "checkpoints/sink")
    .trigger(availableNow=True).start()
)
sink.awaitTermination(300)
sink.explain(True)
show("sink lastProgress", sink.lastProgress.json)
show("sink recentProgress", [p.json for p in sink.recentProgress])

# batch sink with the password in the URL, then in its query string
written = spark.range(3).selectExpr("to_json(named_struct('n', id)) as payload", "'batch' as topic")
written.write.format("atlasbus").mode("append").option("url", url).option("streamPrefix", "leak").save()
written.write.format("atlasbus").mode("append").option("url", in_query).option("streamPrefix", "leak").save()
show("batch write", "done")

# failing connections: a wrong password (it contains the right one), a port nobody listens on
for label, bad in (("wrong password", wrong), ("unreachable", unreachable)):
    attempt(f"{label} read", lambda: read(url=bad).collect())
    attempt(f"{label} read (option)", lambda: read(url=bad, password=password + "-x").collect())
    attempt(
        f"{label} write",
        lambda: written.write.format("atlasbus").mode("append").option("url", bad)
        .option("streamPrefix", "leak").save(),
    )
    attempt(
        f"{label} stream",
        lambda: spark.readStream.format("atlasbus").option("url", bad)
        .option("streamPrefix", "leak").option("topics", "orders").load()
        .writeStream.foreachBatch(lambda frame, batch: None)
        .option("checkpointLocation", f"checkpoints/{label.replace(' ', '-')}")
        .trigger(availableNow=True).start().awaitTermination(300),
    )
# a wrong password in the query string (it contains the right one), and an unknown parameter
attempt("wrong query password read", lambda: read(url=wrong_query).collect())
attempt("unknown parameter read", lambda: read(url=bare + "?passwd=" + password).collect())
spark.stop()
"""


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as running:
        client = redis.Redis(port=running.port)
        client.config_set("requirepass", PASSWORD)
        client.close()
        yield running


def run(command: list[str], cwd: Path, **env: str) -> str:
    """stdout and stderr of ``command`` run in ``cwd``, whatever its exit code."""
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env={**os.environ, **env},
    )
    return f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def files_holding(folder: Path, secret: str) -> list[str]:
    return [
        str(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and secret.encode() in path.read_bytes()
    ]


@pytest.mark.spark
def test_the_password_shows_nowhere(server: RedisServer, tmp_path: Path) -> None:
    client = redis.Redis(port=server.port, password=PASSWORD)
    publish(client, PREFIX, "orders", 5)
    client.xadd(f"{PREFIX}:orders", {"topic": "orders", "priority": "high", "payload": "{}"})
    url = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    bare = f"redis://127.0.0.1:{server.port}/0"
    wrong = f"redis://:{PASSWORD}-wrong@127.0.0.1:{server.port}/0"
    unreachable = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"
    query = f"{bare}?password={PASSWORD}"
    wrong_query = f"{bare}?password={PASSWORD}-wrong"

    spark_output = run(
        [sys.executable, "-c", SPARK_PARTS],
        tmp_path,
        LEAK_URL=url,
        LEAK_BARE=bare,
        LEAK_WRONG=wrong,
        LEAK_UNREACHABLE=unreachable,
        LEAK_PW=PASSWORD,
        LEAK_QUERY=query,
        LEAK_WRONG_QUERY=wrong_query,
    )
    # the child ran its parts: a failure to start would otherwise pass as "no password"
    assert "== recentProgress" in spark_output, spark_output[-3000:]
    assert "== batch write" in spark_output, spark_output[-3000:]
    assert "== unreachable stream: str" in spark_output, spark_output[-3000:]
    assert "== wrong query password read: str" in spark_output, spark_output[-3000:]
    assert "unknown query parameter 'passwd'" in spark_output, spark_output[-3000:]
    assert "\nno error\n" not in spark_output, "a failing connection did not fail"
    assert " INFO " in spark_output, "Spark's log at INFO was not captured"
    assert client.xlen(f"{PREFIX}:copied") == 5
    assert client.xlen(f"{PREFIX}:batch") == 6

    replay = ["dlq", "replay", "--table", str(tmp_path / "dead_letters"), "--stream-prefix", PREFIX]
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "summary": (["dlq", "summary", "--table", replay[3]], {}),
        "show": (["dlq", "show", "--table", replay[3]], {}),
        "dry run": ([*replay, "--url", url, "--dry-run"], {}),
        "wrong password": ([*replay, "--url", wrong], {}),
        "wrong password (query)": ([*replay, "--url", wrong_query], {}),
        "unknown parameter": ([*replay, "--url", f"{bare}?passwd={PASSWORD}"], {}),
        "unreachable": ([*replay, "--url", unreachable], {}),
        "replay": ([*replay, "--url", url], {}),
        "replay, $REDIS_URL": (replay, {"REDIS_URL": url}),
        "status (query)": (["status", "--url", query, "--stream-prefix", PREFIX], {}),
        # test_demo.py runs the demo with the password in the URL's user part
        "demo": (["demo", "--url", query, "--duration", "3", "--output", "demo"], {}),
    }
    cli = {name: run([*CLI, *argv], tmp_path, **env) for name, (argv, env) in commands.items()}
    for failing in (
        "wrong password",
        "wrong password (query)",
        "unreachable",
    ):  # errors that name the server, not hangs
        assert not cli[failing].startswith("exit 0") and "127.0.0.1" in cli[failing], cli[failing]
    assert "would replay 1 dead letter(s)" in cli["dry run"], cli["dry run"]
    assert "replayed 1" in cli["replay"], cli["replay"]
    assert "accounted" in cli["demo"], cli["demo"]
    assert "password=***" in cli["demo"], cli["demo"]  # its next steps, as printed
    assert "unknown query parameter 'passwd'" in cli["unknown parameter"], cli["unknown parameter"]
    assert f"{PREFIX}:orders" in cli["status (query)"], cli["status (query)"]
    dead_letters = str(DeltaTable(replay[3]).to_pyarrow_table().to_pylist())
    client.close()

    for label, text in [
        ("Spark's child process", spark_output),
        *((f"atlasbus {name}", output) for name, output in cli.items()),
        ("dead-letter rows", dead_letters),
    ]:
        assert PASSWORD not in text, f"{label} shows the password:\n{text[-5000:]}"
    assert files_holding(tmp_path, PASSWORD) == []
