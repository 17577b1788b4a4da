"""The sink's dead letters across driver SIGKILLs, on an input that keeps growing.

A publisher appends envelopes to topics a and b throughout; about one in 25 carries a payload
too big for the sink's ``maxMessageBytes``. The query (atlasbus source -> atlasbus sink with a
``deadLetterTable``), in a child process, reads in tasks of at most 500 entries, so a micro-batch
is several tasks, each recording its rejected rows in the Delta table before it publishes its
accepted ones. Meanwhile a cleaner deletes (XDEL) and trims (XTRIM MINID) the input below the
position the query mirrors to its group, and the output's consumer group reads the target
stream and deletes what it acknowledged, as the bus's consumers do.

The query is SIGKILLed (driver, JVM, Python workers) three times while a micro-batch is in
flight, each at another point: once its rows are part-way published; once some of its tasks
have recorded their dead letters and none has published; once it is planned and nothing of it
is published. Each time it restarts on its checkpoint, and the killed batch is replayed.
After the last run drains the input: the output's consumer received each accepted row exactly
once, and the dead-letter table holds each rejected row exactly once (every row as appended,
so a replayed task's second append would show), as a ``sink-publish`` ``too-big`` letter of
the query. Recording a task's dead letters without its Delta app transaction (a new append on
every attempt) makes this test fail: checked by hand when it was written.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus.dead_letters import SINK_PUBLISH, DeadLetterTable
from test_crash_recovery import (
    PADDED_BYTES,
    Publisher,
    _kill,
    _report,
    _start_query,
    _stop_if_running,
    _tail,
    batch_numbers,
    batch_ranges,
    group_position,
)

TOPICS = ("a", "b")
MAX_MESSAGE_BYTES = 1_024  # an envelope is about 250 bytes; a padded one over 2,000
KILLS = ("published part-way", "dead letters recorded", "planned")
QUERY_CLIENT = "crash-query"  # the name the query's connections give Redis
PAUSE_MS = 20_000  # the longest a kill holds writes; the query's reads time out after 30 s

pytestmark = pytest.mark.spark


def is_padded(correlation_id: str) -> bool:
    """The rows the sink rejects as too big: about one in 25."""
    return int(correlation_id, 16) % 25 == 0


class OutputConsumer(threading.Thread):
    """The output's consumer group: reads the target stream, acks and XDELs what it read."""

    def __init__(self, url: str, stream: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.stream = stream
        self.received: list[str] = []
        self.seen: set[str] = set()  # the same, for the kill conditions' quick look-ups
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                reply = self.client.xreadgroup(
                    "downstream", "worker", {self.stream: ">"}, count=500, block=20
                )
                for _, entries in reply or []:
                    ids = []
                    for entry_id, fields in entries:
                        correlation_id = fields[b"correlation_id"].decode()
                        self.received.append(correlation_id)
                        self.seen.add(correlation_id)
                        ids.append(entry_id)
                    self.client.xack(self.stream, "downstream", *ids)
                    self.client.xdel(self.stream, *ids)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def caught_up(self) -> bool:
        """Every entry the stream received was delivered to the group and acknowledged."""
        last = self.client.xinfo_stream(self.stream)["last-generated-id"]
        groups = self.client.xinfo_groups(self.stream)
        return [(g["last-delivered-id"], g["pending"]) for g in groups] == [(last, 0)]


class Cleaner(threading.Thread):
    """Deletes and trims the input below the query group's position (what it committed),
    keeping the entry at the position, where the query resumes."""

    def __init__(self, url: str, streams: list[str]) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.streams = streams
        self.deleted = self.trimmed = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            rounds = 0
            while not self.stop.wait(0.1):
                rounds += 1
                for stream in self.streams:
                    position = group_position(self.client, stream, "query")
                    if position is None or position == b"0-0":
                        continue
                    if rounds % 5 == 0:  # a retention job now and then, exact
                        self.trimmed += self.client.xtrim(stream, minid=position, approximate=False)
                        continue
                    older = self.client.xrange(stream, "-", b"(" + position, count=100)
                    doomed = [entry_id for entry_id, _ in older][1::2]  # holes behind the head
                    if doomed:
                        self.deleted += self.client.xdel(stream, *doomed)
        except BaseException as exc:  # reported by the test
            self.error = exc


def batch_rows(r: redis.Redis, checkpoint: Path, batch: int) -> list[str]:
    """The correlation IDs micro-batch ``batch`` reads, from its offsets in the checkpoint.
    Its entries are all there: the cleaner stays below the committed position."""
    return [
        fields[b"correlation_id"].decode()
        for stream, (low, upto) in batch_ranges(checkpoint, batch).items()
        for _, fields in r.xrange(stream, low, upto)
    ]


def batch_in_flight(checkpoint: Path) -> int | None:
    """The micro-batch the query planned (its offsets written) and has not committed."""
    pending = set(batch_numbers(checkpoint, "offsets")) - set(batch_numbers(checkpoint, "commits"))
    return max(pending, default=None)


def letters_among(table: Path, correlation_ids: set[str]) -> int:
    """How many dead letters the table holds (every row as appended) for these rows."""
    if not (table / "_delta_log").exists():
        return 0
    found = DeadLetterTable(str(table)).to_arrow(all_rows=True).column("correlation_id")
    return sum(1 for cid in found.to_pylist() if cid in correlation_ids)


def test_sink_dead_letters_once_and_rows_once_across_driver_kills_mid_batch(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    streams = [f"{prefix}:{topic}" for topic in TOPICS]
    target = f"{prefix}:target"
    r.xgroup_create(target, "downstream", id="0", mkstream=True)
    checkpoint, table, log = tmp_path / "ck", tmp_path / "dlq", tmp_path / "query.log"
    query_url = f"{redis_url}{'&' if '?' in redis_url else '?'}client_name={QUERY_CLIENT}"
    args = ["--url", query_url, "--prefix", prefix, "--checkpoint", str(checkpoint)]
    args += ["--sink", "atlasbus"]
    for option in ("group=query", "maxEntriesPerPartition=500"):
        args += ["--source-option", option]
    for option in (f"deadLetterTable={table}", f"maxMessageBytes={MAX_MESSAGE_BYTES}"):
        args += ["--sink-option", option]

    publisher = Publisher(
        redis_url, prefix, total=1_000_000, per_second=150, burst=600, padded=is_padded
    )
    output = OutputConsumer(redis_url, target)
    cleaner = Cleaner(redis_url, streams)
    for thread in (publisher, output, cleaner):
        thread.start()
    kills: list[dict[str, Any]] = []
    restarts: list[float] = []
    process: subprocess.Popen[str] | None = None
    try:
        for kind in KILLS:
            process, took = _start_query(args, log)
            restarts.append(took)
            previous = kills[-1]["batch"] if kills else 0  # batch 0: the run's first, never killed
            kill = kill_mid_batch(
                kind, process, checkpoint, table, output, r, target, log, previous
            )
            kills.append({**kill, "input_growing": publisher.is_alive()})
        publisher.halt.set()
        publisher.join(60)
        process, took = _start_query([*args, "--available-now"], log)
        restarts.append(took)
        assert process.wait(600) == 0, f"the draining run failed{_tail(log)}"
        deadline = time.monotonic() + 60
        while not output.caught_up():
            assert time.monotonic() < deadline, "the output's consumer did not catch up in 60 s"
            time.sleep(0.05)
    finally:
        _stop_if_running(process)
        publisher.halt.set()
        output.stop.set()
        cleaner.stop.set()
        for thread in (output, cleaner):
            thread.join(60)
    for thread in (publisher, output, cleaner):
        assert thread.error is None, repr(thread.error)

    published = publisher.correlation_ids
    padded = [cid for cid in published if is_padded(cid)]
    accepted = [cid for cid in published if not is_padded(cid)]
    print(f"\nkills: {json.dumps(kills)}")
    print(f"cleaner: {cleaner.deleted} deleted, {cleaner.trimmed} trimmed")
    _report("atlasbus, sink dead letters", accepted, output.received, restarts, kills=len(KILLS))
    # each kill in a later batch, the input still growing, the dead query's connections dropped
    assert [k["kind"] for k in kills] == list(KILLS)
    assert all(k["input_growing"] and k["connections_dropped"] > 0 for k in kills), kills
    # each killed batch was replayed and committed by a later run
    assert {k["batch"] for k in kills} <= set(batch_numbers(checkpoint, "commits"))
    assert cleaner.deleted > 0 and cleaner.trimmed > 0
    assert len(padded) > 100 and len(accepted) > 10 * len(padded)

    # each accepted row published once: nothing lost, nothing duplicated
    assert Counter(output.received) == Counter(accepted)
    # each rejected row recorded once, every row as appended (a replayed append would show)
    letters = DeadLetterTable(str(table)).to_arrow(all_rows=True).to_pylist()
    assert Counter(x["correlation_id"] for x in letters) == Counter(padded)
    assert len({x["dead_letter_id"] for x in letters}) == len(letters)
    assert {(x["stage"], x["reason"], x["topic"]) for x in letters} == {
        (SINK_PUBLISH, "too-big", "target")
    }
    assert len({x["query_id"] for x in letters} - {None}) == 1
    assert all(
        x["error"].startswith("cannot publish row ")
        and "is too big: the message would be" in x["error"]
        and f"over maxMessageBytes ({MAX_MESSAGE_BYTES}); this column" in x["error"]
        and json.loads(x["payload"])["pad"] == "p" * PADDED_BYTES
        for x in letters
    ), letters[0]


def kill_mid_batch(
    kind: str,
    process: subprocess.Popen[str],
    checkpoint: Path,
    table: Path,
    output: OutputConsumer,
    r: redis.Redis,
    target: str,
    log: Path,
    after: int,
) -> dict[str, Any]:
    """Wait for a micro-batch later than ``after`` (the previous kill's, which this run
    replays first) in flight at the point ``kind`` names, and SIGKILL the query there.

    The point is held still while it is checked: writes are paused (CLIENT PAUSE WRITE, as a
    failover does), so tasks may read and record dead letters but not publish, and the
    query's connections are dropped before writes resume. For "dead letters recorded" the
    pause starts before the batch publishes anything and lasts until some of its tasks have
    recorded their rejected rows, so the kill lands between those tasks' Delta appends and
    their publishing. Returns how far the batch had got."""
    deadline = time.monotonic() + 180
    watched: int | None = None  # the batch whose rows are split below
    accepted: set[str] = set()
    rejected: set[str] = set()
    while True:
        assert process.poll() is None, f"the query ended before the kill ({kind}){_tail(log)}"
        assert time.monotonic() < deadline, f"no batch reached {kind!r} in 180 s{_tail(log)}"
        batch = batch_in_flight(checkpoint)
        if batch is None or batch <= after:
            time.sleep(0.002)
            continue
        if watched != batch:  # its rows read and split once, not at every 2 ms look
            rows = batch_rows(r, checkpoint, batch)
            watched = batch
            accepted = {cid for cid in rows if not is_padded(cid)}
            rejected = {cid for cid in rows if is_padded(cid)}
        seen = len(accepted & output.seen)
        if kind == "published part-way":
            candidate = 0 < seen < len(accepted)
        else:  # nothing published yet, and for the dead letters something to record
            candidate = seen == 0 and bool(accepted) and bool(rejected or kind == "planned")
        if not candidate:
            time.sleep(0.002)
            continue
        r.client_pause(PAUSE_MS, all=False)
        try:
            if kind == "dead letters recorded":  # the tasks record, then wait to publish
                recording = time.monotonic() + 5
                while not letters_among(table, rejected) and time.monotonic() < recording:
                    assert process.poll() is None, f"the query ended{_tail(log)}"
                    time.sleep(0.05)
                time.sleep(0.5)  # the batch's other running task records its letters too
            published = len(accepted & (output.seen | target_rows(r, target)))
            dead_lettered = letters_among(table, rejected)
            held = {
                "published part-way": 0 < published < len(accepted),
                "dead letters recorded": published == 0 and dead_lettered > 0,
                "planned": published == 0,
            }[kind]
            dropped = 0
            if held:
                _kill(process, log)
                # Commands the dead query had sent were postponed by the pause; Redis would
                # run them once it resumes. Dropping its connections first makes this the
                # crash where they never arrived.
                for client in r.client_list():
                    if client.get("name") == QUERY_CLIENT:
                        dropped += r.client_kill_filter(_id=client["id"])
        finally:
            r.client_unpause()
        if held:
            return {
                "kind": kind,
                "batch": batch,
                "accepted": len(accepted),
                "published": published,
                "rejected": len(rejected),
                "dead_lettered": dead_lettered,
                "connections_dropped": dropped,
            }


def target_rows(r: redis.Redis, target: str) -> set[str]:
    """The correlation IDs in the target stream: published, and not yet deleted by the
    output's consumer (whose reads and deletes wait while writes are paused)."""
    return {fields[b"correlation_id"].decode() for _, fields in r.xrange(target)}
