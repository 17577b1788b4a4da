"""`atlasbus demo` end to end, in a subprocess as a user runs it.

Its printed summary must match the tables it leaves behind and the streams in Redis; its
progress lines add up at every tick; its next steps run as printed and never show the Redis
password; Ctrl-C stops it cleanly with a summary that still adds up; the explorer notebook works
on its tables.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from deltalake import DeltaTable

from atlasbus.dead_letters import DeadLetterTable
from atlasbus.dead_letters.maintenance import parquet_files_on_disk
from atlasbus.decoding.decoder import REASONS, decode_envelope_page
from atlasbus.sandbox.redis_server import RedisServer
from atlasbus.sandbox.traffic import TOPICS, TrafficGenerator
from conftest import in_ci
from notebook_runner import execute_notebook, images, text
from pyspark_atlasbus.demo import GROUP, STREAM_PREFIX
from pyspark_atlasbus.demo.common import STREAMS
from pyspark_atlasbus.demo.summary import stream_positions

DEMO = [sys.executable, "-m", "atlasbus.cli", "demo"]
PASSWORD = "s3cret-demo-pw"
PROGRESS = re.compile(
    r"^published\s+([\d,]+) \| read\s+([\d,]+) = written\s+([\d,]+) "
    r"\+ dead letters\s+([\d,]+) \| lag\s+([\d,]+) \| batch (\S+)$"
)


@dataclass(frozen=True)
class DemoRun:
    returncode: int
    stdout: str
    stderr: str
    output: Path
    url: str | None = None

    def number(self, label: str) -> int:
        match = re.search(rf"^{re.escape(label)}:\s+(\d+)", self.stdout, re.MULTILINE)
        assert match, f"no '{label}' line in:\n{self.stdout}"
        return int(match.group(1))

    def reasons(self) -> dict[str, int]:
        block = self.stdout.split("dead letters:", 1)[1].split("accounted:", 1)[0]
        return {
            reason: int(count)
            for reason, count in re.findall(r"^  ([a-z0-9-]+)\s+(\d+)$", block, re.MULTILINE)
        }


@pytest.fixture(scope="module")
def demo_redis_url() -> Iterator[str]:
    """A redis-server of the module's own that wants a password, and its URL with it."""
    with RedisServer() as server:
        redis.Redis(port=server.port).config_set("requirepass", PASSWORD)
        yield f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"


@pytest.fixture(scope="module")
def demo_run(demo_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One short demo against a server given with ``--url`` (with a password), so Redis can be
    checked after it."""
    workdir = tmp_path_factory.mktemp("demo")
    done = subprocess.run(
        [*DEMO, "--url", demo_redis_url, "--duration", "8", "--rate", "600", "--output", "out"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=workdir,
    )
    return DemoRun(done.returncode, done.stdout, done.stderr, workdir / "out", demo_redis_url)


def _progress_figures(stdout: str) -> list[tuple[int, int, int, int, int]]:
    """(published, read, written, dead letters, lag) of every progress line, checked to add
    up: read = written + dead letters, published = read + lag, and none goes backwards."""
    assert stdout.count("progress: published = ") == 1, stdout  # the legend, once
    rows = []
    for line in stdout.splitlines():
        if line.startswith("published ") and "|" in line:
            match = PROGRESS.match(line)
            assert match, line
            published, read, written, dead, lag = (
                int(match.group(i).replace(",", "")) for i in range(1, 6)
            )
            assert read == written + dead, line
            assert published == read + lag, line
            rows.append((published, read, written, dead, lag))
    assert rows, stdout
    for before, after in itertools.pairwise(rows):
        assert all(a >= b for a, b in zip(after[:4], before[:4], strict=True)), (before, after)
    return rows


def _next_step(stdout: str, words: str) -> str:
    """The printed next-step command containing ``words``, as a user would copy it."""
    lines = [line.strip() for line in stdout.splitlines() if words in line]
    assert len(lines) == 1, stdout
    return lines[0]


def _run_as_printed(command: str) -> subprocess.CompletedProcess[str]:
    """``command`` in a shell that does not have the virtualenv on PATH (not activated)."""
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    env.pop("REDIS_URL", None)
    return subprocess.run(
        command, shell=True, capture_output=True, text=True, timeout=120, env=env, cwd="/"
    )


def _stream_entries(redis_url: str) -> dict[tuple[str, str], list[bytes]]:
    client = redis.Redis.from_url(redis_url)
    entries = {}
    for topic in TOPICS:
        stream = f"{STREAM_PREFIX}:{topic}"
        for entry_id, fields in client.xrange(stream):
            entries[(stream, entry_id.decode())] = [
                part for pair in fields.items() for part in pair
            ]
    return entries


def test_demo_summary_matches_its_tables_and_redis(demo_run: DemoRun) -> None:
    assert demo_run.returncode == 0, demo_run.stdout[-2000:] + demo_run.stderr[-3000:]
    published = demo_run.number("published entries")
    malformed = demo_run.number("  of which malformed")
    events = demo_run.number("events written")
    dead = demo_run.number("dead letters")
    assert "(every entry accounted for)" in demo_run.stdout
    assert "Traceback" not in demo_run.stderr

    # The tables hold what the summary says.
    event_rows = DeltaTable(str(demo_run.output / "events")).to_pyarrow_table().to_pylist()
    letters = DeadLetterTable(str(demo_run.output / "dead_letters")).to_pandas()
    assert len(event_rows) == events
    assert len(letters) == dead == malformed
    assert dict(Counter(letters["reason"])) == demo_run.reasons()
    assert set(letters["stage"]) == {"source-decode"}
    assert set(letters["reason"]) <= set(REASONS)

    # ... and together exactly the entries in Redis: each once, the malformed ones dead-lettered.
    assert demo_run.url is not None
    entries = _stream_entries(demo_run.url)
    assert len(entries) == published == events + dead
    event_keys = [(row["stream"], row["id"]) for row in event_rows]
    letter_keys = list(zip(letters["stream"], letters["entry_id"], strict=True))
    assert len(set(event_keys)) == len(event_keys) and len(set(letter_keys)) == len(letter_keys)
    assert set(event_keys) | set(letter_keys) == set(entries)
    for (stream, entry_id), reason in zip(letter_keys, letters["reason"], strict=True):
        page = decode_envelope_page(
            [[entry_id.encode(), entries[(stream, entry_id)]]],
            topic="t",
            stream=stream,
            include_raw_fields=False,
        )
        assert page.reasons == [reason]

    # The consumer group mirrors the query: at the end it has read every stream to its end.
    client = redis.Redis.from_url(demo_run.url)
    for topic in TOPICS:
        stream = f"{STREAM_PREFIX}:{topic}"
        group = next(g for g in client.xinfo_groups(stream) if g["name"].decode() == GROUP)
        assert group["last-delivered-id"] == client.xrevrange(stream, count=1)[0][0]
    # Spark's warm-up read one entry of its own stream, deleted right after.
    assert not client.exists(f"{STREAM_PREFIX}:warmup")


def test_demo_progress_adds_up_at_every_tick(demo_run: DemoRun) -> None:
    assert demo_run.returncode == 0, demo_run.stdout[-2000:] + demo_run.stderr[-3000:]
    rows = _progress_figures(demo_run.stdout)
    published, read, written, dead, lag = rows[-1]
    assert (published, read, written, dead, lag) == (
        demo_run.number("published entries"),
        demo_run.number("published entries"),
        demo_run.number("events written"),
        demo_run.number("dead letters"),
        0,
    )
    # Spark's start says what it is doing, and the first batch's delay is reported.
    assert "starting the streaming query" in demo_run.stdout
    assert re.search(
        r"first micro-batch committed [\d.]+ s after the traffic started", demo_run.stdout
    )


def test_demo_writes_events_with_spark_delta_sink_and_compacts_its_tables(
    demo_run: DemoRun,
) -> None:
    """With the Delta Lake jars (fetched by local_session), the events table is written by
    Spark's Delta sink; at the end both tables are compacted to one data file each."""
    assert demo_run.returncode == 0, demo_run.stdout[-2000:] + demo_run.stderr[-3000:]
    (note,) = [x for x in demo_run.stderr.splitlines() if "jars" in x and "fetched" in x] or [""]
    if note:  # local_session's one line: no Maven Central and no cache
        if in_ci():
            pytest.fail(f"CI needs the Delta Lake jars (Maven Central must be reachable): {note}")
        pytest.skip(f"no Delta Lake jars: {note}")
    events = demo_run.output / "events"
    assert (
        'events table: Spark\'s Delta sink (writeStream.format("delta"), exactly once with the '
        "checkpoint)" in demo_run.stdout
    ), demo_run.stderr[-2000:]
    history = DeltaTable(str(events)).history()
    assert {c["operation"] for c in history} >= {"STREAMING UPDATE", "OPTIMIZE"}
    match = re.search(
        r"compacted the tables \(parquet files: events (\d+) -> (\d+); dead_letters (\d+) -> "
        r"(\d+)\)",
        demo_run.stdout,
    )
    assert match, demo_run.stdout
    assert int(match.group(1)) > 1 and int(match.group(3)) > 1
    assert (match.group(2), match.group(4)) == ("1", "1")
    assert parquet_files_on_disk(events) == 1
    assert parquet_files_on_disk(demo_run.output / "dead_letters") == 1


def test_demo_next_steps_run_as_printed_without_the_password(demo_run: DemoRun) -> None:
    assert demo_run.returncode == 0, demo_run.stdout[-2000:] + demo_run.stderr[-3000:]
    everything = demo_run.stdout + demo_run.stderr
    assert PASSWORD not in everything
    assert "redis://:***@127.0.0.1:" in demo_run.stdout
    assert "*** stands for the Redis password" in demo_run.stdout
    assert "dead_letter_explorer.ipynb" in demo_run.stdout

    summary = _next_step(demo_run.stdout, "dlq summary --table")
    assert summary.endswith(f"atlasbus dlq summary --table {demo_run.output / 'dead_letters'}")
    done = _run_as_printed(summary)
    assert done.returncode == 0, done.stderr
    assert f"{demo_run.number('dead letters')} dead letter(s)" in done.stdout

    # The replay it suggests has something to replay on the demo's data (a dry run here: the
    # explorer test replays for real), once *** is replaced by the password as it says.
    replay = _next_step(demo_run.stdout, "dlq replay --table")
    assert replay.endswith("--dry-run  # then without --dry-run to publish them")
    done = _run_as_printed(replay.replace("***", PASSWORD))  # the whole line, as pasted
    assert done.returncode == 0, done.stdout + done.stderr
    match = re.search(r"would replay (\d+) dead letter\(s\).* 0 not replayable", done.stdout)
    assert match and int(match.group(1)) > 0, done.stdout


def test_dead_letter_explorer_on_the_demo_tables(demo_run: DemoRun, tmp_path: Path) -> None:
    assert demo_run.returncode == 0
    redis_url = demo_run.url
    assert redis_url is not None
    table = tmp_path / "dead_letters"
    shutil.copytree(demo_run.output / "dead_letters", table)
    before = _stream_entries(redis_url)
    notebook = execute_notebook(
        "dead_letter_explorer.ipynb",
        {"REDIS_URL": redis_url, "ATLASBUS_DEAD_LETTERS": str(table)},
        tmp_path,
        parameters={"REPLAY": True},
    )
    shown = text(notebook)
    assert len(images(notebook)) == 1
    assert f"{demo_run.number('dead letters')} dead letters" in shown
    # Its dry run finds dead letters to replay in the demo's table (invalid-integer ones).
    plan = re.search(r"(\d+) would be replayed;", shown)
    assert plan and 0 < int(plan.group(1)) <= 5, shown
    replayed = DeadLetterTable(str(table)).to_pandas("replay_count > 0")
    added = set(_stream_entries(redis_url)) - set(before)
    assert len(replayed) == int(plan.group(1)) and set(replayed["reason"]) == {"invalid-integer"}
    assert {
        (s, i) for s, i in zip(replayed["stream"], replayed["last_replay_entry_id"], strict=True)
    } == added


def test_demo_ctrl_c_stops_cleanly_with_a_summary_that_adds_up(tmp_path: Path) -> None:
    """Ctrl-C in a terminal signals the whole process group: the embedded Redis must survive
    it until the query has stopped, and the summary must still match the tables."""
    demo = subprocess.Popen(
        [*DEMO, "--duration", "120", "--rate", "500", "--output", "out"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    assert demo.stdout is not None
    lines = []
    deadline = time.monotonic() + 180
    url = None
    for line in demo.stdout:
        lines.append(line)
        url = url or (re.search(r"on (redis://\S+)", line) or [None, None])[1]
        if re.search(r"\| batch [1-9]", line) or time.monotonic() > deadline:
            break
    os.killpg(demo.pid, signal.SIGINT)
    stdout, stderr = demo.communicate(timeout=120)
    stdout = "".join(lines) + stdout
    run = DemoRun(demo.returncode, stdout, stderr, tmp_path / "out")
    _progress_figures(stdout)

    assert demo.returncode == 130, stdout[-2000:] + stderr[-3000:]
    assert "Ctrl-C: stopping: no more traffic; the query reads what was published" in stdout
    assert "(every entry accounted for)" in stdout, stdout
    # The traffic stopped at the Ctrl-C and the query read the rest before it stopped, between
    # micro-batches: no task was cut short (pyspark's daemon would print a traceback for it).
    assert "not read (stopped early)" not in stdout, stdout
    assert "Traceback" not in stderr, stderr[-3000:]
    events = DeltaTable(str(run.output / "events")).count()
    letters = DeadLetterTable(str(run.output / "dead_letters"))
    dead = len(letters.to_pandas()) if letters.exists() else 0
    assert (events, dead) == (run.number("events written"), run.number("dead letters"))
    assert events + dead == run.number("published entries")
    # The embedded server is gone with the demo.
    assert url is not None
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()


def test_an_entry_lettered_by_a_batch_cut_off_by_ctrl_c_counts_once(r: redis.Redis) -> None:
    """Ctrl-C can stop the query inside a batch whose reads already appended their dead letters
    (source-decode) while its events were never committed: those entries are after the
    committed position and in the dead-letter table. The summary counts them once."""
    orders, payments = STREAMS[0], STREAMS[1]
    r.delete(*STREAMS)
    try:
        ids = [r.xadd(orders, {"n": str(n)}).decode() for n in range(5)]
        r.xadd(payments, {"n": "0"})
        committed = {orders: ids[1]}  # payments: nothing committed yet
        lettered = frozenset({(orders, ids[3]), (orders, ids[0]), ("elsewhere", ids[4])})

        assert stream_positions(r, committed, lettered) == (6, 2 + 1)  # ids[2], ids[4]; payments
        assert stream_positions(r, committed) == (6, 3 + 1)
    finally:
        r.delete(*STREAMS)


def test_demo_unreachable_url_is_one_line_that_says_what_to_do(tmp_path: Path) -> None:
    done = subprocess.run(
        [*DEMO, "--url", "redis://127.0.0.1:1/0", "--output", "out"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("atlasbus demo: error: cannot reach Redis at 127.0.0.1:1")
    assert "leave out --url" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--duration", "0"], "argument --duration: must be a positive number, got '0'"),
        (["--rate", "fast"], "argument --rate: must be a positive number, got 'fast'"),
    ],
)
def test_demo_bad_arguments(args: list[str], message: str) -> None:
    done = subprocess.run([*DEMO, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr


def test_help_reads_well() -> None:
    top = subprocess.run(
        [sys.executable, "-m", "atlasbus.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert top.returncode == 0 and "demo" in top.stdout and "dlq" in top.stdout
    done = subprocess.run([*DEMO, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for option in ("--url", "--duration", "--rate", "--output", "--keep", "examples:"):
        assert option in done.stdout
    assert "%%" not in done.stdout and "about 1% of the entries" in done.stdout


def test_traffic_malformed_entries_get_the_reason_they_were_made_for() -> None:
    """Every way the generator breaks an entry is one the decoder names as expected."""
    messages = TrafficGenerator(seed=3, malformed_share=0.3).take(3000)
    raw = [
        [
            f"1-{i}".encode(),
            [
                part if isinstance(part, bytes) else part.encode()
                for pair in m.fields.items()
                for part in pair
            ],
        ]
        for i, m in enumerate(messages)
    ]
    page = decode_envelope_page(raw, topic="t", stream="s", include_raw_fields=False)
    assert page.reasons == [m.reason for m in messages]
    assert {m.reason for m in messages} - {None} == set(REASONS)
    assert Counter(m.topic for m in messages) == dict.fromkeys(TOPICS, 1000)
