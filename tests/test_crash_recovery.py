"""Exactly once across driver SIGKILLs while publishers keep appending.

A publisher appends 100,000 envelopes to two topics at a steady rate with bursts (so the
partition estimates change from batch to batch); a source → sink query in a child process is
SIGKILLed (its whole process group: driver, JVM, Python workers) five times at random moments
and restarted on its checkpoint. At the end every published correlation ID is in the output
exactly once. The figures (restart times, counts) are printed for the closing note.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

TOTAL = 100_000
KILLS = 5
STEADY_PER_SECOND = 1_500
BURST = 6_000
PADDED_BYTES = 2_000  # a padded payload's extra bytes
QUERY_SCRIPT = str(Path(__file__).with_name("crash_query.py"))


class Publisher(threading.Thread):
    """Appends ``total`` envelopes to topics a and b: a steady rate with random bursts."""

    def __init__(
        self,
        url: str,
        prefix: str,
        *,
        total: int = TOTAL,
        per_second: int = STEADY_PER_SECOND,
        burst: int = BURST,
        new_correlation_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        malformed: Callable[[str], bool] = lambda correlation_id: False,
        not_utf8: Callable[[str], bool] = lambda correlation_id: False,
        padded: Callable[[str], bool] = lambda correlation_id: False,
    ) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.prefix = prefix
        self.total, self.per_second, self.burst = total, per_second, burst
        self.new_correlation_id = new_correlation_id
        self.malformed = malformed  # by correlation ID: published with priority "high"
        self.not_utf8 = not_utf8  # by correlation ID: a payload string holding byte 0xFF
        self.padded = padded  # by correlation ID: a payload of PADDED_BYTES more
        self.correlation_ids: list[str] = []
        self.halt = threading.Event()  # set to stop before ``total``
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            rng = random.Random(11)
            tick = 0.1
            while len(self.correlation_ids) < self.total and not self.halt.is_set():
                count = self.burst if rng.random() < 0.03 else int(self.per_second * tick)
                count = min(count, self.total - len(self.correlation_ids))
                pipe = self.client.pipeline(transaction=False)
                for _ in range(count):
                    cid = self.new_correlation_id()
                    topic = "a" if rng.random() < 0.6 else "b"
                    fields = {
                        "topic": topic,
                        "priority": "high" if self.malformed(cid) else "3",
                        "payload": _payload(cid, self.not_utf8(cid), self.padded(cid)),
                        "correlation_id": cid,
                        "tracing": "{}",
                        "metadata": "{}",
                        "delivery_attempts": "0",
                        "enqueued_time": f"{time.time():.6f}",
                    }
                    if cid.startswith("f"):  # one in 16 without the optional field: a layout
                        del fields["delivery_attempts"]  # of its own, among the others' pages
                    pipe.xadd(f"{self.prefix}:{topic}", fields)
                    self.correlation_ids.append(cid)
                pipe.execute()
                time.sleep(tick)
        except BaseException as exc:  # reported by the test
            self.error = exc


def _payload(correlation_id: str, not_utf8: bool, padded: bool = False) -> bytes:
    """A JSON object; with ``not_utf8`` its second string holds a byte UTF-8 never has; with
    ``padded`` it holds a string of PADDED_BYTES more."""
    body: dict[str, str] = {"cid": correlation_id}
    if padded:
        body["pad"] = "p" * PADDED_BYTES
    text = json.dumps(body).encode()
    return text[:-1] + b', "note": "\xff"}' if not_utf8 else text


def _start_query(
    args: list[str], log: Path | None = None, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], float]:
    """Start the query process and wait until its query runs; returns it and the time taken.

    ``log``: a file the process's stderr is appended to (for a failure's cause); ``env``:
    variables on top of this process's (its JVM and Python workers inherit them)."""
    began = time.monotonic()
    with contextlib.ExitStack() as files:  # the child keeps its own copy of the log's handle
        stderr = files.enter_context(log.open("a")) if log is not None else subprocess.DEVNULL
        process = subprocess.Popen(
            [sys.executable, QUERY_SCRIPT, *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})},
        )
    assert process.stdout is not None
    line = process.stdout.readline()
    if "STARTED" not in line:
        process.wait(60)
        raise AssertionError(
            f"the query process did not start (exit {process.returncode}){_tail(log)}"
        )
    return process, time.monotonic() - began


def _tail(log: Path | None, lines: int = 60) -> str:
    """The end of the query process's stderr, for an assertion's message."""
    if log is None or not log.exists():
        return ""
    return "; its stderr ends:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _kill(process: subprocess.Popen[str], log: Path | None = None) -> None:
    # a query that ended by itself (a failure, a false data-loss report) is not a crash test
    assert process.poll() is None, (
        f"the query process had ended (exit {process.returncode}){_tail(log)}"
    )
    _stop_if_running(process)


def _stop_if_running(process: subprocess.Popen[str] | None) -> None:
    """SIGKILL a query process a failed assertion left running: it runs in a session of its
    own, so pytest would not stop it, and it would load the cores for the rest of the suite."""
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(60)


def _crash_and_recover(
    args: list[str],
    url: str,
    prefix: str,
    log: Path,
    *,
    publisher: Publisher | None = None,
    kills: int = KILLS,
    running: tuple[float, float] = (1.0, 6.0),
    progressed: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """Start the query ``kills`` times, SIGKILL it after ``running`` seconds (random in that
    range) each time, then drain with availableNow; the publisher appends meanwhile (until
    its total, or the last kill). The runs' stderr is appended to ``log``.

    ``progressed``: called after each start, returns once the run has committed something
    (the random wait then follows), so every kill lands after real progress."""
    publisher = publisher or Publisher(url, prefix)
    publisher.start()
    rng = random.Random(7)
    restarts: list[float] = []
    process: subprocess.Popen[str] | None = None
    try:
        for _ in range(kills):
            process, took = _start_query(args, log)
            restarts.append(took)
            if progressed is not None:
                progressed()
            time.sleep(rng.uniform(*running))
            _kill(process, log)
        publisher.halt.set()  # the stream grew through every kill; the drain reads the rest
        publisher.join(300)
        assert publisher.error is None, publisher.error
        assert not publisher.is_alive()
        process, took = _start_query([*args, "--available-now"], log)
        restarts.append(took)
        assert process.wait(600) == 0, f"the draining run failed{_tail(log)}"
    finally:
        _stop_if_running(process)
    return {
        "published": publisher.correlation_ids,
        "restart_seconds": restarts,
    }


def _report(
    name: str, published: list[str], written: list[str], restarts: list[float], kills: int = KILLS
) -> None:
    counts = Counter(written)
    figures = {
        "sink": name,
        "published": len(published),
        "written": len(written),
        "lost": len(set(published) - set(counts)),
        "duplicated": sum(c - 1 for c in counts.values() if c > 1),
        "unexpected": len(set(counts) - set(published)),
        "kills": kills,
        "restart_seconds": [round(t, 1) for t in restarts],
    }
    print(f"\ncrash test figures: {json.dumps(figures)}")


@pytest.mark.spark
@pytest.mark.parametrize(
    "sink, data_format", [("atlasbus", "envelope"), ("parquet", "envelope"), ("parquet", "raw")]
)
def test_exactly_once_across_driver_kills_while_publishers_append(
    spark: Any,
    r: redis.Redis,
    redis_url: str,
    prefix: str,
    tmp_path: Path,
    sink: str,
    data_format: str,
) -> None:
    """With ``format=raw`` too: its reader walks every reply into names and values."""
    out = str(tmp_path / "out")
    args = ["--url", redis_url, "--prefix", prefix, "--checkpoint", str(tmp_path / "ck")]
    args += ["--sink", sink, "--out", out, "--source-option", f"format={data_format}"]
    run = _crash_and_recover(args, redis_url, prefix, tmp_path / "query.log")
    if sink == "atlasbus":
        entries = r.xrange(f"{prefix}:target")
        written = [fields[b"correlation_id"].decode() for _, fields in entries]
    else:  # Spark reads only the files its _spark_metadata log committed
        written = [row["correlation_id"] for row in spark.read.parquet(out).collect()]
    _report(f"{sink}, {data_format}", run["published"], written, run["restart_seconds"])
    assert Counter(written) == Counter(run["published"])


def batch_numbers(checkpoint: Path, folder: str) -> list[int]:
    """The micro-batches with a file in the checkpoint's ``offsets`` or ``commits`` log (Spark
    writes each under a hidden name first, then renames it: no half-written file shows)."""
    path = checkpoint / folder
    if not path.exists():
        return []
    return sorted(int(p.name) for p in path.iterdir() if p.name.isdigit())


def batch_offsets(checkpoint: Path, batch: int) -> dict[str, str]:
    """Each stream's end of micro-batch ``batch``, from the query's offsets log (each file: a
    version line, the batch's metadata, then the source's offsets as JSON)."""
    from atlasbus.model.offsets import StreamOffsets

    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    offsets = StreamOffsets.from_json(lines[2])
    return {stream: str(offsets[stream]) for stream in offsets}


def group_position(r: redis.Redis, stream: str, group: str) -> bytes | None:
    """The group's last-delivered ID, or None while it (or its stream) does not exist."""
    if not r.exists(stream):
        return None
    for info in r.xinfo_groups(stream):
        if info["name"].decode() == group:
            return bytes(info["last-delivered-id"])
    return None


def batch_ranges(checkpoint: Path, batch: int) -> dict[str, tuple[str, str]]:
    """Each stream's XRANGE bounds for micro-batch ``batch``: after the batch before's end
    (exclusive, or from the stream's start), up to its own end, from the offsets log."""
    end = batch_offsets(checkpoint, batch)
    start = batch_offsets(checkpoint, batch - 1) if batch > 0 else {}
    return {
        stream: (f"({start[stream]}" if stream in start else "-", upto)
        for stream, upto in end.items()
    }


def _largest_read(r: redis.Redis, checkpoint: Path) -> int:
    """The most entries one micro-batch read from one stream, from the query's offsets log."""
    return max(
        (
            len(r.xrange(stream, low, upto))
            for batch in batch_numbers(checkpoint, "offsets")
            for stream, (low, upto) in batch_ranges(checkpoint, batch).items()
        ),
        default=0,
    )


@pytest.mark.spark
def test_exactly_once_across_driver_kills_when_tasks_hand_over_several_batches(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """Tasks of more entries than the reader decodes at once, so that each task's receiving
    thread hands over several batches (``reader.COLUMN_DECODE_ROWS``): partitions of up to
    25,000 entries and a publisher fast enough, with bursts, that the backlog a restart finds
    fills them. The offsets log shows that some micro-batch read more than that from a stream."""
    from atlasbus.reading.range_reader import COLUMN_DECODE_ROWS

    out = str(tmp_path / "out")
    checkpoint = tmp_path / "ck"
    args = ["--url", redis_url, "--prefix", prefix, "--checkpoint", str(checkpoint)]
    args += ["--sink", "parquet", "--out", out]
    args += ["--source-option", "maxEntriesPerPartition=25000"]
    publisher = Publisher(redis_url, prefix, total=200_000, per_second=3_000, burst=15_000)
    run = _crash_and_recover(args, redis_url, prefix, tmp_path / "query.log", publisher=publisher)
    written = [row["correlation_id"] for row in spark.read.parquet(out).collect()]
    _report("parquet, tasks of several batches", run["published"], written, run["restart_seconds"])
    assert len(run["published"]) == 200_000
    assert Counter(written) == Counter(run["published"])
    largest = _largest_read(r, checkpoint)
    print(f"largest read of one stream in one micro-batch: {largest} entries")
    assert largest > COLUMN_DECODE_ROWS
