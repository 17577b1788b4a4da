"""Filter pushdown benchmark: a 5-minute window of a 5M-entry stream (50 minutes of traffic),
read with and without pushdown in the same run.

    python benchmarks/bench_pushdown.py [--rows 5000000] [--minutes 50] [--window 20,25]
                                        [--repeat 3] [--label L]

Fills one stream of a private redis-server with ``--rows`` envelopes of the wire format (the
benchmarks' order event, about 411 bytes) whose IDs are set explicitly and spread evenly over
``--minutes`` (an entry every 0.6 ms for the defaults: ``ms = t0 + floor(i * 0.6)``, the
entries sharing a millisecond numbered 0, 1), written with ``redis-cli --pipe``. Then, on a
local[2] SparkSession with ``spark.sql.python.filterPushdown.enabled``, it times

    spark.read.format("atlasbus")...load()
        .where("timestamp >= '<t0 + 20 min>' and timestamp < '<t0 + 25 min>'").count()

with ``filterPushdown`` true and false, and the same window given as options instead
(``startingTimestamp``/``endingTimestamp``, ``filterPushdown=false``, no ``where``), in turn,
``--repeat`` times each, after one uncounted run of each (the JVM compiles the row
conversion, workers start).

While each query runs, MONITOR records the commands Redis runs. Entries read are counted from
them: each XRANGE/XREVRANGE returns the entries of its range up to its COUNT, and the
stream's IDs are known (it was filled with them), so no reply is read twice. The tasks'
pages (COUNT ``pageSize``, 1000) are reported apart from planning's (the walk that counts a
range of up to 500,000 entries to cut it into tasks, and single-entry lookups). Commands are
also counted from ``INFO commandstats``.

Prints a table, writes benchmarks/results/pushdown.json and draws pushdown.png beside it.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from envelope_stream import STREAM, STREAM_PREFIX, TOPIC
from run_report import benchmark_parser, chart_note, pyplot, save_chart, write_report

from atlasbus.sandbox.redis_monitor import CommandMonitor

RESULTS = Path(__file__).parent / "results" / "pushdown.json"
T0 = 1_767_261_600_000  # 2026-01-01 10:00:00 UTC
PAGE = 1000  # the tasks' XRANGE COUNT (pageSize's default)


def entry_ids(rows: int, minutes: int) -> tuple[np.ndarray, np.ndarray]:
    """The ms and seq of each entry: spread evenly over ``minutes``, in ID order."""
    ms = T0 + (np.arange(rows, dtype=np.int64) * (minutes * 60_000)) // rows
    seq = np.zeros(rows, dtype=np.int64)
    same = np.concatenate([[False], ms[1:] == ms[:-1]])
    # entries sharing a millisecond: 0, 1, 2 ... (runs are short: at most a few)
    for i in np.flatnonzero(same):
        seq[i] = seq[i - 1] + 1
    return ms, seq


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def fill(port: int, ms: np.ndarray, seq: np.ndarray) -> float:
    """XADD every entry with its ID through ``redis-cli --pipe``; returns entries a second."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise SystemExit("redis-cli is needed to fill the stream (apt-get install redis-tools)")
    head = b"*19\r\n" + _bulk(b"XADD") + _bulk(STREAM.encode())
    note = b"x" * 96
    tracing = _bulk(b"tracing") + _bulk(b'{"trace_id": "0123456789abcdef"}')
    rest = _bulk(b"metadata") + _bulk(b"{}") + _bulk(b"delivery_attempts") + _bulk(b"0")
    started = time.perf_counter()
    process = subprocess.Popen(
        [cli, "-p", str(port), "--pipe"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    assert process.stdin is not None
    chunk: list[bytes] = []
    for i, (m, s) in enumerate(zip(ms.tolist(), seq.tolist(), strict=True)):
        payload = (
            b'{"order_id": %d, "customer": "c-%d", "amount": %.2f, "currency": "EUR", '
            b'"items": [{"sku": "A-100", "qty": 2}, {"sku": "B-7", "qty": 1}], "note": "%s"}'
            % (i, i % 9973, i * 1.37 % 1000, note)
        )
        chunk.append(
            head
            + _bulk(b"%d-%d" % (m, s))
            + _bulk(b"topic")
            + _bulk(TOPIC.encode())
            + _bulk(b"priority")
            + _bulk(b"%d" % (i % 10))
            + _bulk(b"payload")
            + _bulk(payload)
            + _bulk(b"correlation_id")
            + _bulk(b"%032x" % i)
            + tracing
            + rest
            + _bulk(b"enqueued_time")
            + _bulk(b"%.3f" % (m / 1000))
        )
        if len(chunk) == 20_000:
            process.stdin.write(b"".join(chunk))
            chunk = []
    process.stdin.write(b"".join(chunk))
    process.stdin.close()
    if process.wait() != 0:
        raise SystemExit("redis-cli --pipe failed")
    return len(ms) / (time.perf_counter() - started)


def _key(text: str, *, exclusive_lower: bool = False) -> tuple[int, bool]:
    """An XRANGE bound as a sort key over ``ms * 2**20 + seq`` and whether it is exclusive."""
    if text in ("-", "+"):
        return (-1 if text == "-" else 2**62), False
    exclusive = text.startswith("(")
    ms_text, _, seq_text = text.lstrip("(").partition("-")
    seq = min(int(seq_text or 0), 2**20 - 1)
    return int(ms_text) * 2**20 + seq, exclusive


def entries_returned(parts: list[str], keys: np.ndarray) -> int:
    """Entries an XRANGE/XREVRANGE command returned, from the stream's known IDs."""
    command = parts[0].upper()
    count = int(parts[parts.index("COUNT") + 1]) if "COUNT" in parts else len(keys)
    low, high = (parts[2], parts[3]) if command == "XRANGE" else (parts[3], parts[2])
    low_key, low_open = _key(low)
    high_key, high_open = _key(high)
    start = np.searchsorted(keys, low_key, side="right" if low_open else "left")
    stop = np.searchsorted(keys, high_key, side="left" if high_open else "right")
    return int(min(count, max(0, stop - start)))


def xrange_calls(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("xrange", "xrevrange"))


def timed_read(
    spark: Any, url: str, where: str | None, options: dict[str, str], keys: np.ndarray
) -> dict[str, Any]:
    """One query's seconds, rows and the entries Redis returned to it."""
    import redis

    client = redis.Redis.from_url(url)
    reader = spark.read.format("atlasbus").option("url", url)
    reader = reader.option("streamPrefix", STREAM_PREFIX).option("topics", TOPIC)
    for key, value in options.items():
        reader = reader.option(key, value)
    frame = reader.load() if where is None else reader.load().where(where)
    calls_before = xrange_calls(client)
    with CommandMonitor(url) as monitor:
        started = time.perf_counter()
        rows = frame.count()
        seconds = time.perf_counter() - started
    calls = xrange_calls(client) - calls_before
    ranges = monitor.split("XRANGE", "XREVRANGE")
    tasks = [p for p in ranges if p[-2:] == ["COUNT", str(PAGE)]]
    planning = [p for p in ranges if p[-2:] != ["COUNT", str(PAGE)]]
    client.close()
    return {
        "seconds": seconds,
        "rows": rows,
        "entries_read_by_tasks": sum(entries_returned(p, keys) for p in tasks),
        "entries_read_by_planning": sum(entries_returned(p, keys) for p in planning),
        "xrange_calls": calls,
    }


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--minutes", type=int, default=50)
    parser.add_argument("--window", default="20,25", help="minutes from the start: first,end")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--label", default="pushdown")
    args = parser.parse_args()
    first_min, end_min = (int(x) for x in args.window.split(","))

    from atlasbus.sandbox.redis_server import RedisServer
    from pyspark_atlasbus.session import local_session

    load_before = os.getloadavg()
    ms, seq = entry_ids(args.rows, args.minutes)
    keys = ms * 2**20 + seq
    start = datetime.fromtimestamp(T0 / 1000, UTC) + timedelta(minutes=first_min)
    end = datetime.fromtimestamp(T0 / 1000, UTC) + timedelta(minutes=end_min)
    in_window = int(((ms >= T0 + first_min * 60_000) & (ms < T0 + end_min * 60_000)).sum())
    where = f"timestamp >= '{start:%Y-%m-%d %H:%M:%S}' and timestamp < '{end:%Y-%m-%d %H:%M:%S}'"
    with RedisServer() as server:
        fill_rate = fill(server.port, ms, seq)
        print(f"filled {args.rows:,} entries over {args.minutes} min at {fill_rate:,.0f}/s")
        spark = local_session(
            "bench-pushdown",
            delta=False,
            config={
                "spark.sql.session.timeZone": "UTC",
                "spark.sql.python.filterPushdown.enabled": "true",
            },
        )
        by_options = {
            "filterPushdown": "false",
            "startingTimestamp": str(T0 + first_min * 60_000),
            "endingTimestamp": str(T0 + end_min * 60_000),
        }
        reads: dict[str, tuple[str | None, dict[str, str]]] = {
            "pushdown": (where, {"filterPushdown": "true"}),
            "no pushdown": (where, {"filterPushdown": "false"}),
            "options": (None, by_options),
        }
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in reads}
        for warmup in (True, *([False] * args.repeat)):
            for name, (condition, options) in reads.items():
                run = timed_read(spark, server.url, condition, options, keys)
                if run["rows"] != in_window:
                    raise SystemExit(f"{name} counted {run['rows']} rows, expected {in_window}")
                if not warmup:
                    runs[name].append(run)
                print(f"  {'(warm-up) ' if warmup else ''}{name}: {run}")
        spark.stop()
    load_after = os.getloadavg()

    summary = {}
    print(f"\n{args.rows:,} entries over {args.minutes} min; window {where}: {in_window:,} rows")
    print(
        f"{'read':<13}{'median s':>10}{'best s':>9}{'task reads':>13}{'planning':>11}{'XRANGEs':>9}"
    )
    for name, measured in runs.items():
        seconds = [m["seconds"] for m in measured]
        last = measured[-1]
        summary[name] = {
            "median_s": statistics.median(seconds),
            "best_s": min(seconds),
            "seconds": seconds,
            "rows": last["rows"],
            "entries_read_by_tasks": last["entries_read_by_tasks"],
            "entries_read_by_planning": last["entries_read_by_planning"],
            "xrange_calls": last["xrange_calls"],
        }
        s = summary[name]
        print(
            f"{name:<13}{s['median_s']:>10.2f}{s['best_s']:>9.2f}"
            f"{s['entries_read_by_tasks']:>13,}{s['entries_read_by_planning']:>11,}"
            f"{s['xrange_calls']:>9,}"
        )
    ratio = summary["no pushdown"]["median_s"] / summary["pushdown"]["median_s"]
    by_options = summary["no pushdown"]["median_s"] / summary["options"]["median_s"]
    print(f"pushdown is {ratio:.1f}x faster (medians), the options window {by_options:.1f}x")
    report = {
        "label": args.label,
        "rows": args.rows,
        "minutes": args.minutes,
        "window": where,
        "rows_in_window": in_window,
        "fill_entries_per_s": fill_rate,
        "speedup_median": ratio,
        "options_speedup_median": by_options,
        "runs": summary,
    }
    write_report(RESULTS, report, load_before, load_after)
    chart(summary, RESULTS.with_suffix(".png"), args.rows, in_window)
    print(f"written to {RESULTS}{chart_note(RESULTS.with_suffix('.png'))}")


def chart(summary: dict[str, Any], path: Path, rows: int, in_window: int) -> None:
    plt = pyplot()
    if plt is None:
        return
    names = list(summary)
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    colors = ["tab:green", "tab:gray", "tab:blue"][: len(names)]
    left.bar(names, [summary[n]["median_s"] for n in names], color=colors)
    left.set_ylabel("seconds (median)")
    left.set_title("5-minute window: count()")
    reads = [summary[n]["entries_read_by_tasks"] for n in names]
    walks = [summary[n]["entries_read_by_planning"] for n in names]
    right.bar(names, reads, color=colors, label="read by tasks")
    right.bar(names, walks, bottom=reads, color="tab:orange", label="walked by planning")
    right.set_ylabel("entries Redis returned")
    right.set_title(f"of {rows:,} ({in_window:,} in the window)")
    right.legend(fontsize=8)
    save_chart(figure, path)


if __name__ == "__main__":
    main()
