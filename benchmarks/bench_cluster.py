"""Redis Cluster scale figure: 3 topics read and written on 1 redis-server, a 1-master cluster
and a 3-master cluster, the same entries, in one run.

    python benchmarks/bench_cluster.py [--rows 1000000] [--repeat 3] [--label L]

Starts three private set-ups side by side, from the same redis-server binary:

* standalone: one redis-server (the baseline);
* cluster, 1 master: ``LocalCluster(masters=1, replicas=0)``, every slot on one node;
* cluster, 3 masters: ``LocalCluster(masters=3, replicas=0)``.

The three topics (``orders``, ``payments``, ``shipments`` under ``bench``) are streams whose
hash slots fall to three different masters of the 3-master cluster (checked with the cluster
client's ``keyslot`` and slot map, and recorded). Each set-up gets the same ``--rows``
envelopes in all (a third per topic; envelope_stream.py's eight fields and order event),
published once with ``redis-cli --pipe`` to the node owning each stream.

Then, on one local[2] SparkSession, each round measures every set-up in turn (the set-ups
alternating, so that the machine's drift falls on all of them):

* source: ``spark.read.format("atlasbus")`` of the 3 topics, written to the ``noop`` sink (every
  row converted, nothing kept), as the other source benchmarks force a full read;
* sink: ``df.write.format("atlasbus")`` of ``--rows`` rows with a ``topic`` column (the three
  topics in turn, row by row), ``payload`` and ``priority``, read from Parquet (two files, so
  two write tasks, as bench_sink.py), to a stream prefix whose three streams are also on three
  masters; default sink options (``exactlyOnce=true``). The streams are emptied before each.

Before the rounds, one uncounted full read of each set-up (the JVM compiles the row conversion
on the first large query) and a ``count()`` of each that must match, and a 20,000-row sink
write to each (workers up). A set-up whose sink fails (warm-up or round) is reported as
failed, with its error, and the others go on; so would a failing source.

Around every measurement the CPU seconds of Spark's processes (the Python workers, which also
plan a batch read; the JVM) and of each redis-server of the set-up are read from /proc
(cpu_meter.py), and those of the whole machine from /proc/stat: their sums over the wall time
say how many of the machine's cores the benchmark kept busy, and how many other processes did
(the machines are shared).

Prints a table (best of --repeat; ratios against the standalone server's best), writes
benchmarks/results/cluster.json (cluster-3M.json for --rows 3000000, cluster-L.json with
--label) and draws the chart beside it. The cluster's sink must be able to publish to a
cluster (publisher lanes per hash slot); until it can, its rows say FAILED and why.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from cpu_meter import CpuSeconds, RedisCpu, SparkCpu
from installed_bytecode import compile_atlasbus
from run_report import (
    benchmark_parser,
    chart_note,
    pyplot,
    results_for,
    save_chart,
    write_report,
)

RESULTS = Path(__file__).parent / "results" / "cluster.json"
PREFIX = "bench"
TOPICS = ("orders", "payments", "shipments")
SINK_PREFIXES = tuple(f"bench-sink-{n}" for n in range(100))  # the first that spreads TOPICS
MASTERS = 3
WARM_UP_SINK_ROWS = 20_000
_PIPE_CHUNK = 20_000


# --- set-ups -----------------------------------------------------------------------------------


@dataclass
class Setup:
    """One place to read from and write to: its URL and the redis-server processes behind it."""

    name: str
    url: str
    ports: list[int]  # the masters (the standalone server): where keys live
    owner: dict[str, int] = field(default_factory=dict)  # stream key -> port of its master

    def port_of(self, key: str) -> int:
        return self.owner.get(key, self.ports[0])


class NodesCpu(RedisCpu):
    """The CPU seconds of every redis-server of a set-up, summed (``RedisCpu`` of each)."""

    def __init__(self, urls: list[str]) -> None:
        self.nodes = [RedisCpu(url) for url in urls]
        self.pid = self.nodes[0].pid

    def read(self) -> float | None:
        readings = [node.read() for node in self.nodes]
        return None if any(r is None for r in readings) else sum(r or 0.0 for r in readings)

    def each(self) -> list[float | None]:
        return [node.read() for node in self.nodes]


def start_setups(stack: ExitStack) -> list[Setup]:
    """The standalone server, the 1-master cluster and the 3-master cluster, started."""
    import redis

    from atlasbus.sandbox.redis_cluster import LocalCluster
    from atlasbus.sandbox.redis_server import RedisServer

    server = stack.enter_context(RedisServer())
    one = stack.enter_context(LocalCluster(masters=1, replicas=0))
    three = stack.enter_context(LocalCluster(masters=MASTERS, replicas=0))
    setups = [
        Setup("standalone", server.url, [server.port]),
        Setup("cluster, 1 master", one.url, [m.port for m in one.masters]),
        Setup(f"cluster, {MASTERS} masters", three.url, [m.port for m in three.masters]),
    ]
    for setup, cluster in ((setups[1], one), (setups[2], three)):
        client: Any = redis.RedisCluster.from_url(cluster.url)
        for prefix in (PREFIX, *SINK_PREFIXES):
            for topic in TOPICS:
                key = f"{prefix}:{topic}"
                setup.owner[key] = int(client.get_node_from_key(key).port)
        client.close()
    return setups


def sink_prefix(setup: Setup) -> str:
    """The first candidate prefix whose three streams are on three masters of ``setup``."""
    for prefix in SINK_PREFIXES:
        if len({setup.port_of(f"{prefix}:{t}") for t in TOPICS}) == len(TOPICS):
            return prefix
    raise SystemExit("no sink prefix spreads the topics over the masters")


def slot_layout(setup: Setup, prefixes: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Each stream's hash slot and master port, as the cluster client says."""
    import redis

    client: Any = redis.RedisCluster.from_url(setup.url)
    layout = {
        f"{p}:{t}": {"slot": int(client.keyslot(f"{p}:{t}")), "port": setup.port_of(f"{p}:{t}")}
        for p in prefixes
        for t in TOPICS
    }
    client.close()
    return layout


# --- test data ---------------------------------------------------------------------------------


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def xadd_commands(stream: str, topic: str, count: int) -> Iterator[bytes]:
    """``count`` envelopes as pipelined XADD commands, in chunks: envelope_stream's fields and
    order event, formatted as bytes (as bench_pushdown's fill) to publish millions quickly."""
    head = b"*19\r\n" + _bulk(b"XADD") + _bulk(stream.encode()) + _bulk(b"*")
    head += _bulk(b"topic") + _bulk(topic.encode())
    note = b"x" * 96
    rest = _bulk(b"metadata") + _bulk(b"{}") + _bulk(b"delivery_attempts") + _bulk(b"0")
    now = b"%.6f" % time.time()
    chunk: list[bytes] = []
    for i in range(count):
        payload = (
            b'{"order_id": %d, "customer": "c-%d", "amount": %.2f, "currency": "EUR", '
            b'"items": [{"sku": "A-100", "qty": 2}, {"sku": "B-7", "qty": 1}], "note": "%s"}'
            % (i, i % 9973, i * 1.37 % 1000, note)
        )
        chunk.append(
            head
            + _bulk(b"priority")
            + _bulk(b"%d" % (i % 10))
            + _bulk(b"payload")
            + _bulk(payload)
            + _bulk(b"correlation_id")
            + _bulk(b"%032x" % i)
            + _bulk(b"tracing")
            + _bulk(b'{"trace_id": "%016x"}' % i)
            + rest
            + _bulk(b"enqueued_time")
            + _bulk(now)
        )
        if len(chunk) == _PIPE_CHUNK:
            yield b"".join(chunk)
            chunk = []
    if chunk:
        yield b"".join(chunk)


def per_topic(rows: int) -> list[int]:
    return [rows // len(TOPICS) + (1 if i < rows % len(TOPICS) else 0) for i in range(len(TOPICS))]


def publish(setups: list[Setup], rows: int) -> float:
    """The same entries to every set-up: each chunk written once, to the node owning the stream
    in each set-up, by ``redis-cli --pipe``. Returns entries a second (all set-ups)."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise SystemExit("redis-cli is needed to fill the streams (apt-get install redis-tools)")
    started = time.perf_counter()
    for topic, count in zip(TOPICS, per_topic(rows), strict=True):
        stream = f"{PREFIX}:{topic}"
        pipes = [
            subprocess.Popen(
                [cli, "-p", str(s.port_of(stream)), "--pipe"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
            )
            for s in setups
        ]
        for chunk in xadd_commands(stream, topic, count):
            for pipe in pipes:
                assert pipe.stdin is not None
                pipe.stdin.write(chunk)
        for pipe in pipes:
            assert pipe.stdin is not None
            pipe.stdin.close()
            if pipe.wait() != 0:
                raise SystemExit("redis-cli --pipe failed")
    return rows * len(setups) / (time.perf_counter() - started)


def stream_lengths(setup: Setup, prefix: str) -> dict[str, int]:
    """XLEN of each topic's stream under ``prefix``, asked of the master that holds it."""
    import redis

    lengths = {}
    for topic in TOPICS:
        key = f"{prefix}:{topic}"
        with redis.Redis(port=setup.port_of(key)) as client:
            lengths[key] = int(client.xlen(key))
    return lengths


def empty(setup: Setup, prefix: str) -> None:
    """Delete the sink's streams (every key under ``prefix``) and its exactly-once markers."""
    import redis

    for port in setup.ports:
        with redis.Redis(port=port) as client:
            for pattern in (f"{prefix}:*", "*__atlasbus_sink__*"):
                for key in list(client.scan_iter(match=pattern, count=1000)):
                    client.delete(key)


def write_sink_input(path: Path, rows: int) -> None:
    """Two Parquet files of half the rows each (two tasks): bench_sink's envelopes with a
    ``topic`` column, the topics in turn."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from bench_sink import envelopes

    path.mkdir(parents=True)
    half = rows // 2
    for index, (start, stop) in enumerate(((0, half), (half, rows))):
        batches = []
        for low in range(start, stop, 50_000):
            high = min(low + 50_000, stop)
            batch = envelopes(low, high)
            topics = pa.array([TOPICS[n % len(TOPICS)] for n in range(low, high)], pa.string())
            batches.append(batch.append_column("topic", topics))
        pq.write_table(pa.Table.from_batches(batches), path / f"part-{index}.parquet")


# --- measurements ------------------------------------------------------------------------------


def machine_cpu() -> float:
    """CPU seconds every process of the machine has spent (``/proc/stat``), 0 elsewhere."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    ticks = [int(f) for f in fields[:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / (os.sysconf("SC_CLK_TCK") or 100)


@dataclass(frozen=True)
class Run:
    seconds: float
    cpu: CpuSeconds
    redis_each: list[float | None]  # CPU seconds of each redis-server of the set-up
    machine: float  # CPU seconds of every process on the machine (others' too)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "cpu": self.cpu.as_dict(),
            "redis_cpu_each_node": [None if c is None else round(c, 2) for c in self.redis_each],
            "cores_busy": round(self.cpu.total / self.seconds, 2),
            "machine_cpu_s": round(self.machine, 2),
            "machine_cores_busy": round(self.machine / self.seconds, 2),
            "others_cores_busy": round(max(0.0, self.machine - self.cpu.total) / self.seconds, 2),
        }


def measured(meter: SparkCpu, nodes: NodesCpu, action: Callable[[], None]) -> Run:
    before = meter.read()
    each_before = nodes.each()
    machine_before = machine_cpu()
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    machine = machine_cpu() - machine_before
    cpu = meter.since(before)
    each = [
        None if a is None or b is None else a - b
        for a, b in zip(nodes.each(), each_before, strict=True)
    ]
    return Run(seconds, cpu, each, machine)


def source_frame(spark: Any, setup: Setup) -> Any:
    return (
        spark.read.format("atlasbus")
        .option("url", setup.url)
        .option("streamPrefix", PREFIX)
        .option("topics", ",".join(TOPICS))
        .load()
    )


def read_to_noop(spark: Any, setup: Setup) -> None:
    source_frame(spark, setup).write.format("noop").mode("overwrite").save()


def write_sink(spark: Any, setup: Setup, data: Path, prefix: str) -> None:
    (
        spark.read.parquet(str(data))
        .write.format("atlasbus")
        .mode("append")
        .option("url", setup.url)
        .option("streamPrefix", prefix)
        .save()
    )


def error_line(error: BaseException) -> str:
    """The last ``SomethingError: ...`` line of an error (Spark wraps the Python worker's)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = [
        line
        for line in lines
        if ": " in line
        and line.split(": ", 1)[0].rsplit(".", 1)[-1].endswith(("Error", "Exception"))
    ]
    text = (named or lines or [type(error).__name__])[-1]
    return text[:400]


# --- the run -----------------------------------------------------------------------------------


def main() -> None:
    compile_atlasbus()
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="entries in all 3 topics")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best is kept")
    parser.add_argument("--label", help="writes cluster-LABEL.json (cluster-3M-LABEL.json, ...)")
    args = parser.parse_args()

    from pyspark_atlasbus.session import local_session

    rows = args.rows
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="atlasbus-bench-")))
        setups = start_setups(stack)
        three = setups[-1]
        if len({three.port_of(f"{PREFIX}:{t}") for t in TOPICS}) != len(TOPICS):
            raise SystemExit(f"{PREFIX}:{TOPICS} are not on {len(TOPICS)} masters")
        out = sink_prefix(three)
        layout = slot_layout(three, (PREFIX, out))
        print(f"{len(TOPICS)} topics on {MASTERS} masters: {layout}", flush=True)

        publish_rate = publish(setups, rows)
        for setup in setups:
            lengths = stream_lengths(setup, PREFIX)
            if sum(lengths.values()) != rows:
                raise SystemExit(f"{setup.name}: published {lengths}, expected {rows} in all")
        print(f"published {rows:,} entries to each set-up ({publish_rate:,.0f}/s)", flush=True)
        data, warm = tmp / "input", tmp / "warm-up"
        write_sink_input(data, rows)
        write_sink_input(warm, WARM_UP_SINK_ROWS)

        spark = local_session("atlasbus-bench-cluster", driver_memory="4g", delta=False)
        meters = {}
        for setup in setups:
            nodes = NodesCpu([f"redis://127.0.0.1:{port}/0" for port in setup.ports])
            meters[setup.name] = (SparkCpu.of(spark, nodes), nodes)
        failed: dict[tuple[str, str], str] = {}

        def attempt(phase: str, setup: Setup, action: Callable[[], None]) -> Run | None:
            if (phase, setup.name) in failed:
                return None
            meter, nodes = meters[setup.name]
            try:
                return measured(meter, nodes, action)
            except Exception as error:
                failed[phase, setup.name] = error_line(error)
                print(f"  {setup.name}: {phase} FAILED: {failed[phase, setup.name]}", flush=True)
                return None

        for setup in setups:  # warm-up, and the counts checked
            run = attempt("source", setup, partial(read_to_noop, spark, setup))
            if run is not None:
                counted = source_frame(spark, setup).count()
                if counted != rows:
                    failed["source", setup.name] = f"counted {counted} rows, expected {rows}"
            empty(setup, out)
            attempt("sink", setup, partial(write_sink, spark, setup, warm, out))
            if ("sink", setup.name) not in failed:
                written = sum(stream_lengths(setup, out).values())
                if written != WARM_UP_SINK_ROWS:
                    failed["sink", setup.name] = f"wrote {written}, expected {WARM_UP_SINK_ROWS}"
            print(f"  warm-up {setup.name}: done", flush=True)

        load_before = os.getloadavg()
        runs: dict[tuple[str, str], list[Run]] = {
            (phase, s.name): [] for phase in ("source", "sink") for s in setups
        }
        for round_ in range(args.repeat):
            for setup in setups:
                run = attempt("source", setup, partial(read_to_noop, spark, setup))
                if run is not None:
                    runs["source", setup.name].append(run)
            for setup in setups:
                empty(setup, out)
                run = attempt("sink", setup, partial(write_sink, spark, setup, data, out))
                if run is not None:
                    written = sum(stream_lengths(setup, out).values())
                    if written != rows:
                        failed["sink", setup.name] = f"wrote {written}, expected {rows}"
                    else:
                        runs["sink", setup.name].append(run)
                empty(setup, out)
            done = ", ".join(
                f"{phase} {name} {rows / r[-1].seconds:,.0f}/s"
                for (phase, name), r in runs.items()
                if r and len(r) == round_ + 1
            )
            print(f"  round {round_ + 1}: {done}", flush=True)
        load_after = os.getloadavg()
        redis_version = redis_server_version(setups[0])
        spark.stop()

    summary = summarise(runs, failed, rows, setups)
    print_table(summary, rows)
    report = {
        "benchmark": "cluster",
        "rows": rows,
        "rows_per_topic": dict(zip(TOPICS, per_topic(rows), strict=True)),
        "redis_version": redis_version,
        "stream_prefix": PREFIX,
        "sink_stream_prefix": out,
        "slots_on_3_masters": layout,
        "publish_entries_per_s": round(publish_rate),
        "sink_options": "default (exactlyOnce=true); 2 Parquet files, 2 write tasks",
        "results": summary,
    }
    results_file = results_for(RESULTS, rows)
    if args.label:
        results_file = results_file.with_name(f"{results_file.stem}-{args.label}.json")
    write_report(results_file, report, load_before, load_after)
    chart(summary, results_file.with_suffix(".png"), rows)
    print(f"\nwritten to {results_file}{chart_note(results_file.with_suffix('.png'))}")


def redis_server_version(setup: Setup) -> str:
    import redis

    with redis.Redis(port=setup.ports[0]) as client:
        return str(client.info("server")["redis_version"])


def summarise(
    runs: dict[tuple[str, str], list[Run]],
    failed: dict[tuple[str, str], str],
    rows: int,
    setups: list[Setup],
) -> dict[str, dict[str, Any]]:
    """Per phase and set-up: best and median seconds and rate, the best run's CPU, the ratio of
    its best rate to the standalone server's; or its error."""
    summary: dict[str, dict[str, Any]] = {}
    for phase in ("source", "sink"):
        summary[phase] = {}
        base = runs[phase, setups[0].name]
        base_rate = rows / min(r.seconds for r in base) if base else None
        for setup in setups:
            measured_runs = runs[phase, setup.name]
            if (phase, setup.name) in failed or not measured_runs:
                summary[phase][setup.name] = {
                    "failed": failed.get((phase, setup.name), "no run"),
                    "runs_before_failing": [r.as_dict() for r in measured_runs],
                }
                continue
            best = min(measured_runs, key=lambda r: r.seconds)
            rate = rows / best.seconds
            summary[phase][setup.name] = {
                "best_s": round(best.seconds, 3),
                "median_s": round(statistics.median(r.seconds for r in measured_runs), 3),
                "per_s": round(rate),
                "vs_standalone": None if base_rate is None else round(rate / base_rate, 3),
                "masters": len(setup.ports),
                "best_run": best.as_dict(),
                "all_s": [round(r.seconds, 3) for r in measured_runs],
            }
    return summary


def print_table(summary: dict[str, dict[str, Any]], rows: int) -> None:
    cores = os.cpu_count() or 1
    print(f"\n{rows:,} entries in 3 topics; best of the rounds; x: against the standalone server")
    header = f"{'phase':<8}{'set-up':<22}{'best s':>8}{'median s':>10}{'per s':>11}{'x':>7}"
    print(header)
    for phase, cases in summary.items():
        for name, s in cases.items():
            if "failed" in s:
                print(f"{phase:<8}{name:<22}  FAILED: {s['failed']}")
                continue
            print(
                f"{phase:<8}{name:<22}{s['best_s']:>8.2f}{s['median_s']:>10.2f}"
                f"{s['per_s']:>11,}{s['vs_standalone']:>7.2f}"
            )
    print(f"\nCPU seconds of the best runs ({cores} cores)")
    head = ["workers", "runner", "JVM", "redis", "total", "wall", "busy", "others"]
    print(f"{'phase':<8}{'set-up':<22}" + "".join(f"{h:>9}" for h in head) + "   redis each")
    for phase, cases in summary.items():
        for name, s in cases.items():
            if "failed" in s:
                continue
            run = s["best_run"]
            cpu = run["cpu"]
            total = sum(v or 0.0 for v in cpu.values())
            figures = [cpu["readers"], cpu["runner"], cpu["jvm"], cpu["redis"] or 0.0, total]
            each = ", ".join("-" if c is None else f"{c:.2f}" for c in run["redis_cpu_each_node"])
            print(
                f"{phase:<8}{name:<22}"
                + "".join(f"{f:>9.2f}" for f in figures)
                + f"{run['seconds']:>9.2f}{run['cores_busy']:>9.2f}"
                + f"{run['others_cores_busy']:>9.2f}   {each}"
            )
    print("workers: pyspark's Python workers (planning, reading, publishing); runner: other")
    print("Python processes of the JVM; redis: all redis-servers of the set-up, and each of them;")
    print("busy: those CPU seconds over the wall time, in cores; others: the cores every other")
    print(
        "process of the machine kept busy meanwhile (/proc/stat: other users of a shared machine)"
    )


def chart(summary: dict[str, dict[str, Any]], path: Path, rows: int) -> None:
    """Rates by set-up for the source and the sink, and where the CPU went in each best run."""
    plt = pyplot()
    if plt is None:
        return
    figure, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    colors = ["tab:gray", "tab:blue", "tab:green"]
    for axis, phase, unit in zip(axes[:2], ("source", "sink"), ("entries", "rows"), strict=True):
        names = list(summary[phase])
        rates = [summary[phase][n].get("per_s", 0) / 1000 for n in names]
        axis.bar(range(len(names)), rates, color=colors)
        for x, name in enumerate(names):
            case = summary[phase][name]
            note = "failed" if "failed" in case else f"{case['vs_standalone']:.2f}x"
            axis.text(x, rates[x], note, ha="center", va="bottom", fontsize=8)
        axis.set_xticks(range(len(names)), names, fontsize=8)
        axis.set_ylabel(f"thousand {unit}/s (best)")
        axis.set_title(
            "source: read 3 topics -> noop" if phase == "source" else "sink: write 3 topics"
        )
    right = axes[2]
    labels, bottoms, x = [], [], 0
    parts = {"readers": "Python workers", "runner": "runner", "jvm": "JVM", "redis": "redis"}
    bars: list[tuple[int, dict[str, float], float]] = []
    for phase in ("source", "sink"):
        for name, case in summary[phase].items():
            if "failed" in case:
                continue
            cpu = case["best_run"]["cpu"]
            bars.append((x, {k: cpu[k] or 0.0 for k in parts}, case["best_run"]["seconds"]))
            labels.append(f"{phase}\n{name}")
            x += 1
    bottoms = [0.0] * len(bars)
    for part, label in parts.items():
        heights = [b[1][part] for b in bars]
        right.bar([b[0] for b in bars], heights, bottom=bottoms, label=label)
        bottoms = [a + h for a, h in zip(bottoms, heights, strict=True)]
    cores = os.cpu_count() or 1
    right.scatter(
        [b[0] for b in bars],
        [b[2] * cores for b in bars],
        color="black",
        marker="_",
        s=300,
        label=f"wall x {cores} cores",
    )
    right.set_xticks(range(len(labels)), labels, fontsize=6)
    right.set_ylabel("CPU seconds (best run)")
    right.legend(fontsize=7)
    figure.suptitle(f"{rows:,} entries in 3 topics: standalone vs Redis Cluster, local[2]")
    save_chart(figure, path)


if __name__ == "__main__":
    main()
