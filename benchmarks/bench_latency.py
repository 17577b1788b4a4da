"""Latency under steady load: from publish (the entry's ID) until the row is in the sink.

    python benchmarks/bench_latency.py [--rates 1000,10000,50000] [--seconds 60]

Starts a private redis-server. For each rate and each sink, a publisher process adds
envelopes (envelope_stream.py's, about 411 bytes) to a fresh stream at a steady rate for
--seconds, while a query ``readStream.format("atlasbus")`` with the default trigger (the next
micro-batch as soon as the last one ends) delivers them to:

* the atlasbus sink (``writeStream.format("atlasbus")``, exactly once, the default), the source
  row's ``id`` passed on as ``correlation_id``: an entry arrives when its copy is published, at
  the copy's own entry ID (the same Redis clock as the original's);
* a ``foreachBatch`` that collects the batch's ``id`` column (``toArrow``) and records the time
  when it has them: an entry arrives at that time.

Per entry, arrival minus publish time (the ms of its entry ID); reported: p50, p95, p99, max,
the rate the publisher kept, the rate delivered, how long the last entries took to drain, and
each micro-batch's phases from Spark's progress (latestOffset, planning, addBatch, WAL,
commit). In the same run, Spark's own per-batch floor: the same two sinks fed one row per
micro-batch by a source that asks nothing of Redis (the least a micro-batch costs here).

The query is warmed up (its workers started) on a few entries before the clock starts; those
are not counted. The machine's load average is recorded before and after. Writes
benchmarks/results/latency.json and latency.png.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from envelope_stream import envelope
from installed_bytecode import compile_atlasbus
from run_report import benchmark_parser, chart_note, pyplot, save_chart, write_report

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "latency.json"  # with --label X: latency-X.json
PREFIX = "lat"
OUT_PREFIX = "latout"
PHASES = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


# --- the publisher: its own process, a steady rate ---------------------------------------


def _xadd_command(stream: str, fields: dict[str, str]) -> bytes:
    """One XADD ``*`` of ``fields`` in Redis's wire protocol, packed once and sent many times."""
    parts = [b"XADD", stream.encode(), b"*"]
    for key, value in fields.items():
        parts += [key.encode(), value.encode()]
    packed = [b"*%d\r\n" % len(parts)]
    packed += [b"$%d\r\n%s\r\n" % (len(part), part) for part in parts]
    return b"".join(packed)


def publish_steady(url: str, stream: str, rate: int, seconds: float, queue: Any) -> None:
    """Add ``rate`` entries a second for ``seconds``, in ticks of 5 ms, each tick pipelined.

    The envelope is packed once (every entry the same bytes but its ID), so the publisher's
    own cost is a few microseconds an entry and the rate holds at 50,000/s on one core.
    """
    import redis

    command = _xadd_command(stream, envelope(0))
    connection = redis.Redis.from_url(url).connection_pool.get_connection()
    sent = 0
    behind = 0.0
    started = time.perf_counter()
    end = started + seconds
    while True:
        now = time.perf_counter()
        due = round(seconds * rate) - sent if now >= end else int((now - started) * rate) - sent
        behind = max(behind, due / rate)
        while due > 0:
            chunk = min(due, 2000)
            connection.send_packed_command([command * chunk], check_health=False)
            for _ in range(chunk):
                connection.read_response()
            sent += chunk
            due -= chunk
        if now >= end:
            break
        time.sleep(0.005)
    queue.put((sent, time.perf_counter() - started, behind))


# --- arrival: two sinks -------------------------------------------------------------------


def _ms_of(ids: Any) -> Any:
    """Entry IDs (strings ``ms-seq``) to their ms parts, as a numpy array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = pc.split_pattern(pa.array(ids, pa.string()), "-", max_splits=1)
    return pc.list_element(parts, 0).cast(pa.int64()).to_numpy()


class ForeachBatchArrivals:
    """``foreachBatch``: the batch's IDs collected, arrival time taken when they are here."""

    def __init__(self) -> None:
        self.chunks: list[tuple[Any, float]] = []
        self.rows = 0
        self.lock = threading.Lock()

    def __call__(self, frame: Any, batch_id: int) -> None:
        table = frame.select("id").toArrow()
        arrived = time.time()
        with self.lock:
            self.chunks.append((table.column("id"), arrived))
            self.rows += table.num_rows

    def delivered(self) -> int:
        return self.rows

    def latencies_ms(self, after_ms: int) -> tuple[Any, Any]:
        """Per entry published after ``after_ms``: (publish ms, latency ms)."""
        import numpy as np

        published, latency = [], []
        for column, arrived in self.chunks:
            ms = _ms_of(column.to_pylist())
            keep = ms > after_ms
            published.append(ms[keep])
            latency.append(arrived * 1000 - ms[keep])
        return np.concatenate(published), np.concatenate(latency)


def sink_latencies_ms(url: str, out_stream: str, after_ms: int) -> tuple[Any, Any]:
    """The atlasbus sink's copies: arrival at the copy's ID, publish at its correlation_id."""
    import numpy as np
    import redis

    connection = redis.Redis.from_url(url).connection_pool.get_connection()
    start = b"-"
    arrived: list[bytes] = []
    origin: list[bytes] = []
    while True:
        connection.send_command("XRANGE", out_stream, start, "+", "COUNT", 10_000)
        page = connection.read_response()
        for entry_id, fields in page:
            arrived.append(entry_id)
            values = dict(zip(fields[0::2], fields[1::2], strict=True))
            origin.append(values[b"correlation_id"])
        if len(page) < 10_000:
            break
        start = b"(" + page[-1][0]
    published = _ms_of([o.decode() for o in origin])
    latency = _ms_of([a.decode() for a in arrived]) - published
    keep = published > after_ms
    return published[keep], np.asarray(latency[keep], dtype=float)


# --- one run: a rate into a sink ---------------------------------------------------------


def run_once(
    spark: Any,
    url: str,
    rate: int,
    seconds: float,
    sink: str,
    source_options: dict[str, str] | None = None,
) -> dict[str, Any]:
    import numpy as np
    import redis

    client = redis.Redis.from_url(url)
    topic = f"r{rate}{sink}{uuid.uuid4().hex[:6]}"
    stream = f"{PREFIX}:{topic}"
    out_stream = f"{OUT_PREFIX}:{topic}"
    for _ in range(10):  # the warm-up entries: the stream exists, the workers start on them
        client.xadd(stream, envelope(0))
    warm_up_ms = int(client.xrevrange(stream, count=1)[0][0].split(b"-")[0])
    frame = (
        spark.readStream.format("atlasbus")
        .option("url", url)
        .option("streamPrefix", PREFIX)
        .option("topics", topic)
        .option("startingOffsets", "earliest")
        .options(**(source_options or {}))
        .load()
    )
    checkpoint = Path(tempfile.mkdtemp(prefix="atlasbus-bench-latency-"))
    arrivals = ForeachBatchArrivals()
    if sink == "atlasbus":
        writer = (
            frame.selectExpr("payload", "priority", "id AS correlation_id")
            .writeStream.format("atlasbus")
            .option("url", url)
            .option("streamPrefix", OUT_PREFIX)
            .option("topic", topic)
        )

        def delivered() -> int:
            return int(client.xlen(out_stream)) if client.exists(out_stream) else 0
    else:
        writer = frame.writeStream.foreachBatch(arrivals)
        delivered = arrivals.delivered
    query = writer.option("checkpointLocation", str(checkpoint)).start()
    _wait_for(lambda: delivered() >= 10, 120, "the warm-up entries", query)
    time.sleep(1.0)  # a whole idle second: the warm-up's batches are over
    progress_before = len(query.recentProgress)
    queue: Any = multiprocessing.get_context("spawn").Queue()
    publisher = multiprocessing.get_context("spawn").Process(
        target=publish_steady, args=(url, stream, rate, seconds, queue)
    )
    publisher.start()
    sent, publish_s, behind_s = queue.get(timeout=seconds + 120)
    publisher.join()
    published_end = time.time()
    _wait_for(lambda: delivered() >= 10 + sent, 300, f"{sent:,} entries", query)
    drained = time.time() - published_end
    progress = [p for p in query.recentProgress[progress_before:] if p["numInputRows"]]
    query.stop()
    if sink == "atlasbus":
        published, latency = sink_latencies_ms(url, out_stream, warm_up_ms)
    else:
        published, latency = arrivals.latencies_ms(warm_up_ms)
    client.delete(stream, out_stream)
    if len(latency) != sent:
        raise SystemExit(f"{sink} at {rate}/s: {len(latency):,} entries arrived, {sent:,} sent")
    span_s = (published.max() - published.min()) / 1000 + np.max(latency) / 1000
    return {
        "rate": rate,
        "sink": sink,
        "source_options": source_options or {},
        "entries": int(sent),
        "publish_rate": round(sent / publish_s),
        "publisher_behind_max_s": round(behind_s, 3),
        "delivered_rate": round(sent / span_s),
        "drain_after_publish_s": round(drained, 2),
        "latency_ms": _percentiles(latency),
        "batches": _batches(progress),
    }


def _percentiles(latency: Any) -> dict[str, float]:
    import numpy as np

    p50, p95, p99 = np.percentile(latency, [50, 95, 99])
    return {
        "p50": round(float(p50), 1),
        "p95": round(float(p95), 1),
        "p99": round(float(p99), 1),
        "max": round(float(np.max(latency)), 1),
        "min": round(float(np.min(latency)), 1),
    }


def _batches(progress: list[dict[str, Any]]) -> dict[str, Any]:
    """Median micro-batch: rows, and milliseconds per phase (Spark's durationMs)."""
    if not progress:
        return {"count": 0}
    phases = {
        phase: statistics.median(p["durationMs"].get(phase, 0) for p in progress)
        for phase in (*PHASES, "triggerExecution")
    }
    return {
        "count": len(progress),
        "median_rows": statistics.median(p["numInputRows"] for p in progress),
        "median_ms": phases,
        "p90_trigger_ms": sorted(p["durationMs"]["triggerExecution"] for p in progress)[
            int(0.9 * (len(progress) - 1))
        ],
    }


def _wait_for(condition: Any, timeout: float, what: str, query: Any = None) -> None:
    deadline = time.time() + timeout
    while not condition():
        if query is not None and not query.isActive:
            raise SystemExit(f"the query stopped while waiting for {what}: {query.exception()}")
        if time.time() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.05)


# --- Spark's floor: one row per micro-batch, nothing asked of Redis ---------------------


def spark_floor(spark: Any, url: str, seconds: float, sink: str) -> dict[str, Any]:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class OneRow(DataSourceStreamReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.next = 0

        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def latestOffset(self) -> dict[str, int]:
            self.next += 1
            return {"n": self.next}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            return [InputPartition(end["n"])]

        def read(self, partition: Any) -> Any:
            yield ('{"n": 1}', 1, f"{int(time.time() * 1000)}-0", "0-0")

        def commit(self, end: dict[str, int]) -> None:
            pass

    class OneRowSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "atlasbus_bench_one_row"

        def schema(self) -> str:
            return "payload string, priority int, id string, correlation_id string"

        def streamReader(self, schema: Any) -> OneRow:
            return OneRow()

    spark.dataSource.register(OneRowSource)
    frame = spark.readStream.format("atlasbus_bench_one_row").load()
    checkpoint = Path(tempfile.mkdtemp(prefix="atlasbus-bench-floor-"))
    if sink == "atlasbus":
        writer = (
            frame.select("payload", "priority", "correlation_id")
            .writeStream.format("atlasbus")
            .option("url", url)
            .option("streamPrefix", OUT_PREFIX)
            .option("topic", "floor")
        )
    else:
        writer = frame.writeStream.foreachBatch(ForeachBatchArrivals())
    query = writer.option("checkpointLocation", str(checkpoint)).start()
    _wait_for(lambda: len(query.recentProgress) >= 3, 120, "the floor's first batches", query)
    skip = len(query.recentProgress)
    time.sleep(seconds)  # a benchmark: the floor is what a micro-batch costs over this time
    progress = query.recentProgress[skip:]
    query.stop()
    return {"sink": sink, "batches": _batches(progress)}


# --- report -------------------------------------------------------------------------------


def chart(runs: list[dict[str, Any]], floors: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = [f"{r['rate'] // 1000}k/s\n{r['sink']}" for r in runs]
    positions = list(range(len(runs)))
    for offset, key in ((-0.3, "p50"), (-0.1, "p95"), (0.1, "p99"), (0.3, "max")):
        values = [r["latency_ms"][key] / 1000 for r in runs]
        left.bar([p + offset for p in positions], values, 0.2, label=key)
    left.set_yscale("log")
    left.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    left.axhline(2.0, color="grey", linewidth=0.8, linestyle=":")
    left.set_xticks(positions, labels, fontsize=8)
    left.set_ylabel("seconds from publish to the sink (log scale)")
    left.set_title("latency per entry (goal at 10k/s: p50 ≤ 1 s, p99 ≤ 2 s)", fontsize=9)
    left.legend(fontsize=8)

    rows = [(f"floor\n{f['sink']}", f["batches"]) for f in floors]
    rows += [(f"{r['rate'] // 1000}k/s\n{r['sink']}", r["batches"]) for r in runs]
    bottoms = [0.0] * len(rows)
    for phase in PHASES:
        values = [b["median_ms"][phase] if b.get("count") else 0 for _, b in rows]
        right.bar(range(len(rows)), values, 0.6, bottom=bottoms, label=phase)
        bottoms = [a + b for a, b in zip(bottoms, values, strict=True)]
    totals = [b["median_ms"]["triggerExecution"] if b.get("count") else 0 for _, b in rows]
    right.scatter(range(len(rows)), totals, color="black", marker="_", s=200, label="whole batch")
    right.set_xticks(range(len(rows)), [label for label, _ in rows], fontsize=6, rotation=35)
    right.set_ylabel("ms, median micro-batch")
    right.set_title("where a micro-batch's time goes (floor: one row, no Redis)", fontsize=9)
    right.legend(fontsize=7)
    save_chart(figure, path)


def main() -> None:
    compile_atlasbus()
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rates", default="1000,10000,50000")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--sinks", default="atlasbus,foreachBatch")
    parser.add_argument("--floor-seconds", type=float, default=15)
    parser.add_argument("--label", help="results in latency-LABEL.json/.png")
    parser.add_argument("--redraw", action="store_true", help="only draw the chart from the JSON")
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra source option (e.g. maxEntriesPerPartition=10000); may be repeated",
    )
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    sinks = args.sinks.split(",")
    source_options = dict(option.split("=", 1) for option in args.source_option)
    if args.redraw:
        results = RESULTS.with_name(f"latency-{args.label}.json") if args.label else RESULTS
        saved = json.loads(results.read_text())
        chart(saved["runs"], saved["spark_floor"], results.with_suffix(".png"))
        return

    from atlasbus.sandbox.redis_server import RedisServer
    from pyspark_atlasbus.session import local_session

    server = RedisServer().start()
    load_before = os.getloadavg()
    try:
        spark = local_session(
            "atlasbus-bench-latency",
            driver_memory="4g",
            config={"spark.sql.streaming.numRecentProgressUpdates": "100000"},
            delta=False,
        )
        floors = [spark_floor(spark, server.url, args.floor_seconds, sink) for sink in sinks]
        for floor in floors:
            print(f"floor, {floor['sink']}: {json.dumps(floor['batches'])}", flush=True)
        runs = []
        for rate in rates:
            for sink in sinks:
                run = run_once(spark, server.url, rate, args.seconds, sink, source_options)
                runs.append(run)
                print(f"{rate:,}/s into {sink}: {json.dumps(run)}", flush=True)
        spark.stop()
    finally:
        server.stop()
    load_after = os.getloadavg()

    header = ["rate", "sink", "kept", "delivered", "p50", "p95", "p99", "max", "batch ms"]
    print("\n" + "".join(f"{h:>12}" for h in header))
    for run in runs:
        latency = run["latency_ms"]
        figures = [
            f"{run['rate']:,}",
            run["sink"],
            f"{run['publish_rate']:,}",
            f"{run['delivered_rate']:,}",
            *(f"{latency[k] / 1000:.2f} s" for k in ("p50", "p95", "p99", "max")),
            f"{run['batches']['median_ms']['triggerExecution']:.0f}",
        ]
        print("".join(f"{f:>12}" for f in figures))
    for floor in floors:
        batch = floor["batches"]
        print(
            f"Spark's floor into {floor['sink']}: {batch['median_ms']['triggerExecution']:.0f} ms"
            f" a micro-batch of one row (median of {batch['count']})"
        )
    report = {
        "benchmark": "latency",
        "seconds_per_rate": args.seconds,
        "runs": runs,
        "spark_floor": floors,
    }
    results = RESULTS.with_name(f"latency-{args.label}.json") if args.label else RESULTS
    write_report(results, report, load_before, load_after)
    chart(runs, floors, results.with_suffix(".png"))
    print(f"results in {results}{chart_note(results.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
