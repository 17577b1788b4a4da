"""``atlasbus demo``: a whole pipeline on your laptop in one command.

Starts a private redis-server (unless ``--url`` or ``$REDIS_URL`` names one), publishes ATLAS
traffic to three topics with about 1% malformed entries, and runs a streaming query
``format("atlasbus")`` -> a Delta table of good events, with malformed entries routed to the
dead-letter table. A progress line shows what is read, written, dead-lettered and the lag; the
summary at the end is counted from the tables themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOPICS = ("orders", "payments", "shipments")
STREAM_PREFIX = "atlas_bus"
GROUP = "atlasbus-demo"
MALFORMED_SHARE = 0.01


def register(subparsers: Any) -> None:
    """Add the ``demo`` command to the ``atlasbus`` command line."""
    demo = subparsers.add_parser(
        "demo",
        help="run a streaming pipeline on an embedded Redis and show its dead letters",
        description=(
            "Publish ATLAS traffic (about 1%% malformed) to three topics and stream it with "
            "format('atlasbus') into a Delta table of events, malformed entries going to the "
            "dead-letter table. Uses a private redis-server unless --url or $REDIS_URL is set."
        ),
    )
    demo.add_argument("--url", help="Redis URL to use instead of an embedded server")
    demo.add_argument(
        "--duration", type=_positive_float, default=30.0, help="seconds of traffic (default 30)"
    )
    demo.add_argument(
        "--rate", type=_positive_float, default=2000.0, help="entries per second (default 2000)"
    )
    demo.add_argument(
        "--output",
        default="atlasbus-demo",
        help="folder for the Delta tables and the checkpoint (default ./atlasbus-demo)",
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the embedded redis-server (and its streams) running after the demo",
    )
    demo.set_defaults(run=run)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


# --- traffic -------------------------------------------------------------------------------


def _envelope(topic: str, index: int, rng: random.Random) -> dict[str, str]:
    payloads = {
        "orders": {
            "order_id": index,
            "customer": f"c-{rng.randint(1, 500)}",
            "amount": round(rng.uniform(5, 500), 2),
        },
        "payments": {
            "payment_id": index,
            "method": rng.choice(["card", "sepa", "wallet"]),
            "amount": round(rng.uniform(5, 500), 2),
        },
        "shipments": {
            "shipment_id": index,
            "carrier": rng.choice(["dhl", "ups", "postnl"]),
            "parcels": rng.randint(1, 4),
        },
    }
    return {
        "topic": topic,
        "priority": str(rng.randint(0, 9)),
        "payload": json.dumps(payloads[topic]),
        "correlation_id": uuid.uuid4().hex,
        "tracing": json.dumps({"trace_id": uuid.uuid4().hex[:16], "service": f"{topic}-svc"}),
        "metadata": json.dumps({"source": "atlasbus-demo"}),
        "delivery_attempts": "0",
        "enqueued_time": f"{time.time():.6f}",
    }


def _malformed(entry: dict[str, str], rng: random.Random) -> dict[str, Any]:
    kind = rng.randrange(4)
    if kind == 0:
        return {**entry, "payload": entry["payload"][:-3]}  # truncated JSON
    if kind == 1:
        return {**entry, "priority": "urgent"}
    if kind == 2:
        return {k: v for k, v in entry.items() if k != "payload"}
    return {**entry, "tracing": "trace=broken"}


class Publisher(threading.Thread):
    """Publishes at ``rate`` entries/s across the topics until stopped or the duration ends."""

    def __init__(self, url: str, rate: float, duration: float) -> None:
        super().__init__(daemon=True)
        self.url, self.rate, self.duration = url, rate, duration
        self.published = 0
        self.malformed = 0
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        import redis

        try:
            client = redis.Redis.from_url(self.url)
            rng = random.Random(7)
            started = time.monotonic()
            while not self.stop_event.is_set():
                elapsed = time.monotonic() - started
                if elapsed >= self.duration:
                    break
                due = int(elapsed * self.rate) + 1
                pipe = client.pipeline(transaction=False)
                for index in range(self.published, due):
                    topic = TOPICS[index % len(TOPICS)]
                    entry: dict[str, Any] = _envelope(topic, index, rng)
                    if rng.random() < MALFORMED_SHARE:
                        entry = _malformed(entry, rng)
                        self.malformed += 1
                    pipe.xadd(f"{STREAM_PREFIX}:{topic}", entry)
                pipe.execute()
                self.published = max(self.published, due)
                time.sleep(0.05)
        except BaseException as exc:  # reported by the main thread
            self.error = exc


# --- the pipeline ----------------------------------------------------------------------------


@dataclass
class Paths:
    root: Path

    @property
    def events(self) -> Path:
        return self.root / "events"

    @property
    def dead_letters(self) -> Path:
        return self.root / "dead_letters"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"


class EventsWriter:
    """foreachBatch: append a micro-batch's good events to a Delta table with delta-rs.

    The Delta app transaction (query id, batch id) makes a replayed batch a no-op.
    """

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __call__(self, frame: Any, batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

        query_id = frame.sparkSession.conf.get("spark.sql.streaming.queryId", None) or "demo"
        app_id = f"atlasbus-demo-events/{query_id}"
        if DeltaTable.is_deltatable(self.path):
            done = DeltaTable(self.path).transaction_version(app_id)
            if done is not None and done >= batch_id:
                return
        table = frame.drop("error", "fields").toArrow()
        write_deltalake(
            self.path,
            table,
            mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]),
        )


def run(args: argparse.Namespace) -> int:
    from atlasbus.redis_server import RedisServer

    url = args.url or os.environ.get("REDIS_URL")
    server: RedisServer | None = None
    if url is None:
        server = RedisServer().start()
        url = server.url
        print(f"embedded redis-server ({server.binary}) on {url}")
    paths = Paths(Path(args.output).resolve())
    for stale in (paths.events, paths.dead_letters, paths.checkpoint):
        shutil.rmtree(stale, ignore_errors=True)
    paths.root.mkdir(parents=True, exist_ok=True)
    _reset_streams(url)

    print("starting Spark (local[2]) ...", flush=True)
    from pyspark_atlasbus.session import local_session

    spark = local_session("atlasbus-demo", config={"spark.sql.session.timeZone": "UTC"})
    publisher = Publisher(url, args.rate, args.duration)
    query = None
    interrupted = False
    try:
        frame = (
            spark.readStream.format("atlasbus")
            .option("url", url)
            .option("streamPrefix", STREAM_PREFIX)
            .option("topics", ",".join(TOPICS))
            .option("group", GROUP)
            .option("deadLetterTable", str(paths.dead_letters))
            .load()
        )
        query = (
            frame.writeStream.foreachBatch(EventsWriter(paths.events))
            .option("checkpointLocation", str(paths.checkpoint))
            .queryName("atlasbus_demo")
            .trigger(processingTime="1 second")
            .start()
        )
        publisher.start()
        _show_progress(query, publisher)
        if publisher.error is not None:
            raise publisher.error
        print("\ntraffic done; draining what is left ...", flush=True)
        query.processAllAvailable()
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: stopping cleanly ...", flush=True)
    finally:
        publisher.stop_event.set()
        publisher.join(timeout=10)
        if query is not None:
            query.stop()
        spark.stop()
    _print_summary(paths, publisher, interrupted)
    if server is not None:
        if args.keep:
            print(
                f"redis-server keeps running on {url} (--keep); "
                f"stop it with: redis-cli -u {url} shutdown"
            )
        else:
            server.stop()
    return 0


def _reset_streams(url: str) -> None:
    """Start from empty demo streams so the summary's arithmetic is exact."""
    import redis

    client = redis.Redis.from_url(url)
    client.delete(*(f"{STREAM_PREFIX}:{topic}" for topic in TOPICS))


def _show_progress(query: Any, publisher: Publisher) -> None:
    tty = sys.stdout.isatty()
    read = 0
    seen_batches: set[int] = set()
    last_print = 0.0
    while publisher.is_alive() or not publisher.published:
        if publisher.error is not None or not query.isActive:
            break
        for progress in query.recentProgress:
            if progress["batchId"] not in seen_batches:
                seen_batches.add(progress["batchId"])
                read += int(progress["numInputRows"])
        now = time.monotonic()
        if now - last_print >= (0.5 if tty else 5.0):
            line = (
                f"published {publisher.published:>8,}   read {read:>8,}   "
                f"lag {max(publisher.published - read, 0):>7,}   batches {len(seen_batches):>4}"
            )
            print(("\r" + line) if tty else line, end="" if tty else "\n", flush=True)
            last_print = now
        time.sleep(0.2)
    if not query.isActive and query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")


def _print_summary(paths: Paths, publisher: Publisher, interrupted: bool) -> None:
    from deltalake import DeltaTable

    from atlasbus.dead_letters import DeadLetterTable

    events = (
        DeltaTable(str(paths.events)).count() if DeltaTable.is_deltatable(str(paths.events)) else 0
    )
    letters = DeadLetterTable(str(paths.dead_letters))
    by_reason = letters.summary(by=("reason",)) if letters.exists() else None
    dead = int(by_reason["count"].sum()) if by_reason is not None and len(by_reason) else 0
    print("\n=== atlasbus demo summary ===")
    print(f"published entries:        {publisher.published}")
    print(f"  of which malformed:     {publisher.malformed}")
    print(f"events written:           {events}")
    print(f"dead letters:             {dead}")
    if by_reason is not None:
        for _, row in by_reason.iterrows():
            print(f"  {row['reason']:<24}{int(row['count'])}")
    accounted = events + dead
    verdict = (
        "every entry accounted for" if accounted == publisher.published else "NOT all accounted for"
    )
    if interrupted:
        verdict += " (interrupted)"
    print(f"events + dead letters:    {accounted}  ({verdict})")
    print(f"events table:             {paths.events}")
    print(f"dead-letter table:        {paths.dead_letters}")
    print(f"inspect dead letters:     atlasbus dlq summary --table {paths.dead_letters}")
    print("explore in a notebook:    jupyter lab notebooks/dead_letter_explorer.ipynb")
