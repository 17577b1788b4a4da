"""`pageSize`: the readers' and redis-server's CPU per entry, and what the bus's other clients wait.

    python benchmarks/bench_page_size.py [--rows 1000000] [--sizes 1000,2000,3000,5000,10000]
                                         [--repeat 3] [--url redis://...]

Each XRANGE round trip costs the reader a fixed amount besides its entries (sending the
command, waking up for the reply, cutting a page into columns), so larger pages cost the
reader less per entry; but Redis serves one command at a time, so a larger page holds every
other client of the bus for longer. This measures both sides on one private redis-server (or
--url) holding --rows envelopes (envelope_stream.py's):

* two processes read the stream's two halves with atlasbus's core reader (as two Spark tasks
  would, without Spark), at each page size in turn, --repeat rounds, the sizes' order
  rotated each round;
* meanwhile another client publishes one entry at a time to another stream (XADD, every
  0.5 ms), as the bus's producers do, and records how long each XADD took.

Reports per page size the medians over rounds of: the readers' CPU and redis-server's CPU per
entry, their sum, the rate, and the other client's XADD latency (p50, p99, max); and each
against the default page size's. Writes benchmarks/results/page-size.json and page-size.png.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from cpu_meter import RedisCpu
from envelope_stream import STREAM, STREAM_PREFIX, TOPIC, publish, time_slices
from installed_bytecode import compile_atlasbus
from run_report import benchmark_parser, chart_note, pyplot, results_for, save_chart, write_report

from atlasbus.options.source import DEFAULT_PAGE_SIZE

RESULTS = Path(__file__).parent / "results" / "page-size.json"
OTHER_STREAM = "bench:other-client"
OTHER_EVERY_S = 0.0005


def read_slice(url: str, bounds: tuple[str, str], page_size: int) -> tuple[int, float]:
    """One half of the stream with the core reader; (rows, CPU seconds). Runs in a worker."""
    from atlasbus.model.entry_id import EntryId
    from atlasbus.options.source import parse_source_options
    from atlasbus.planning.batch_plan import ReadRange
    from atlasbus.reading.range_reader import read_range

    options = parse_source_options(
        {"url": url, "streamPrefix": STREAM_PREFIX, "topics": TOPIC, "pageSize": str(page_size)}
    )
    low = EntryId(0, 0) if bounds[0] == "-" else EntryId.parse(bounds[0].lstrip("("))
    high = EntryId(2**63, 0) if bounds[1] == "+" else EntryId.parse(bounds[1])
    started = time.process_time()
    rows = sum(batch.num_rows for batch in read_range(options, ReadRange(STREAM, TOPIC, low, high)))
    return rows, time.process_time() - started


class OtherClient:
    """Publishes one small entry at a time while the readers run, timing each XADD."""

    def __init__(self, url: str) -> None:
        import redis

        self._client = redis.Redis.from_url(url)
        self._stop = threading.Event()
        self.latencies: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> OtherClient:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            self._client.xadd(OTHER_STREAM, {"n": "1"}, maxlen=1000, approximate=True)
            self.latencies.append(time.perf_counter() - started)
            time.sleep(OTHER_EVERY_S)


def one_round(
    pool: ProcessPoolExecutor, url: str, parts: list[tuple[str, str]], page_size: int
) -> dict[str, float]:
    redis_cpu = RedisCpu(url)
    with OtherClient(url) as other:
        redis_before = redis_cpu.read()
        started = time.perf_counter()
        results = list(pool.map(read_slice, [url] * 2, parts, [page_size] * 2))
        elapsed = time.perf_counter() - started
        redis_spent = redis_cpu.since(redis_before)
    rows = sum(r for r, _ in results)
    latencies = sorted(other.latencies)
    quantiles = statistics.quantiles(latencies, n=100, method="inclusive")
    per_entry = 1e6 / rows
    readers = sum(c for _, c in results) * per_entry
    redis_us = (redis_spent or 0.0) * per_entry
    return {
        "rows": rows,
        "rows_per_s": rows / elapsed,
        "readers_us_per_entry": readers,
        "redis_us_per_entry": redis_us,
        "both_us_per_entry": readers + redis_us,
        "other_xadd_p50_ms": quantiles[49] * 1e3,
        "other_xadd_p99_ms": quantiles[98] * 1e3,
        "other_xadd_max_ms": latencies[-1] * 1e3,
    }


def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def print_table(figures: dict[int, dict[str, float]], default: int) -> None:
    base = figures[default]
    print(
        f"\n{'pageSize':>9} {'rows/s':>10} {'readers':>8} {'redis':>7} {'both':>7} "
        f"{'vs ' + str(default):>8} {'XADD p50':>9} {'p99':>7} {'max':>7}"
    )
    print(f"{'':>9} {'':>10} {'µs/entry (CPU)':>24} {'':>8} {'ms, another client':>25}")
    for size, f in figures.items():
        print(
            f"{size:>9,} {f['rows_per_s']:>10,.0f} {f['readers_us_per_entry']:>8.3f} "
            f"{f['redis_us_per_entry']:>7.3f} {f['both_us_per_entry']:>7.3f} "
            f"{f['both_us_per_entry'] / base['both_us_per_entry']:>8.2f} "
            f"{f['other_xadd_p50_ms']:>9.2f} {f['other_xadd_p99_ms']:>7.2f} "
            f"{f['other_xadd_max_ms']:>7.2f}"
        )


def chart(figures: dict[int, dict[str, float]], rows: int, path: Path) -> None:
    """CPU per entry by process (left) and the other client's XADD latency (right)."""
    plt = pyplot()
    if plt is None:
        return

    sizes = list(figures)
    labels = [f"{s:,}" for s in sizes]
    x = range(len(sizes))
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    readers = [figures[s]["readers_us_per_entry"] for s in sizes]
    redis_us = [figures[s]["redis_us_per_entry"] for s in sizes]
    left.bar(x, readers, 0.6, label="readers (2 processes)")
    left.bar(x, redis_us, 0.6, bottom=readers, label="redis-server")
    left.set_xticks(x, labels)
    left.set_xlabel("pageSize (XRANGE COUNT)")
    left.set_ylabel("CPU µs per entry (median of rounds)")
    left.legend(fontsize=8)
    for key, style in (("p50", "o-"), ("p99", "s-"), ("max", "^-")):
        right.plot(x, [figures[s][f"other_xadd_{key}_ms"] for s in sizes], style, label=key)
    right.set_xticks(x, labels)
    right.set_xlabel("pageSize (XRANGE COUNT)")
    right.set_ylabel("another client's XADD, ms")
    right.legend(fontsize=8)
    figure.suptitle(f"pageSize: reading {rows:,} entries in 2 processes, one redis-server")
    save_chart(figure, path)


def main() -> None:
    compile_atlasbus()
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--sizes", default="1000,2000,3000,5000,10000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--url", help="an existing Redis (default: a private redis-server)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if DEFAULT_PAGE_SIZE not in sizes:
        sizes.insert(0, DEFAULT_PAGE_SIZE)

    from atlasbus.sandbox.redis_server import RedisServer

    server = None if args.url else RedisServer().start()
    url = args.url or server.url  # type: ignore[union-attr]
    try:
        print(f"publishing {args.rows:,} envelopes to {STREAM} ...", flush=True)
        publish(url, args.rows)
        parts = time_slices(url, 2)
        load_before = os.getloadavg()
        rounds: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
        with ProcessPoolExecutor(2) as pool:
            one_round(pool, url, parts, DEFAULT_PAGE_SIZE)  # workers load the reader: uncounted
            for index in range(args.repeat):
                order = sizes[index % len(sizes) :] + sizes[: index % len(sizes)]
                for size in order:
                    figures = one_round(pool, url, parts, size)
                    if figures["rows"] != args.rows:
                        raise SystemExit(f"pageSize {size}: read {figures['rows']:,} entries")
                    rounds[size].append(figures)
                    print(
                        f"round {index + 1}, pageSize {size:,}: "
                        f"{figures['both_us_per_entry']:.3f} µs an entry, "
                        f"XADD p99 {figures['other_xadd_p99_ms']:.2f} ms",
                        flush=True,
                    )
        load_after = os.getloadavg()
    finally:
        if server is not None:
            server.stop()

    summary = {size: medians(r) for size, r in rounds.items()}
    print_table(summary, DEFAULT_PAGE_SIZE)
    results = results_for(RESULTS, args.rows)
    report: dict[str, Any] = {
        "rows": args.rows,
        "default_page_size": DEFAULT_PAGE_SIZE,
        "medians": {
            str(size): {k: round(v, 4) for k, v in f.items()} for size, f in summary.items()
        },
        "rounds": {
            str(size): [{k: round(v, 4) for k, v in f.items()} for f in r]
            for size, r in rounds.items()
        },
    }
    write_report(results, report, load_before, load_after)
    chart(summary, args.rows, results.with_suffix(".png"))
    print(f"\nwrote {results}{chart_note(results.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
