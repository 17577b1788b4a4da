"""The demo's run: Redis, Spark, the streaming query, the traffic, the drain and the summary.

Order matters for a quick first micro-batch: Spark and the query start first (saying what
they are doing, one line per phase: traffic starts about 30 s after the command, 60 s
the first time; ``benchmarks/bench_demo_start.py``), the traffic only once the query has
run its first trigger, so the first batch comes a trigger or two after the traffic starts.

Runs on the driver only: the Spark session, the publisher thread and the progress display all
live in this process.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from atlasbus.sandbox.redis_server import RedisServer
from atlasbus.sandbox.traffic import TOPICS, TrafficGenerator
from pyspark_atlasbus.demo.cold_start import (
    DELTA_DOWNLOAD_MB,
    DownloadProgress,
    KernelCompilation,
    ivy_cache,
    jars_to_download,
)
from pyspark_atlasbus.demo.common import (
    DRAIN_TIMEOUT_S,
    EXIT_INTERRUPTED,
    GROUP,
    QUERY_NAME,
    STOP_DRAIN_TIMEOUT_S,
    STREAM_PREFIX,
    WARM_UP_STREAM,
    DemoError,
)
from pyspark_atlasbus.demo.progress import Progress
from pyspark_atlasbus.demo.publisher import TrafficPublisher
from pyspark_atlasbus.demo.server import connect, reset_streams, start_embedded_redis
from pyspark_atlasbus.demo.signals import StopRequest, exit_on_sigterm
from pyspark_atlasbus.demo.summary import Paths, Summary, committed_offsets
from pyspark_atlasbus.demo.writer import EventsWriter, delta_sink_tally

QUERY_START_TIMEOUT_S = 180.0


class Clock:
    """Prints a phase with the seconds since the demo started: ``[  4.2 s] starting ...``."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:5.1f} s] {text}", flush=True)


def run_demo(args: argparse.Namespace) -> int:
    """Everything but the error reporting of ``atlasbus demo``; returns the exit status."""
    signal.signal(signal.SIGTERM, exit_on_sigterm)  # so a killed demo still stops Redis
    clock = Clock()
    paths = prepare_output(Path(args.output))
    check_java()
    server: RedisServer | None = None
    url: str = args.url
    if not url:
        server = start_embedded_redis()
        url = server.url
        clock.say(f"embedded redis-server {server.binary} on {url} (in {server.folder})")
    try:
        return run_pipeline(args, url, paths, clock, embedded=server is not None)
    finally:
        if server is not None:
            if args.keep:
                print(
                    f"redis-server keeps running on {url} (--keep), pid {server.pid}; "
                    f"stop it with: kill {server.pid} && rm -rf {shlex.quote(str(server.folder))}",
                    flush=True,
                )
            else:
                server.stop()


def prepare_output(root: Path) -> Paths:
    paths = Paths(root.resolve())
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
        earlier = [p for p in (paths.events, paths.dead_letters, paths.checkpoint) if p.exists()]
        if earlier:  # said, not silent: a user may have meant to keep them
            print(
                f"replacing an earlier run's {', '.join(p.name for p in earlier)} in "
                f"{paths.root} (--output elsewhere keeps them)",
                flush=True,
            )
        for stale in earlier:
            shutil.rmtree(stale, ignore_errors=True)
        probe = paths.root / ".atlasbus-demo-write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise DemoError(
            f"cannot use --output {root}: {exc.strerror or exc}. Choose a folder you can write to"
        ) from None
    return paths


def check_java() -> None:
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise DemoError(
        "Spark needs Java 17 or newer and none was found: install a JDK (for example "
        "`apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
    )


def run_pipeline(
    args: argparse.Namespace, url: str, paths: Paths, clock: Clock, *, embedded: bool
) -> int:
    client = connect(url, embedded)
    reset_streams(client)
    kernels = KernelCompilation()
    try:
        spark = start_spark_saying_why(clock)
    except BaseException:
        kernels.stop()
        raise
    stop = StopRequest()
    previous_handler = signal.signal(signal.SIGINT, stop.handler)
    publisher = TrafficPublisher(client, args.rate, args.duration)
    writer = EventsWriter(paths.events, paths.dead_letters)
    progress = Progress(client, writer)
    query = None
    failure: str | None = None
    try:
        clock.say(
            "warming up Spark: its Python workers import atlasbus, Arrow and delta-rs, and "
            "read one entry of a warm-up stream ..."
        )
        kernels.wait(clock.say)
        warm_up_workers(spark, client, url)
        engine = events_engine(spark)
        if engine == "delta-spark":
            warm_up_delta(spark, paths.root)
        clock.say(
            "starting the streaming query: Spark plans it and starts the atlasbus source's "
            "Python planner ..."
        )
        if not stop.event.is_set():
            clock.say(events_line(engine))
            query = start_query(spark, url, paths, writer, engine)
            failure = wait_until_running(query, stop)
        if failure is None and not stop.event.is_set():
            publisher.start()
            clock.say(
                f"query running; publishing {args.rate:,.0f} entries/s for {args.duration:g} s "
                f"to {STREAM_PREFIX}:{{{','.join(TOPICS)}}}; Ctrl-C stops early"
            )
            failure = watch(
                query,
                publisher,
                progress,
                stop,
                until=lambda: not publisher.is_alive(),
                clock=clock,
            )
        if failure is None and not stop.event.is_set():
            progress.finish_line()
            clock.say("traffic done; reading what is left ...")
            failure = drain(query, publisher, progress, stop, clock, timeout=DRAIN_TIMEOUT_S)
        if query is not None and failure is None and stop.event.is_set():
            # After Ctrl-C: no more traffic, and what was published is read before the stop, so
            # the stop cuts no task short (a task cut short leaves its Python worker writing to a
            # socket Spark has closed, which pyspark's daemon reports with a traceback). The
            # first Ctrl-C is spent: only a second one (KeyboardInterrupt) cuts this short.
            publisher.stop()
            failure = drain(
                query, publisher, progress, StopRequest(), clock, timeout=STOP_DRAIN_TIMEOUT_S
            )
        progress.finish_line()
        if query is not None:
            stop_query(query)
    except KeyboardInterrupt:  # the second Ctrl-C
        progress.finish_line()
        print("stopping now ...", flush=True)
        if query is not None:
            query.stop()
    finally:
        kernels.stop()
        publisher.stop()
        if query is not None and query.isActive:
            query.stop()
        spark.stop()
        signal.signal(signal.SIGINT, previous_handler)
    if publisher.error is not None and failure is None:
        failure = f"publishing to Redis failed: {publisher.error}"
    if failure is None and not stop.event.is_set():
        compact_tables(paths, clock)
    committed = committed_offsets(query, paths) if query is not None else {}
    summary = Summary.collect(
        paths,
        client,
        publisher.published,
        publisher.malformed,
        committed,
        interrupted=stop.event.is_set(),
    )
    summary.print(url, keep=args.keep, embedded=embedded)
    if failure is not None:
        print(f"atlasbus demo: error: {failure}", file=sys.stderr)
        return 1
    if stop.event.is_set():
        return EXIT_INTERRUPTED
    return 0 if summary.accounted else 1


def start_spark_saying_why(clock: Clock) -> Any:
    """``start_spark``, announcing the Delta Lake jars' download (with progress) when the
    session will fetch them first."""
    if not jars_to_download():
        clock.say("starting Spark (local[2]): the JVM and a Spark session ...")
        return start_spark()
    clock.say(
        f"starting Spark (local[2]); first, the Delta Lake jars are fetched from Maven Central "
        f"(about {DELTA_DOWNLOAD_MB} MB, once: later runs use them from {ivy_cache().parent}) ..."
    )
    with DownloadProgress(clock.say):
        return start_spark()


def start_spark() -> Any:
    """A quiet local[2] session (``local_session``'s log configuration) whose Python workers
    run this interpreter."""
    from pyspark_atlasbus.session import local_session

    try:
        return local_session(
            "atlasbus-demo",
            config={
                "spark.sql.session.timeZone": "UTC",
                "spark.sql.streaming.stopTimeout": "20s",
            },
        )
    except Exception as exc:
        raise DemoError(
            f"Spark did not start ({type(exc).__name__}: {str(exc).strip()[:300]}). "
            "It needs Java 17 or newer: check `java -version` and JAVA_HOME"
        ) from None


def warm_up_workers(spark: Any, client: Any, url: str) -> None:
    """Start the executors' Python workers, import what reading a batch needs, and read one
    entry of a warm-up stream (deleted after) with ``spark.read.format("atlasbus")``.

    Spark reuses Python workers and what it set up for the source's first read, so the first
    micro-batch does not pay for them.
    """
    spark.range(0, 2, numPartitions=2).mapInArrow(_import_readers, "id long").collect()
    (message,) = TrafficGenerator(seed=1, malformed_share=0.0).take(1)
    client.xadd(WARM_UP_STREAM, message.fields)
    try:
        (
            spark.read.format("atlasbus")
            .option("url", url)
            .option("streamPrefix", STREAM_PREFIX)
            .option("topics", WARM_UP_STREAM.rsplit(":", 1)[1])
            .load()
            .toArrow()
        )
    finally:
        client.delete(WARM_UP_STREAM)


def warm_up_delta(spark: Any, root: Path) -> None:
    """Write and read a one-row Delta table (then deleted), so delta-spark's classes and log
    machinery are loaded before the traffic starts, not during the first micro-batch."""
    folder = root / ".warm-up-delta"
    try:
        spark.range(1).write.format("delta").mode("overwrite").save(str(folder))
        spark.read.format("delta").load(str(folder)).collect()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _import_readers(batches: Any) -> Any:
    """Runs on executors: the imports of the source's read and its dead letters."""
    import atlasbus.dead_letters
    import atlasbus.reading.range_reader  # noqa: F401

    yield from batches


def events_engine(spark: Any) -> str:
    """``delta-spark`` when the session has the Delta Lake jars, else ``delta-rs``."""
    from pyspark_atlasbus.dead_letters import delta_jars_available

    return "delta-spark" if delta_jars_available(spark) else "delta-rs"


def events_line(engine: str) -> str:
    """The one line saying which engine writes the events table."""
    if engine == "delta-spark":
        return (
            'events table: Spark\'s Delta sink (writeStream.format("delta"), exactly once with '
            "the checkpoint)"
        )
    return (
        "events table: delta-rs in foreachBatch, one app transaction per batch (Spark has no "
        "Delta Lake jars)"
    )


def start_query(
    spark: Any, url: str, paths: Paths, writer: EventsWriter, engine: str = "delta-rs"
) -> Any:
    """``format("atlasbus")`` with the dead-letter table -> the events table.

    ``engine="delta-spark"``: Spark's Delta sink, the tally from a query listener; else
    ``foreachBatch(writer)`` with delta-rs."""
    frame = (
        spark.readStream.format("atlasbus")
        .option("url", url)
        .option("streamPrefix", STREAM_PREFIX)
        .option("topics", ",".join(TOPICS))
        .option("group", GROUP)
        .option("deadLetterTable", str(paths.dead_letters))
        .load()
    )
    if engine == "delta-spark":
        spark.streams.addListener(delta_sink_tally(writer))
        return (
            frame.drop("error", "fields")
            .writeStream.format("delta")
            .option("checkpointLocation", str(paths.checkpoint))
            .queryName(QUERY_NAME)
            .trigger(processingTime="1 second")
            .start(str(paths.events))
        )
    return (
        frame.writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(paths.checkpoint))
        .queryName(QUERY_NAME)
        .trigger(processingTime="1 second")
        .start()
    )


def compact_tables(paths: Paths, clock: Clock) -> None:
    """OPTIMIZE and VACUUM both tables with delta-rs once the query has stopped: nothing reads
    an older version or writes then, so no retention is kept and files no version names
    (Spark's empty first batch writes one) go too. One line with the file counts."""
    from atlasbus.dead_letters.maintenance import compact, parquet_files_on_disk

    done = []
    for name, path in (("events", paths.events), ("dead_letters", paths.dead_letters)):
        if not path.exists():
            continue
        before = parquet_files_on_disk(path)
        compact(path, retention_hours=0, full=True)
        done.append(f"{name} {before} -> {parquet_files_on_disk(path)}")
    if done:
        clock.say(f"compacted the tables (parquet files: {'; '.join(done)})")


def wait_until_running(query: Any, stop: StopRequest) -> str | None:
    """Until the query has run its first trigger (its sources set up, waiting for data).

    ``start()`` returns before the query has planned anything; traffic published meanwhile
    would wait for that, and then come as one large first batch.
    """
    deadline = time.monotonic() + QUERY_START_TIMEOUT_S
    while not stop.event.is_set():
        if not query.isActive:
            error = query.exception()
            return f"the streaming query stopped: {error}" if error else "the query stopped"
        if str(query.status.get("message", "")).startswith("Waiting"):
            return None
        if time.monotonic() > deadline:
            return f"the streaming query did not start within {QUERY_START_TIMEOUT_S:g} s"
        stop.event.wait(0.1)
    return None


def watch(
    query: Any,
    publisher: TrafficPublisher,
    progress: Progress,
    stop: StopRequest,
    *,
    until: Callable[[], bool],
    clock: Clock,
) -> str | None:
    """Redraw the progress line until ``until()``, Ctrl-C or a failure (returned as text)."""
    while not until() and not stop.event.is_set():
        if publisher.error is not None:
            return f"publishing to Redis failed: {publisher.error}"
        if not query.isActive:
            error = query.exception()
            return f"the streaming query stopped: {error}" if error else "the query stopped"
        first = progress.writer.first_read_at
        if not progress.first_reported and first is not None and publisher.started_at:
            progress.finish_line()
            clock.say(
                f"first micro-batch committed {first - publisher.started_at:.1f} s after the "
                "traffic started"
            )
            progress.first_reported = True
        progress.show()
        stop.event.wait(progress.interval)
    progress.show(force=True)
    return None


def drain(
    query: Any,
    publisher: TrafficPublisher,
    progress: Progress,
    stop: StopRequest,
    clock: Clock,
    *,
    timeout: float,
) -> str | None:
    """``watch`` until the query has read and committed all that was published, or ``timeout``
    seconds; once it has, its triggers find nothing new and start no task."""
    deadline = time.monotonic() + timeout
    return watch(
        query,
        publisher,
        progress,
        stop,
        until=lambda: progress.caught_up(publisher.published) or time.monotonic() > deadline,
        clock=clock,
    )


def stop_query(query: Any) -> None:
    """Stop between micro-batches, so the last batch is committed whole."""
    deadline = time.monotonic() + 30
    while query.isActive and time.monotonic() < deadline:
        if not query.status["isTriggerActive"]:
            break
        time.sleep(0.05)
    query.stop()
