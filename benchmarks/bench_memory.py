"""Memory: peak RSS of Spark's JVM and Python workers reading and writing 1M and 5M entries.

    python benchmarks/bench_memory.py [--rows 1000000,5000000]

Starts a private redis-server. For each size, a fresh stream of that many envelopes (the
same bytes as envelope_stream.py's, packed once), then, with trigger availableNow and the
source's defaults (``maxEntriesPerPartition`` 250,000, ``pageSize`` 1,000):

* read: ``readStream.format("atlasbus")`` -> noop sink;
* sink: the same source -> ``writeStream.format("atlasbus")`` (another stream), every entry
  read and published again.

A thread samples every 50 ms the resident set (``VmRSS`` in /proc) of Spark's JVM and of each
Python process Spark started (the worker daemons and their workers, the source's driver-side
runner). Reported per phase: the JVM's peak, the largest single Python worker's peak (a
daemon is not a worker: atlasbus's holds the preloaded code its workers share), the
daemons' peak, the Python processes' peak together (PSS: pages shared by forked workers
counted once), and the worker's growth over its idle size, which is what one task holds.
Flat in stream length means the 5M figures equal the 1M figures: a task reads its range page
by page and yields 10,000-row batches, whatever the range's length.

Writes benchmarks/results/memory.json and memory.png.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency import _xadd_command
from cpu_meter import is_daemon, proc_stat
from envelope_stream import envelope
from installed_bytecode import compile_atlasbus
from run_report import benchmark_parser, chart_note, pyplot, save_chart, write_report

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "memory.json"
CHART = RESULTS.with_suffix(".png")
PREFIX = "mem"
_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb(pid: int) -> float:
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError):
        return 0.0
    return pages * _PAGE / 2**20


def pss_mb(pid: int) -> float:
    """Proportional set size: pages shared after pyspark's daemon forks its workers count
    once in a sum, not once per worker as in RSS."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found, pending = [], [root]
    while pending:
        for child in parents.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def python_children(jvm: int) -> list[int]:
    result = []
    for pid in descendants(jvm):
        try:
            if b"python" in Path(f"/proc/{pid}/cmdline").read_bytes():
                result.append(pid)
        except OSError:
            continue
    return result


def spark_daemons(jvm: int, pids: list[int]) -> list[int]:
    """The worker daemons among ``pids``: children of the JVM (their forked workers carry
    the same command line, one level down)."""
    return [pid for pid in pids if _parent(pid) == jvm and is_daemon(pid)]


def _parent(pid: int) -> int | None:
    fields = proc_stat(pid)
    return None if fields is None else int(fields[1])


class Sampler:
    """Peak RSS of the JVM and its Python processes, sampled on a thread while a phase runs."""

    def __init__(self, jvm: int) -> None:
        self.jvm = jvm
        self.stop = threading.Event()
        self.jvm_peak = 0.0
        self.worker_peak = 0.0
        self.daemon_peak = 0.0
        self.python_peak = 0.0
        self.python_processes = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.jvm_peak = max(self.jvm_peak, rss_mb(self.jvm))
            pids = python_children(self.jvm)
            daemons = spark_daemons(self.jvm, pids)
            workers = [rss_mb(pid) for pid in pids if pid not in daemons]
            self.daemon_peak = max([self.daemon_peak, *map(rss_mb, daemons)])
            if workers:
                self.worker_peak = max(self.worker_peak, max(workers))
            if pids:
                self.python_peak = max(self.python_peak, sum(pss_mb(pid) for pid in pids))
                self.python_processes = max(self.python_processes, len(pids))
            self.stop.wait(0.05)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def publish_fast(url: str, stream: str, rows: int) -> None:
    import redis

    command = _xadd_command(stream, envelope(0))
    connection = redis.Redis.from_url(url).connection_pool.get_connection()
    for start in range(0, rows, 5000):
        chunk = min(5000, rows - start)
        connection.send_packed_command([command * chunk], check_health=False)
        for _ in range(chunk):
            connection.read_response()


def run_phase(spark: Any, url: str, topic: str, rows: int, sink: str) -> dict[str, Any]:
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    idle_pids = python_children(jvm)
    daemons = spark_daemons(jvm, idle_pids)
    idle_workers = [rss_mb(pid) for pid in idle_pids if pid not in daemons]
    jvm_before = rss_mb(jvm)
    frame = (
        spark.readStream.format("atlasbus")
        .option("url", url)
        .option("streamPrefix", PREFIX)
        .option("topics", topic)
        .load()
    )
    if sink == "noop":
        writer = frame.writeStream.format("noop")
    else:
        writer = (
            frame.select("payload", "priority", "correlation_id")
            .writeStream.format("atlasbus")
            .option("url", url)
            .option("streamPrefix", f"{PREFIX}out")
            .option("topic", topic)
        )
    checkpoint = Path(tempfile.mkdtemp(prefix="atlasbus-bench-memory-")) / uuid.uuid4().hex
    started = time.perf_counter()
    with Sampler(jvm) as sampler:
        query = (
            writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        )
        query.awaitTermination()
    elapsed = time.perf_counter() - started
    read = sum(p["numInputRows"] for p in query.recentProgress)
    if read != rows:
        raise SystemExit(f"{sink}: the query read {read} rows, expected {rows}")
    idle = max(idle_workers, default=0.0)
    return {
        "rows": rows,
        "phase": "read -> noop" if sink == "noop" else "read -> atlasbus sink",
        "seconds": round(elapsed, 1),
        "jvm_rss_before_mb": round(jvm_before),
        "jvm_peak_rss_mb": round(sampler.jvm_peak),
        "worker_idle_rss_mb": round(idle),
        "worker_peak_rss_mb": round(sampler.worker_peak),
        "worker_growth_mb": round(sampler.worker_peak - idle) if idle else None,
        "daemon_peak_rss_mb": round(sampler.daemon_peak),
        "python_peak_pss_mb": round(sampler.python_peak),
        "python_processes": sampler.python_processes,
    }


def chart(phases: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return

    figure, axis = plt.subplots(figsize=(9, 3.8))
    labels = [f"{p['rows'] // 1_000_000}M\n{p['phase']}" for p in phases]
    positions = list(range(len(phases)))
    series = (
        ("JVM peak", "jvm_peak_rss_mb", -0.27),
        ("Python processes together (PSS)", "python_peak_pss_mb", 0.0),
        ("largest Python worker", "worker_peak_rss_mb", 0.27),
    )
    for label, key, offset in series:
        values = [p[key] for p in phases]
        axis.bar([x + offset for x in positions], values, 0.27, label=label)
        for x, v in zip(positions, values, strict=True):
            axis.text(x + offset, v, f"{v:.0f}", ha="center", va="bottom", fontsize=7)
    axis.set_xticks(positions, labels, fontsize=8)
    axis.set_ylabel("peak RSS, MiB")
    axis.set_title("memory reading and writing 1M and 5M entries (availableNow, local[2])")
    axis.legend(fontsize=8)
    save_chart(figure, path)


def main() -> None:
    compile_atlasbus()
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", default="1000000,5000000")
    args = parser.parse_args()
    sizes = [int(r) for r in args.rows.split(",")]

    import redis

    from atlasbus.sandbox.redis_server import RedisServer
    from pyspark_atlasbus.session import local_session

    server = RedisServer().start()
    load_before = os.getloadavg()
    phases = []
    try:
        client = redis.Redis.from_url(server.url)
        spark = local_session("atlasbus-bench-memory", driver_memory="4g", delta=False)
        warm = f"warm{uuid.uuid4().hex[:6]}"
        publish_fast(server.url, f"{PREFIX}:{warm}", 1000)
        run_phase(spark, server.url, warm, 1000, "noop")  # workers up before any figure
        for rows in sizes:
            topic = f"t{rows}"
            print(f"publishing {rows:,} entries ...", flush=True)
            publish_fast(server.url, f"{PREFIX}:{topic}", rows)
            for sink in ("noop", "atlasbus"):
                phase = run_phase(spark, server.url, topic, rows, sink)
                phases.append(phase)
                print(json.dumps(phase), flush=True)
            client.delete(f"{PREFIX}:{topic}", f"{PREFIX}out:{topic}")
        spark.stop()
    finally:
        server.stop()
    load_after = os.getloadavg()

    header = ["rows", "phase", "s", "JVM", "worker", "growth", "python"]
    widths = [11, 24, 7, 8, 8, 8, 11]
    print("\n" + "".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for p in phases:
        figures = [
            f"{p['rows']:,}",
            p["phase"],
            f"{p['seconds']}",
            f"{p['jvm_peak_rss_mb']}",
            f"{p['worker_peak_rss_mb']}",
            f"{p['worker_growth_mb']}",
            f"{p['python_peak_pss_mb']} ({p['python_processes']})",
        ]
        print("".join(f"{f:>{w}}" for f, w in zip(figures, widths, strict=True)))
    print("peak MiB: JVM (RSS); largest Python worker (RSS); its growth over idle; Spark's Python")
    print("processes together (PSS: pages shared by forked workers counted once; processes)")
    report = {
        "benchmark": "memory",
        "phases": phases,
        "defaults": {"maxEntriesPerPartition": 250_000, "pageSize": 1000},
    }
    write_report(RESULTS, report, load_before, load_after)
    chart(phases, CHART)
    print(f"results in {RESULTS}{chart_note(CHART)}")


if __name__ == "__main__":
    main()
