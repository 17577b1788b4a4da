"""The compiled kernels against the pure path, end to end, side by side in one run.

    python benchmarks/bench_kernels.py [--rows 1000000 5000000] [--repeat 3]

For each stream length, publishes that many envelopes (8 fields, about 424 bytes) to one
stream of a private redis-server, then reads it with ``readStream.format("atlasbus")`` into
the noop sink (``trigger(availableNow=True)``, ``local[2]``) in two Spark sessions, each in a
process of its own: one with the compiled kernels (numba), one on the pure path
(``NUMBA_DISABLE_JIT=1``: hiredis parses the replies, and the list decoder decodes them). The
two sessions' queries take turns, ``--repeat`` each; the best of each is compared. Beside
them, atlasbus's range reader alone (no Spark), once per path, in a process of its own.

Whether numba stays a dependency follows from this: it does while the end-to-end gain is
above 10% (docs/benchmarks.md). Prints a table and writes benchmarks/results/kernels.json
and kernels.png.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from envelope_stream import STREAM, STREAM_PREFIX, TOPIC, publish
from run_report import benchmark_parser, chart_note, pyplot, save_chart, write_report
from session_process import SparkSessionProcess

RESULTS = Path(__file__).parent / "results" / "kernels.json"
PATHS = {"compiled (numba)": {}, "pure (hiredis)": {"NUMBA_DISABLE_JIT": "1"}}

READER_ALONE = f"""
import json, sys, time
from atlasbus.decoding.kernels.selection import compiled_kernels_usable
from atlasbus.model.entry_id import ZERO, EntryId
from atlasbus.planning.batch_plan import ReadRange
from atlasbus.reading.range_reader import read_range
from atlasbus.options.source import parse_source_options

options = parse_source_options(
    {{"url": sys.argv[1], "streamPrefix": "{STREAM_PREFIX}", "topics": "{TOPIC}"}}
)
compiled_kernels_usable()  # numba's import and the kernels' loading: not the reading
cpu, wall = time.process_time(), time.perf_counter()
whole = ReadRange("{STREAM}", "{TOPIC}", ZERO, EntryId(2**63, 0))
rows = sum(batch.num_rows for batch in read_range(options, whole))
print(json.dumps({{"rows": rows, "seconds": time.perf_counter() - wall,
                  "cpu_s": time.process_time() - cpu, "compiled": compiled_kernels_usable()}}))
"""


def reader_alone(url: str, environment: dict[str, str]) -> dict[str, Any]:
    """atlasbus's reader over the whole stream in a fresh process with ``environment``."""
    env = {**os.environ, **environment}
    if not environment:
        env.pop("NUMBA_DISABLE_JIT", None)
    done = subprocess.run(
        [sys.executable, "-c", READER_ALONE, url], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"the reader alone failed:\n{done.stderr}")
    figures: dict[str, Any] = json.loads(done.stdout)
    return figures


def measure(url: str, rows: int, repeat: int, logs: Path) -> dict[str, Any]:
    """Both paths on a stream of ``rows`` envelopes: end to end (best of ``repeat``), and the
    reader alone."""
    rate = publish(url, rows)
    print(f"published {rows:,} envelopes ({rate:,.0f}/s)", flush=True)
    sessions = {
        path: SparkSessionProcess(
            url, rows, None, logs / f"kernels-{index}-{rows}.log", environment=environment
        )
        for index, (path, environment) in enumerate(PATHS.items())
    }
    runs: dict[str, list[dict[str, Any]]] = {path: [] for path in PATHS}
    try:
        for path in PATHS:  # once first, uncounted: the JVM compiles the row conversion
            sessions[path].run("atlasbus")
        for _ in range(repeat):
            for path in PATHS:
                runs[path].append(sessions[path].run("atlasbus"))
                print(f"  {path}: {rows / runs[path][-1]['seconds']:,.0f} entries/s", flush=True)
    finally:
        for session in sessions.values():
            session.close()
    figures: dict[str, Any] = {}
    for path, environment in PATHS.items():
        best = min(runs[path], key=lambda run: run["seconds"])
        alone = reader_alone(url, environment)
        if alone["rows"] != rows:
            raise SystemExit(f"the reader alone read {alone['rows']} of {rows}")
        figures[path] = {
            "end_to_end_entries_per_s": rows / best["seconds"],
            "end_to_end_runs_s": [run["seconds"] for run in runs[path]],
            "add_batch_s": best["add_batch_s"],
            "reader_alone_entries_per_s": rows / alone["seconds"],
            "reader_alone_cpu_s": alone["cpu_s"],
            "compiled": alone["compiled"],
        }
    compiled, pure = (figures[path] for path in PATHS)
    figures["gain"] = {
        "end_to_end": compiled["end_to_end_entries_per_s"] / pure["end_to_end_entries_per_s"] - 1,
        "reader_alone": compiled["reader_alone_entries_per_s"] / pure["reader_alone_entries_per_s"]
        - 1,
    }
    return figures


def print_table(report: dict[str, Any]) -> None:
    print(f"\n{'entries':>10}  {'path':<18} {'end to end /s':>14} {'reader alone /s':>16}")
    for rows, figures in report["runs"].items():
        for path in PATHS:
            one = figures[path]
            print(
                f"{int(rows):>10,}  {path:<18} {one['end_to_end_entries_per_s']:>14,.0f} "
                f"{one['reader_alone_entries_per_s']:>16,.0f}"
            )
        gain = figures["gain"]
        print(
            f"{'':>10}  {'compiled gain':<18} {gain['end_to_end']:>14.0%} "
            f"{gain['reader_alone']:>16.0%}"
        )


def chart(report: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    figure, axes = plt.subplots(figsize=(7, 3.6))
    lengths = list(report["runs"])
    width = 0.38
    for offset, name in enumerate(PATHS):
        values = [report["runs"][rows][name]["end_to_end_entries_per_s"] for rows in lengths]
        positions = [index + (offset - 0.5) * width for index in range(len(lengths))]
        axes.bar(positions, values, width, label=name)
    axes.set_xticks(range(len(lengths)), [f"{int(rows):,} entries" for rows in lengths])
    axes.set_ylabel("entries / s, end to end")
    axes.set_title("format('atlasbus') into noop, local[2]: compiled kernels vs pure path")
    axes.legend()
    save_chart(figure, path)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from atlasbus.sandbox.redis_server import RedisServer

    load_before = os.getloadavg()
    report: dict[str, Any] = {"runs": {}}
    logs = Path(tempfile.mkdtemp(prefix="atlasbus-bench-kernels-"))
    with RedisServer() as server:
        for rows in args.rows:
            report["runs"][str(rows)] = measure(server.url, rows, args.repeat, logs)
    print_table(report)
    write_report(RESULTS, report, load_before, os.getloadavg())
    chart(report, RESULTS.with_suffix(".png"))
    print(f"\nwrote {RESULTS}{chart_note(RESULTS.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
