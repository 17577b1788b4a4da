"""Retention, the reaper, malformed entries and the bus's own deletions, across driver SIGKILLs.

While a publisher appends to topics a and b (about one entry in 50 malformed: its priority is
not a number; another one in 50 with a payload whose JSON string holds a byte that is not
UTF-8, so the pages holding it leave the all-ASCII path), the bus's consumer group ``bus``
reads every entry and acks all but the poison ones (another one in 50), and a cleaner thread
XDELs entries every consumer is past (the bus's XDEL-after-ack habit). The query, in a child
process SIGKILLed three times and restarted on its checkpoint, mirrors its position to the
group ``query``, trims with ``trimConsumed``, sweeps ``bus`` with ``sweepDelete`` and cuts each
batch into three pieces by time (``minPartitions``). While it is down after the second kill, a
backlog of 12,000 entries arrives at once, so the next batch's tasks decode thousands of
entries each, in several groups joined into one batch, with malformed entries among them. It
runs with ``failOnDataLoss`` on, so a false data-loss report would end it (and the test) at
once.

A last run catches up, sweeps every poison entry, reads a few more entries and trims. Then:
the output holds every well-formed published entry exactly once; the bus's group received every
entry (nothing trimmed or deleted before it read it); each poison entry and each malformed
entry is in the dead-letter table exactly once (no append repeated across the kills), and the
poison ones are pending nowhere; and each stream is trimmed to the one entry at both groups'
position, its last. With ``format=raw`` (every reply walked into names and values) nothing
is malformed and nothing is dead-lettered (the source refuses ``deadLetterTable``, and so the
sweep, with it): the poison entries hold the trims back until the bus acknowledges them at the
end (a handler that succeeds at last), and every published entry is written.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from atlasbus.dead_letters import DeadLetterTable
from test_crash_recovery import (
    Publisher,
    _kill,
    _report,
    _start_query,
    _stop_if_running,
    batch_numbers,
    group_position,
)

TOTAL = 60_000  # a cap: the publisher is halted at the last kill, long before it
BACKLOG = 12_000  # published at once while the query is down
KILLS = 3
TOPICS = ("a", "b")


def is_poison(correlation_id: str) -> bool:
    """The entries the bus's consumer never acknowledges: about one in 50."""
    return int(correlation_id, 16) % 50 == 0


def is_malformed(correlation_id: str) -> bool:
    """The entries published with a priority that is not a number: about one in 50."""
    return int(correlation_id, 16) % 50 == 1


def is_not_utf8(correlation_id: str) -> bool:
    """The entries published with a payload that is not UTF-8: about one in 50."""
    return int(correlation_id, 16) % 50 == 2


def healthy() -> str:
    """A correlation ID the bus's consumer acknowledges, of a well-formed entry."""
    while is_poison(cid := uuid.uuid4().hex) or is_malformed(cid) or is_not_utf8(cid):
        pass
    return cid


class BusConsumer(threading.Thread):
    """The bus's own consumer group ``bus``: receives everything new, acks all but poison."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.streams = {f"{prefix}:{topic}": ">" for topic in TOPICS}
        self.received: list[str] = []
        self.poison: set[tuple[str, str]] = set()  # (stream, entry ID)
        # each stream's last entry handled (poison noted): the cleaner stays below it
        self.processed: dict[str, str] = {}
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while True:
                reply = self.client.xreadgroup("bus", "worker", self.streams, count=500, block=50)
                if not reply:
                    if self.stop.is_set():
                        return
                    continue
                for raw_stream, entries in reply:
                    stream = raw_stream.decode()
                    acked = []
                    for entry_id, fields in entries:
                        correlation_id = fields[b"correlation_id"].decode()
                        self.received.append(correlation_id)
                        if is_poison(correlation_id):
                            self.poison.add((stream, entry_id.decode()))
                        else:
                            acked.append(entry_id)
                    if acked:
                        self.client.xack(stream, "bus", *acked)
                    self.processed[stream] = entries[-1][0].decode()
        except BaseException as exc:  # reported by the test
            self.error = exc


class Cleaner(threading.Thread):
    """XDELs what both groups are past and the bus acknowledged, as the bus's consumers do.

    The entry at the slower group's position is kept: that is where the query resumes, and
    the one the loss checks look at."""

    def __init__(self, url: str, prefix: str, bus: BusConsumer) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)  # bytes: some payloads are not UTF-8
        self.streams = [f"{prefix}:{topic}" for topic in TOPICS]
        self.bus = bus
        self.deleted = 0
        self.first_moved = 0  # times a stream's first entry was found later than before
        self.first: dict[str, str] = {}
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.wait(0.2):
                for stream in self.streams:
                    self.clean(stream)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def clean(self, stream: str) -> None:
        head = [entry_id.decode() for entry_id, _ in self.client.xrange(stream, count=1)]
        if head and stream in self.first and head[0] != self.first[stream]:
            self.first_moved += 1  # deleted or trimmed while the query runs
        if head:
            self.first[stream] = head[0]
        groups = {
            g["name"].decode(): g["last-delivered-id"].decode()
            for g in self.client.xinfo_groups(stream)
        }
        processed = self.bus.processed.get(stream)
        if "query" not in groups or processed is None:
            return
        bound = min(groups["query"], processed, key=lambda i: tuple(map(int, i.split("-"))))
        if bound == "0-0":  # nothing read yet (and "(0-0" is no valid range end)
            return
        poison = frozenset(self.bus.poison)  # copied at once: the bus's thread adds to it
        pending = {i for s, i in poison if s == stream}  # the bus never acks them
        entries = self.client.xrange(stream, "-", f"({bound}", count=300)
        doomed = [entry_id.decode() for entry_id, _ in entries]
        doomed = [entry_id for entry_id in doomed if entry_id not in pending]
        if doomed:
            self.deleted += self.client.xdel(stream, *doomed)


def _commits(checkpoint: Path) -> int:
    return len(batch_numbers(checkpoint, "commits"))


@pytest.mark.spark
@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["maxEntriesPerTrigger=1500"],
        ["startingOffsets=group"],
        ["topicPattern=[ab]", "env:NUMBA_DISABLE_JIT=1"],
        ["format=raw"],
        ["pageSize=7"],
    ],
    ids=[
        "all-available",
        "maxEntriesPerTrigger",
        "group-start",
        "topicPattern-pure-path",
        "format-raw",
        "mixed-pages",
    ],
)
def test_trim_sweep_and_bus_deletions_across_driver_kills_lose_and_duplicate_nothing(
    spark: Any, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path, extra: list[str]
) -> None:
    # With the cap, every trigger's end is placed by admission control's walk of IDs on the
    # driver, while the cleaner deletes and the query trims behind it: the 12,000-entry
    # backlog takes several capped batches, each walked after a kill as before it. With a
    # group start (the group "query" at 0-0 before the first run), batch 0 is the empty batch
    # that fixes a moving start, and the first kill follows its commit. With ``format=raw``
    # every reply is walked into names and values, and no entry is malformed: a priority that
    # is not a number is just bytes in the fields' map, so every entry is written. No
    # dead-letter table, so no sweep: the bus acknowledges its poison entries at the end.
    # With pages of 7 entries, one in 16 lacking ``delivery_attempts`` leaves some replies of
    # one layout (cut into columns) beside others (names and values): a batch's replies are
    # decoded together as one ``MixedPage``. With the topic pattern, the workers read on the
    # pure path (NUMBA_DISABLE_JIT: hiredis parses the replies, the list decoder decodes).
    env = dict(item[len("env:") :].split("=", 1) for item in extra if item.startswith("env:"))
    extra = [item for item in extra if not item.startswith("env:")]
    raw = "format=raw" in extra
    for topic in TOPICS:
        r.xgroup_create(f"{prefix}:{topic}", "bus", id="0", mkstream=True)
        if "startingOffsets=group" in extra:
            r.xgroup_create(f"{prefix}:{topic}", "query", id="0")
    checkpoint, out, table = tmp_path / "ck", tmp_path / "out", tmp_path / "dlq"
    args = ["--url", redis_url, "--prefix", prefix, "--checkpoint", str(checkpoint)]
    args += ["--sink", "parquet", "--out", str(out)]
    sweep = [
        "sweepGroup=bus",
        "sweepMaxDeliveries=1",
        "sweepMinIdle=2s",
        "sweepDelete=true",
        f"deadLetterTable={table}",
    ]
    for option in (
        "group=query",
        "trimConsumed=true",
        "minPartitions=3",  # small batches cut by time: the task-side loss checks without counts
        *([] if raw else sweep),
        *extra,
    ):
        args += ["--source-option", option]
    log = tmp_path / "query.log"

    bad = {"malformed": is_malformed, "not_utf8": is_not_utf8}
    publisher = Publisher(redis_url, prefix, total=TOTAL, per_second=100, burst=300, **bad)
    backlog = Publisher(  # one pipeline of BACKLOG entries, run in this thread
        redis_url, prefix, total=BACKLOG, per_second=10 * BACKLOG, **bad
    )
    bus = BusConsumer(redis_url, prefix)
    cleaner = Cleaner(redis_url, prefix, bus)
    for thread in (publisher, bus, cleaner):
        thread.start()
    restarts = []
    while_publishing = 0
    process: subprocess.Popen[str] | None = None
    try:
        for kill in range(KILLS):
            process, took = _start_query(args, log, env)
            restarts.append(took)
            # a batch committed by this run (or nothing left to publish), then the kill
            target = _commits(checkpoint) + 1
            wait_for(
                lambda t=target: _commits(checkpoint) >= t or not publisher.is_alive(),
                "a batch",
                process,
                log,
            )
            time.sleep(0.5 * kill)  # kills at different points of a micro-batch
            while_publishing += publisher.is_alive()
            _kill(process, log)
            if kill == 1:
                backlog.run()
        publisher.halt.set()  # the streams grew through every kill
        publisher.join(300)
        process, took = _start_query(args, log, env)  # the last run, killed once it has caught up
        restarts.append(took)
        published = publisher.correlation_ids + backlog.correlation_ids
        wait_for(lambda: len(bus.received) == len(published), "the bus's consumer", process, log)
        pending = [f"{prefix}:{topic}" for topic in TOPICS]
        if raw:  # the poison entries' handler succeeds at last
            for stream, entry_id in bus.poison:
                assert r.xack(stream, "bus", entry_id) == 1
        wait_for(  # idle past sweepMinIdle, swept at a trigger (acknowledged with format=raw)
            lambda: all(r.xpending(s, "bus")["pending"] == 0 for s in pending),
            "the sweep of every poison entry",
            process,
            log,
        )
        # A few more entries: the query's next batch is committed with nothing pending, so
        # the trim after it reaches the end of each stream.
        tail = Publisher(
            redis_url, prefix, total=20, per_second=200, burst=20, new_correlation_id=healthy
        )
        tail.run()  # in this thread
        published = published + tail.correlation_ids
        ends = {s: r.xrevrange(s, count=1)[0][0] for s in pending}
        wait_for(
            lambda: all(r.xlen(s) == 1 and group_position(r, s, "query") == ends[s] for s in ends),
            "the trim after the last batch",
            process,
            log,
        )
        _kill(process, log)
        bus.stop.set()
        bus.join(60)
    finally:
        _stop_if_running(process)
        cleaner.stop.set()
        cleaner.join(60)
    for thread in (publisher, backlog, tail, bus, cleaner):
        assert thread.error is None, repr(thread.error)

    written = [row["correlation_id"] for row in spark.read.parquet(str(out)).collect()]
    poison = {cid for cid in published if is_poison(cid)}
    not_utf8 = {cid for cid in published if is_not_utf8(cid)}
    malformed = {cid for cid in published if is_malformed(cid)} | not_utf8
    print(
        f"{while_publishing} of {KILLS} kills while publishing; cleaner deleted "
        f"{cleaner.deleted} entries; heads moved {cleaner.first_moved} times; {len(poison)} poison and {len(malformed)} malformed entries"
    )
    assert while_publishing == KILLS  # every kill came while the streams grew
    assert len(malformed) - len(not_utf8) > 100 and len(not_utf8) > 100  # each 1 in 50
    well_formed = [cid for cid in published if raw or cid not in malformed]
    label = "parquet, format=raw, trim + XDEL" if raw else "parquet, trim + sweep + XDEL"
    _report(label, well_formed, written, restarts, kills=KILLS + 1)
    assert Counter(written) == Counter(well_formed)  # no loss, no duplicate
    assert Counter(bus.received) == Counter(published)  # nothing went before the bus read it
    assert cleaner.first_moved > 0  # the streams' heads went while the query ran
    # Without the cap, the cleaner's XDELs find entries the trim has not reached yet. With it,
    # each trim (at every small capped commit) took them first: seen in every run so far.
    assert cleaner.deleted > 0 or "maxEntriesPerTrigger=1500" in extra
    for stream, end in ends.items():  # each trimmed to the entry at every consumer's position
        assert [entry_id for entry_id, _ in r.xrange(stream)] == [end]
        assert group_position(r, stream, "bus") == end
    if raw:  # nothing was dead-lettered: no table
        assert bus.poison and not table.exists()
        return

    # every row as appended: a letter recorded twice (a batch replayed after a kill appending
    # again) would show here
    letters = DeadLetterTable(str(table)).to_arrow(all_rows=True).to_pandas()
    assert letters["dead_letter_id"].is_unique
    assert set(letters["stage"]) == {"retry-exhausted", "source-decode"}  # no data-loss letter
    swept = letters[letters["stage"] == "retry-exhausted"]
    assert sorted(swept["entry_id"]) == sorted(i for _, i in bus.poison)
    assert len(swept) == len(poison)
    decoded = letters[letters["stage"] == "source-decode"]
    assert Counter(decoded["correlation_id"]) == Counter(malformed)
    reasons = dict(zip(decoded["correlation_id"], decoded["reason"], strict=True))
    assert {cid for cid, reason in reasons.items() if reason == "invalid-utf8"} == not_utf8
    assert set(reasons.values()) == {"invalid-integer", "invalid-utf8"}


def wait_for(
    condition: Callable[[], bool], what: str, process: subprocess.Popen[str], log: Path
) -> None:
    """Until ``condition`` holds (120 s at most), the query process staying up meanwhile."""
    deadline = time.monotonic() + 120
    while not condition():
        assert process.poll() is None, f"the query ended:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"waited 120 s for {what}"
        time.sleep(0.05)
