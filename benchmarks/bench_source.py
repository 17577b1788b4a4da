"""Source benchmark: 1,000,000 envelopes read end to end, beside raw baselines in the same run.

    python benchmarks/bench_source.py [--rows 1000000] [--repeat 3] [--url redis://...] [--label L]

Publishes envelopes of the wire format (8 fields, about 424 bytes) to one stream of a private
redis-server (or --url), then measures, each as the best of --repeat runs:

* spark: readStream.format("atlasbus") -> noop sink, trigger(availableNow=True), local[2]
* core: atlasbus's own range reader without Spark, 2 processes (what Spark adds on top); and
  again with ``format=raw`` (each entry's fields as one map of strings)
* raw baseline: 2 processes paging the same stream with XRANGE and building Arrow batches
  with the vectorised conversion (one flat binary array, cast, take), as measured-facts.md
* one-at-a-time baseline: XREAD COUNT 1, like the bus's own consumer (on a sample)
* Spark alone: the same query shape and schema fed from pre-built Arrow batches of decoded
  envelopes, no Redis at all: the most any Python source can reach here, end to end
* receiving only: Spark alone, its tasks also paging through the stream with XRANGE and
  taking every reply off the socket, decoding nothing: about the most a source that receives
  the replies a page at a time, one connection a task, can reach here
* raw baseline as a Spark source: the same query shape reading Redis as the raw baseline does
  (every field a string column, nothing decoded or checked): the least a Python source that
  reads Redis pays inside Spark

The three Spark queries run once first, uncounted: the JVM compiles each schema's row
conversion during its first large query.

For the atlasbus query it also reports how long the query takes to start (start() to its first
micro-batch: Spark launching the source's Python runner) and the rate inside the micro-batch.

Around every measurement it reads the CPU time of each process from /proc (Linux): the Python
readers, the query's driver-side runner, Spark's JVM and redis-server. From the baseline's CPU
and Spark's own (runner and JVM, under the pre-built source) it prints the most any Python
source reading Redis as the baseline does could reach on this machine's cores.

Prints a table and writes benchmarks/results/source.json.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from cpu_meter import CpuSeconds, RedisCpu, SparkCpu
from envelope_stream import STREAM, STREAM_PREFIX, TOPIC, envelope, publish, time_slices
from installed_bytecode import compile_atlasbus
from run_report import benchmark_parser, pyplot, results_for, save_chart, write_report

RESULTS = Path(__file__).parent / "results" / "source.json"
_PREBUILT_ROWS = 10_000  # the rows of Spark alone's pre-built batch


def raw_pages(url: str, bounds: tuple[str, str], names: list[str] | None = None) -> Any:
    """Page through one range with XRANGE, each page as an Arrow batch of its ID and values.

    The vectorised conversion of measured-facts.md: one flat binary array, ``take`` per field,
    cast to string. No decoding, no validation: the least a Python reader of Redis can do.
    """
    import numpy as np
    import pyarrow as pa
    import redis

    connection = redis.Redis.from_url(url).connection_pool.get_connection()
    start, end = bounds
    try:
        while True:
            connection.send_command("XRANGE", STREAM, start, end, "COUNT", 1000)
            page = connection.read_response()
            if not page:
                return
            width = len(page[0][1])
            flat = pa.array(list(chain.from_iterable(e[1] for e in page)), pa.binary())
            base = np.arange(len(page)) * width
            columns = [flat.take(pa.array(base + j)).cast(pa.string()) for j in range(1, width, 2)]
            ids = pa.array([e[0] for e in page], pa.binary()).cast(pa.string())
            yield pa.RecordBatch.from_arrays(
                [ids, *columns], names=names or [str(i) for i in range(len(columns) + 1)]
            )
            if len(page) < 1000:
                return
            start = b"(" + page[-1][0]
    finally:
        connection.disconnect()  # closed as the pages end, not left to the collector


def raw_xrange_to_arrow(url: str, bounds: tuple[str, str]) -> tuple[int, float]:
    """Read one half with XRANGE into Arrow batches; returns (rows, CPU seconds spent)."""
    cpu_before = time.process_time()
    rows = sum(batch.num_rows for batch in raw_pages(url, bounds))
    return rows, time.process_time() - cpu_before


def core_reader(
    url: str, bounds: tuple[str, str], data_format: str = "envelope"
) -> tuple[int, float]:
    """Read one half with atlasbus's reader; returns (rows, CPU seconds spent)."""
    from atlasbus.model.entry_id import EntryId
    from atlasbus.options.source import parse_source_options
    from atlasbus.planning.batch_plan import ReadRange
    from atlasbus.reading.range_reader import read_range

    options = parse_source_options(
        {"url": url, "streamPrefix": STREAM_PREFIX, "topics": TOPIC, "format": data_format}
    )
    low = EntryId(0, 0) if bounds[0] == "-" else EntryId.parse(bounds[0].lstrip("("))
    high = EntryId(2**63, 0) if bounds[1] == "+" else EntryId.parse(bounds[1])
    cpu_before = time.process_time()
    rows = sum(b.num_rows for b in read_range(options, ReadRange(STREAM, TOPIC, low, high)))
    return rows, time.process_time() - cpu_before


def core_reader_raw(url: str, bounds: tuple[str, str]) -> tuple[int, float]:
    """``core_reader`` with ``format=raw``: every entry's fields as one map of strings."""
    return core_reader(url, bounds, "raw")


@dataclass(frozen=True)
class Measured:
    rows_per_s: float
    cpu: CpuSeconds


def two_processes(function: Any, url: str, redis_cpu: RedisCpu) -> Measured:
    parts = time_slices(url, 2)
    with ProcessPoolExecutor(2) as pool:
        pool.submit(int, 0).result()  # workers up before the clock starts
        redis_before = redis_cpu.read()
        started = time.perf_counter()
        results = list(pool.map(function, [url] * 2, parts))
        elapsed = time.perf_counter() - started
        redis_spent = redis_cpu.since(redis_before)
    rows = sum(r for r, _ in results)
    cpu = CpuSeconds(readers=sum(c for _, c in results), runner=0.0, jvm=0.0, redis=redis_spent)
    return Measured(rows / elapsed, cpu)


def one_at_a_time(url: str, sample: int) -> float:
    import redis

    client = redis.Redis.from_url(url)
    position = "0-0"
    started = time.perf_counter()
    for _ in range(sample):
        reply = client.xread({STREAM: position}, count=1)
        position = reply[0][1][0][0]
    return sample / (time.perf_counter() - started)


@dataclass(frozen=True)
class QueryRun:
    rows_per_s: float
    start_s: float  # start() until the first micro-batch begins
    in_batch_rows_per_s: float  # rows over the micro-batches' addBatch time
    cpu: CpuSeconds

    def figures(self, rows: int) -> dict[str, Any]:
        """As the benchmarks record a run: seconds end to end and in addBatch, start, CPU."""
        return {
            "rows": rows,  # run_to_noop checked the count
            "seconds": rows / self.rows_per_s,
            "add_batch_s": rows / self.in_batch_rows_per_s,
            "start_s": self.start_s,
            "cpu": self.cpu.as_dict(),
        }


def run_to_noop(frame: Any, rows: int, checkpoint_root: Path, meter: SparkCpu) -> QueryRun:
    """Run ``frame`` to the noop sink with availableNow; end to end, from start() to the end."""
    checkpoint = checkpoint_root / uuid.uuid4().hex
    cpu_before = meter.read()
    wall_start = time.time()
    started = time.perf_counter()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    cpu = meter.since(cpu_before)
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    read = sum(p["numInputRows"] for p in progress)
    if read != rows:
        raise SystemExit(f"the query read {read} rows, expected {rows}")
    first = datetime.fromisoformat(progress[0]["timestamp"].replace("Z", "+00:00")).timestamp()
    in_batch = sum(p["durationMs"].get("addBatch", 0) for p in progress) / 1000
    return QueryRun(rows / elapsed, first - wall_start, rows / in_batch, cpu)


def spark_end_to_end(
    spark: Any,
    url: str,
    rows: int,
    checkpoint_root: Path,
    meter: SparkCpu,
    options: dict[str, str] | None = None,
) -> QueryRun:
    """atlasbus's query on the benchmark's stream (with ``options`` on top) into noop."""
    frame = (
        spark.readStream.format("atlasbus")
        .option("url", url)
        .option("streamPrefix", STREAM_PREFIX)
        .option("topics", TOPIC)
        .options(**(options or {}))
        .load()
    )
    return run_to_noop(frame, rows, checkpoint_root, meter)


def one_task_per_core(rows: int, cores: int = 2) -> dict[str, str]:
    """atlasbus's options that cut ``rows`` entries into one task per core of ``local[cores]``:
    its documented parallelism option tuned as spark-redis's ``stream.parallelism`` is."""
    return {"maxEntriesPerPartition": str(math.ceil(rows / cores))}


def prebuilt_batch(url: str, path: Path, size: int = _PREBUILT_ROWS) -> None:
    """Decode ``size`` real entries once and keep them as an Arrow IPC file for the ceiling."""
    import pyarrow as pa
    import redis

    from atlasbus.decoding.decoder import decode_envelopes

    connection = redis.Redis.from_url(url).connection_pool.get_connection()
    connection.send_command("XRANGE", STREAM, "-", "+", "COUNT", size)
    batch = decode_envelopes(
        connection.read_response(), topic=TOPIC, stream=STREAM, include_raw_fields=False
    )
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


def one_batch_source(spark: Any, name: str, schema: str, partitions: list[Any], read: Any) -> Any:
    """A streaming DataFrame whose only micro-batch is ``partitions``, each read by ``read``.

    The classes are local, so cloudpickle ships them (and ``read``) to the workers by value,
    and so it does this module's functions that ``read`` calls: imported by another benchmark,
    they would go by reference, and the workers cannot import this module. ``read`` may call
    no function of the other benchmark modules (``envelope_stream``'s): those go by reference.
    """
    from pyspark import cloudpickle
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader

    if __name__ != "__main__":
        cloudpickle.register_pickle_by_value(sys.modules[__name__])

    class Reader(DataSourceStreamReader):  # type: ignore[misc]
        def initialOffset(self) -> dict[str, int]:
            return {"batch": 0}

        def latestOffset(self) -> dict[str, int]:
            return {"batch": 1}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            return partitions if start != end else []

        def read(self, partition: Any) -> Any:
            return read(partition)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class Source(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> str:
            return schema

        def streamReader(self, schema: Any) -> Reader:
            return Reader()

    spark.dataSource.register(Source)
    return spark.readStream.format(name).load()


def spark_ceiling(
    spark: Any, batch_file: Path, rows: int, checkpoint_root: Path, meter: SparkCpu
) -> QueryRun:
    """The same query with a source that only yields pre-built batches: Spark's own cost."""
    from pyspark.sql.datasource import InputPartition

    from atlasbus.options.source import DEFAULT_MAX_ENTRIES_PER_PARTITION

    # As many tasks, of the same sizes, as atlasbus plans with its default partition size.
    tasks = math.ceil(rows / DEFAULT_MAX_ENTRIES_PER_PARTITION)
    sizes = [rows // tasks + (1 if i < rows % tasks else 0) for i in range(tasks)]
    path = str(batch_file)

    def read(partition: InputPartition) -> Any:
        yield from prebuilt_rows(path, partition.value)

    partitions = [InputPartition(size) for size in sizes]
    return envelope_query(
        spark, "atlasbus_bench_prebuilt", partitions, read, rows, checkpoint_root, meter
    )


def prebuilt_rows(path: str, count: int) -> Any:
    """``count`` rows of the pre-built batch in ``path``: the whole batch over and over, then
    a slice of it; in the benchmark's Python workers."""
    import pyarrow as pa

    batch = pa.ipc.open_file(pa.memory_map(path)).get_batch(0)
    full, rest = divmod(count, batch.num_rows)
    for _ in range(full):
        yield batch
    if rest:
        yield batch.slice(0, rest)


def envelope_query(
    spark: Any,
    name: str,
    partitions: list[Any],
    read: Any,
    rows: int,
    checkpoint_root: Path,
    meter: SparkCpu,
) -> QueryRun:
    """A query of the envelope schema whose one micro-batch is ``read`` from ``partitions``,
    run into the noop sink."""
    from atlasbus.model.read_schema import ENVELOPE_SCHEMA, spark_ddl

    frame = one_batch_source(spark, name, spark_ddl(ENVELOPE_SCHEMA), partitions, read)
    return run_to_noop(frame, rows, checkpoint_root, meter)


def spark_receive_floor(
    spark: Any, url: str, batch_file: Path, rows: int, checkpoint_root: Path, meter: SparkCpu
) -> QueryRun:
    """Spark alone plus taking Redis's replies off the socket: about the most a source that
    receives them a page at a time, one connection a task, can reach.

    The tasks of the raw baseline as a source (cut by time) page through the stream with
    XRANGE as atlasbus does and receive every reply's bytes, walked by atlasbus's reply walk
    only to find where each ends and its last ID; they decode nothing and give Spark as many
    rows of the pre-built batch. redis-server serves the same replies, the JVM converts Spark
    alone's rows: the rest of the readers' CPU is what receiving costs.
    """
    from pyspark.sql.datasource import InputPartition

    from atlasbus.options.source import DEFAULT_MAX_ENTRIES_PER_PARTITION, DEFAULT_PAGE_SIZE

    slices = time_slices(url, math.ceil(rows / DEFAULT_MAX_ENTRIES_PER_PARTITION))
    path = str(batch_file)

    def read(partition: InputPartition) -> Any:
        import redis

        from atlasbus.reading.reply_receiver import XrangePages

        connection = redis.Redis.from_url(url).connection_pool.get_connection()
        pages = XrangePages(connection)
        start, end = partition.value
        received: list[Any] = []
        unsent = 0  # rows received and not yet given to Spark
        more = True
        try:
            while more:
                pages.send("XRANGE", STREAM, start, end, "COUNT", DEFAULT_PAGE_SIZE)
                page = pages.read()
                more = len(page) == DEFAULT_PAGE_SIZE
                if len(page):
                    start = b"(" + pages.last_id(page)
                    received.append(page)
                    unsent += len(page)
                if received and (unsent >= _PREBUILT_ROWS or not more):
                    kept = pages.hand_over(received)
                    kept.release(kept.buffer)
                    received = []
                    yield from prebuilt_rows(path, unsent - unsent % _PREBUILT_ROWS)
                    unsent %= _PREBUILT_ROWS
        finally:
            connection.disconnect()  # closed as the task ends, not left to the collector
        yield from prebuilt_rows(path, unsent)

    partitions = [InputPartition(bounds) for bounds in slices]
    name = "atlasbus_bench_receive_floor"
    return envelope_query(spark, name, partitions, read, rows, checkpoint_root, meter)


def spark_bare_source(
    spark: Any, url: str, rows: int, checkpoint_root: Path, meter: SparkCpu
) -> QueryRun:
    """The raw baseline as a Spark source: the least any Python source reading Redis pays.

    The same query shape (as many tasks as atlasbus plans, cut by time; batches of 10,000
    rows), reading with ``raw_pages``: every field a string column, nothing decoded or checked.
    Its rows are cheaper for the JVM than the envelope schema's (no maps, no timestamps).
    """
    from pyspark.sql.datasource import InputPartition

    from atlasbus.options.source import DEFAULT_MAX_ENTRIES_PER_PARTITION

    names = ["id", *envelope(0)]
    slices = time_slices(url, math.ceil(rows / DEFAULT_MAX_ENTRIES_PER_PARTITION))

    def read(partition: InputPartition) -> Any:
        import pyarrow as pa

        pages: list[Any] = []
        for page in raw_pages(url, partition.value, names):
            pages.append(page)
            if sum(p.num_rows for p in pages) >= 10_000:
                yield pa.Table.from_batches(pages).combine_chunks().to_batches()[0]
                pages = []
        if pages:
            yield pa.Table.from_batches(pages).combine_chunks().to_batches()[0]

    schema = ", ".join(f"{name} string" for name in names)
    partitions = [InputPartition(bounds) for bounds in slices]
    frame = one_batch_source(spark, "atlasbus_bench_bare", schema, partitions, read)
    return run_to_noop(frame, rows, checkpoint_root, meter)


def main() -> None:
    compile_atlasbus()
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--url", help="an existing Redis (default: a private redis-server)")
    parser.add_argument(
        "--sample", type=int, default=20_000, help="entries for the XREAD COUNT 1 baseline"
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --url: keep the stream if it already holds exactly --rows entries",
    )
    parser.add_argument("--label", help="writes source-LABEL.json (source-5M-LABEL.json, ...)")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable

    from atlasbus.sandbox.redis_server import RedisServer

    server = None if args.url else RedisServer().start()
    url = args.url or server.url  # type: ignore[union-attr]
    try:
        import redis

        client = redis.Redis.from_url(url)  # the benchmark's own questions, between the runs
        if args.reuse and args.url and client.xlen(STREAM) == args.rows:
            print(f"reusing the {args.rows:,} envelopes in {STREAM}", flush=True)
            publish_rate = float("nan")
        else:
            print(f"publishing {args.rows:,} envelopes to {STREAM} ...", flush=True)
            publish_rate = publish(url, args.rows)

        entry_bytes = client.memory_usage(STREAM) or 0
        redis_version = client.info("server")["redis_version"]
        sample_fields = envelope(0)
        wire_bytes = sum(len(k) + len(v.encode()) for k, v in sample_fields.items())

        from pyspark_atlasbus.session import local_session

        spark = local_session("atlasbus-bench-source", driver_memory="4g")
        checkpoints = Path(tempfile.mkdtemp(prefix="atlasbus-bench-"))
        # Warm-up: Python workers start on the first query. It reads a bounded range to its
        # end: a limit() would cut the workers off mid-write and make pyspark print tracebacks.
        tenth = client.xrange(STREAM, count=10)[-1][0].decode()
        client.close()
        warm_up = spark.read.format("atlasbus").option("url", url).option("topics", TOPIC)
        warm_up = warm_up.option("streamPrefix", STREAM_PREFIX)
        warm_up.option("endingOffsets", json.dumps({TOPIC: tenth})).load().count()

        batch_file = checkpoints / "prebuilt.arrow"
        prebuilt_batch(url, batch_file)

        load_before = os.getloadavg()
        redis_cpu = RedisCpu(url)
        meter = SparkCpu.of(spark, redis_cpu)
        results: dict[str, list[float]] = {
            "spark": [],
            "core": [],
            "core_raw": [],
            "raw": [],
            "ceiling": [],
            "bare": [],
            "floor": [],
        }
        cpu: dict[str, list[CpuSeconds]] = {name: [] for name in results}
        starts: list[float] = []
        in_batch: list[float] = []
        ceiling_in_batch: list[float] = []
        ceiling_starts: list[float] = []
        bare_in_batch: list[float] = []
        floor_in_batch: list[float] = []
        # One uncounted round of the three queries: the JVM compiles the conversion of each
        # schema's rows during its first large query, which would otherwise fall on whichever
        # query runs first (4-5 CPU-s at 5M entries).
        warm = [
            spark_end_to_end(spark, url, args.rows, checkpoints, meter),
            spark_ceiling(spark, batch_file, args.rows, checkpoints, meter),
            spark_bare_source(spark, url, args.rows, checkpoints, meter),
        ]
        rates = ", ".join(f"{run.rows_per_s:,.0f}/s" for run in warm)
        print(f"  warm-up (not counted): atlasbus, Spark alone, raw as a source: {rates}")
        for attempt in range(args.repeat):
            two = (
                ("raw", raw_xrange_to_arrow),
                ("core", core_reader),
                ("core_raw", core_reader_raw),
            )
            for name, reader in two:
                measured = two_processes(reader, url, redis_cpu)
                results[name].append(measured.rows_per_s)
                cpu[name].append(measured.cpu)
            run = spark_end_to_end(spark, url, args.rows, checkpoints, meter)
            results["spark"].append(run.rows_per_s)
            cpu["spark"].append(run.cpu)
            starts.append(run.start_s)
            in_batch.append(run.in_batch_rows_per_s)
            ceiling = spark_ceiling(spark, batch_file, args.rows, checkpoints, meter)
            results["ceiling"].append(ceiling.rows_per_s)
            ceiling_in_batch.append(ceiling.in_batch_rows_per_s)
            ceiling_starts.append(ceiling.start_s)
            cpu["ceiling"].append(ceiling.cpu)
            bare = spark_bare_source(spark, url, args.rows, checkpoints, meter)
            results["bare"].append(bare.rows_per_s)
            bare_in_batch.append(bare.in_batch_rows_per_s)
            cpu["bare"].append(bare.cpu)
            floor = spark_receive_floor(spark, url, batch_file, args.rows, checkpoints, meter)
            results["floor"].append(floor.rows_per_s)
            floor_in_batch.append(floor.in_batch_rows_per_s)
            cpu["floor"].append(floor.cpu)
            done = ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in results.items())
            print(f"  run {attempt + 1}: {done}; query start {run.start_s:.2f} s", flush=True)
        single = one_at_a_time(url, min(args.sample, args.rows))
        spark.stop()
    finally:
        if server is not None:
            server.stop()

    best = {name: max(values) for name, values in results.items()}
    best_cpu = {name: cpu[name][values.index(best[name])] for name, values in results.items()}
    bounds = [
        reachable_vs_raw(args.rows / raw_rate, raw_cpu, ceiling_cpu)
        for raw_rate, raw_cpu, ceiling_cpu in zip(
            results["raw"], cpu["raw"], cpu["ceiling"], strict=True
        )
    ]
    paired = list(zip(results["spark"], results["raw"], strict=True))
    fastest = results["spark"].index(best["spark"])
    report = {
        "benchmark": "source",
        "rows": args.rows,
        "redis_version": redis_version,
        "envelope_wire_bytes": wire_bytes,
        "stream_memory_bytes": entry_bytes,
        "publish_rows_per_s": None if publish_rate != publish_rate else round(publish_rate),
        "spark_rows_per_s": round(best["spark"]),
        "spark_query_start_s": round(starts[fastest], 2),
        "spark_in_batch_rows_per_s": round(in_batch[fastest]),
        "spark_prebuilt_ceiling_rows_per_s": round(best["ceiling"]),
        "spark_prebuilt_in_batch_rows_per_s": round(max(ceiling_in_batch)),
        "spark_prebuilt_query_start_s": round(min(ceiling_starts), 2),
        "bare_source_rows_per_s": round(best["bare"]),
        "bare_source_in_batch_rows_per_s": round(max(bare_in_batch)),
        "bare_source_vs_ceiling_per_run": [
            round(b / c, 3) for b, c in zip(results["bare"], results["ceiling"], strict=True)
        ],
        "receive_floor_rows_per_s": round(best["floor"]),
        "receive_floor_in_batch_rows_per_s": round(max(floor_in_batch)),
        "receive_floor_vs_ceiling_per_run": [
            round(f / c, 3) for f, c in zip(results["floor"], results["ceiling"], strict=True)
        ],
        "spark_vs_receive_floor_per_run": [
            round(a / f, 3) for a, f in zip(results["spark"], results["floor"], strict=True)
        ],
        "spark_vs_ceiling": round(best["spark"] / best["ceiling"], 3),
        "spark_vs_ceiling_per_run": [
            round(a / c, 3) for a, c in zip(results["spark"], results["ceiling"], strict=True)
        ],
        "spark_in_batch_vs_ceiling_in_batch": round(in_batch[fastest] / max(ceiling_in_batch), 3),
        "spark_in_batch_vs_raw": round(in_batch[fastest] / best["raw"], 3),
        "core_cpu_vs_raw_cpu_per_run": [
            round(c.readers / r.readers, 3) for c, r in zip(cpu["core"], cpu["raw"], strict=True)
        ],
        "core_2proc_rows_per_s": round(best["core"]),
        "core_raw_format_cpu_vs_raw_cpu_per_run": [
            round(c.readers / r.readers, 3)
            for c, r in zip(cpu["core_raw"], cpu["raw"], strict=True)
        ],
        "core_raw_format_2proc_rows_per_s": round(best["core_raw"]),
        "raw_xrange_arrow_2proc_rows_per_s": round(best["raw"]),
        "xread_count1_rows_per_s": round(single),
        "spark_vs_raw": round(best["spark"] / best["raw"], 3),
        "spark_vs_raw_per_run": [round(s / r, 3) for s, r in paired],
        "spark_vs_xread_count1": round(best["spark"] / single, 1),
        "all_runs": {k: [round(v) for v in vs] for k, vs in results.items()},
        "all_query_starts_s": [round(v, 2) for v in starts],
        "cpu_seconds_of_best_runs": {name: c.as_dict() for name, c in best_cpu.items()},
        "cpu_seconds_all_runs": {name: [c.as_dict() for c in cs] for name, cs in cpu.items()},
        "reachable_vs_raw_per_run": [round(b, 3) for b in bounds],
    }
    results_file = results_for(RESULTS, args.rows)
    if args.label:
        results_file = results_file.with_name(f"{results_file.stem}-{args.label}.json")
    write_report(results_file, report, load_before, os.getloadavg())
    table = [
        ("atlasbus readStream -> noop, availableNow, local[2]", best["spark"]),
        ("  of which inside the micro-batch (addBatch)", in_batch[fastest]),
        ("Spark alone: same query and schema, pre-built batches", best["ceiling"]),
        ("  of which inside the micro-batch (addBatch)", max(ceiling_in_batch)),
        ("receiving only: replies taken off the socket, pre-built rows", best["floor"]),
        ("  of which inside the micro-batch (addBatch)", max(floor_in_batch)),
        ("raw baseline as a Spark source (nothing decoded)", best["bare"]),
        ("  of which inside the micro-batch (addBatch)", max(bare_in_batch)),
        ("atlasbus core reader, no Spark, 2 processes", best["core"]),
        ("  the same with format=raw (fields as one map)", best["core_raw"]),
        ("baseline: raw XRANGE + vectorised Arrow, 2 processes", best["raw"]),
        ("baseline: one at a time, XREAD COUNT 1 (bus consumer)", single),
    ]
    chart(table, best["raw"], best_cpu, args.rows, results_file.with_suffix(".png"))
    print(f"\n{'what':<58}{'rows/s':>12}{'x raw':>9}")
    for label, rate in table:
        print(f"{label:<58}{rate:>12,.0f}{rate / best['raw']:>9.3f}")
    print(
        f"query start (start() to the first micro-batch): {starts[fastest]:.2f} s; "
        f"Spark alone {min(ceiling_starts):.2f} s"
    )
    per_run = ", ".join(f"{s / r:.3f}" for s, r in paired)
    print(f"atlasbus / raw baseline within each run: {per_run}")
    print_cpu_table(best, best_cpu, args.rows)
    print("\nthe most any Python source that reads as the baseline does can reach here, x raw:")
    print("(2 cores' time for the baseline's CPU plus Spark's runner and JVM CPU; per run)")
    print("  " + ", ".join(f"{b:.3f}" for b in bounds))
    print(
        f"atlasbus / Spark alone: {best['spark'] / best['ceiling']:.3f} end to end, "
        f"{in_batch[fastest] / max(ceiling_in_batch):.3f} inside the micro-batch"
    )
    ratios = ", ".join(
        f"{c.readers / r.readers:.2f}" for c, r in zip(cpu["core"], cpu["raw"], strict=True)
    )
    print(f"core reader's CPU / raw baseline's CPU, per run: {ratios}")
    raw_format = ", ".join(
        f"{c.readers / r.readers:.2f}" for c, r in zip(cpu["core_raw"], cpu["raw"], strict=True)
    )
    print(f"core reader with format=raw, its CPU / raw baseline's, per run: {raw_format}")
    bare_ratios = ", ".join(
        f"{b / c:.3f}" for b, c in zip(results["bare"], results["ceiling"], strict=True)
    )
    print(f"raw baseline as a Spark source / Spark alone, end to end, per run: {bare_ratios}")
    floor_ratios = ", ".join(
        f"{f / c:.3f}" for f, c in zip(results["floor"], results["ceiling"], strict=True)
    )
    print(f"receiving only / Spark alone, end to end, per run: {floor_ratios}")
    print(f"\nenvelope {wire_bytes} bytes on the wire; results in {results_file}")


def chart(
    table: list[tuple[str, float]], raw: float, cpu: dict[str, CpuSeconds], rows: int, path: Path
) -> None:
    """Rates (left) and CPU seconds per million entries by process (right), best runs."""
    plt = pyplot()
    if plt is None:
        return

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    labels = [label.strip() for label, _ in table]
    values = [rate / 1000 for _, rate in table]
    left.barh(range(len(table)), values, color="tab:blue")
    for y, (v, (_, rate)) in enumerate(zip(values, table, strict=True)):
        left.text(v, y, f" {v:,.0f}k ({rate / raw:.2f}x raw)", va="center", fontsize=7)
    left.set_yticks(range(len(table)), labels, fontsize=7)
    left.invert_yaxis()
    left.set_xlabel(f"thousand rows/s, {rows:,} entries, best run")
    names = {
        "spark": "atlasbus query",
        "ceiling": "Spark alone",
        "floor": "receiving only",
        "bare": "raw as a source",
        "core": "core reader",
        "core_raw": "core, format=raw",
        "raw": "raw baseline",
    }
    per_million = 1_000_000 / rows
    bottoms = [0.0] * len(names)
    for part in ("readers", "runner", "jvm", "redis"):
        heights = [(getattr(cpu[k], part) or 0.0) * per_million for k in names]
        right.bar(range(len(names)), heights, 0.6, bottom=bottoms, label=part)
        bottoms = [a + b for a, b in zip(bottoms, heights, strict=True)]
    right.set_xticks(range(len(names)), list(names.values()), fontsize=8, rotation=25, ha="right")
    right.set_ylabel("CPU seconds per million entries")
    right.legend(fontsize=8)
    figure.suptitle("source throughput against raw XRANGE + Arrow and Spark alone, one run")
    save_chart(figure, path)


def reachable_vs_raw(raw_wall: float, raw: CpuSeconds, spark_alone: CpuSeconds) -> float:
    """An upper bound on (source rate / baseline rate) on this machine.

    A source that reads Redis at the baseline's cost needs at least the baseline's CPU plus what
    Spark alone spends around it (the query's runner and the JVM turning batches into rows).
    All cores busy all the time, that work takes (that CPU / cores) seconds; optimistic, as the
    query's start keeps one core idle.
    """
    cores = os.cpu_count() or 1
    least_wall = (raw.total + spark_alone.runner + spark_alone.jvm) / cores
    return raw_wall / least_wall


def print_cpu_table(best: dict[str, float], cpu: dict[str, CpuSeconds], rows: int) -> None:
    """CPU seconds per component, and the least wall time the machine's cores allow for them."""
    labels = {
        "spark": "atlasbus readStream -> noop",
        "ceiling": "Spark alone, pre-built batches",
        "floor": "receiving only, pre-built rows",
        "bare": "raw baseline as a Spark source",
        "core": "atlasbus core reader, 2 processes",
        "core_raw": "atlasbus core reader, format=raw, 2 proc.",
        "raw": "baseline: raw XRANGE + Arrow, 2 processes",
    }
    cores = os.cpu_count() or 1
    header = ["readers", "runner", "JVM", "redis", "total", "wall", "floor"]
    print(f"\n{'CPU seconds, best runs':<44}" + "".join(f"{h:>8}" for h in header))
    for name, label in labels.items():
        c = cpu[name]
        redis_cpu = "-" if c.redis is None else f"{c.redis:.2f}"
        figures = [f"{c.readers:.2f}", f"{c.runner:.2f}", f"{c.jvm:.2f}", redis_cpu]
        figures += [f"{c.total:.2f}", f"{rows / best[name]:.2f}", f"{c.total / cores:.2f}"]
        print(f"{label:<44}" + "".join(f"{f:>8}" for f in figures))
    print("readers: the Python processes reading Redis (in a query, pyspark's workers); runner:")
    print("the query's driver-side Python runner; wall: seconds for the rows; floor: total CPU")
    print(f"over {cores} cores, the least wall time that much work can take on this machine")


if __name__ == "__main__":
    main()
