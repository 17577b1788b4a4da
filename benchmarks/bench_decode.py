"""Where a reader's CPU goes: CPU ns an entry of each step, this checkout against another.

    python benchmarks/bench_decode.py [--against DIR] [--rounds 5] [--label L]

A micro-batch's replies are received (``XrangePages``: each XRANGE sent, its reply read off the
socket and walked), cut into columns (``KeptReplies.cut``) and decoded
(``atlasbus.decoding.decoder.decode_envelope_page``). This times the three, the receiving's parts
and each column's share of the decoding, on a hand-over of 10 XRANGE pages of 1,000 of
envelope_stream.py's envelopes from a private redis-server, in one process without Spark: the steps
the reader's CPU per entry is made of, without Spark's noise. The receiving is timed on this thread
(in a query it runs on a thread of its own); its parts are the thread's CPU in each call, the
kernel's included (on a loopback socket, sending also runs the server's side of the receive). The
payload's JSON check (``json_object_texts``) is also timed alone.

This checkout's ``connector`` directory is measured, not the installed atlasbus. With
``--against DIR`` (another checkout's ``connector`` directory, e.g. from
``git archive OLD connector | tar -x -C /tmp/old``) the same is measured importing that
one, each in a process of its own, the two alternating round by round on the same server;
the table gives both and this checkout's share of the other's. Each figure is the best of
--rounds processes, each the best of 30 calls. Writes benchmarks/results/decode.json
(decode-L.json with --label) and the chart beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from envelope_stream import STREAM, publish
from run_report import benchmark_parser, pyplot, save_chart, write_report

RESULTS = Path(__file__).parent / "results" / "decode.json"
CONNECTOR = Path(__file__).parent.parent / "connector"  # this checkout's
PAGES, PAGE_SIZE = 10, 1_000
ENTRIES = PAGES * PAGE_SIZE
CALLS = 30
# atlasbus.decoding.decoder's functions that decode one column each (those a checkout has are
# timed).
COLUMN_STEPS = (
    "_payload_column",
    "_map_column",
    "_int_column",
    "_time_column",
    "_text_column",
    "_timestamps_of",
)
# The receiving's parts: (where the function lies, its name); timed where a checkout has it.
RECEIVING_STEPS = {
    "XRANGE sent (redis-py, kernel)": ("pages", "send"),
    "socket read (recv_into)": ("pages", "_receive"),
    "replies walked (compiled)": ("module", "walk_reply"),
}


def measure(url: str) -> dict[str, float]:
    """In the measuring process: best CPU ns an entry of each step, over ``CALLS`` calls."""
    import redis

    from atlasbus.decoding import decoder as decode
    from atlasbus.decoding.kernels.json_objects import json_object_texts
    from atlasbus.reading import reply_receiver as xrange_pages

    pages = xrange_pages.XrangePages(redis.Redis.from_url(url).connection_pool.get_connection())

    def handed_over() -> Any:
        start: bytes | str = "-"
        received = []
        for _ in range(PAGES):
            pages.send("XRANGE", STREAM, start, "+", "COUNT", PAGE_SIZE)
            page = pages.read()
            received.append(page)
            start = b"(" + pages.last_id(page)
        return pages.hand_over(received)

    spent: dict[str, int] = {}

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time_ns()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0) + time.thread_time_ns() - started

        return step

    for name in COLUMN_STEPS:
        if hasattr(decode, name):
            setattr(decode, name, timed(name, getattr(decode, name)))
    for name, (owner, attribute) in RECEIVING_STEPS.items():
        target = pages if owner == "pages" else xrange_pages
        if hasattr(target, attribute):
            setattr(target, attribute, timed(name, getattr(target, attribute)))
    best: dict[str, float] = {}

    def keep(name: str, nanoseconds: int) -> None:
        best[name] = min(best.get(name, float("inf")), nanoseconds / ENTRIES)

    for _ in range(CALLS):
        spent.clear()
        started = time.thread_time_ns()
        kept = handed_over()
        keep("received (sent, read, walked)", time.thread_time_ns() - started)
        for name in RECEIVING_STEPS:
            if name in spent:
                keep(f"  {name}", spent[name])
        started = time.thread_time_ns()
        (part,) = kept.cut()
        keep("cut into columns", time.thread_time_ns() - started)
        spent.clear()
        started = time.thread_time_ns()
        page = decode.decode_envelope_page(
            part, topic="orders", stream=STREAM, include_raw_fields=False
        )
        keep("decoded (all columns)", time.thread_time_ns() - started)
        if page.batch.num_rows != ENTRIES or page.reasons is not None:
            raise SystemExit(f"decoded {page.batch.num_rows:,} rows, reasons {page.reasons}")
        for name, nanoseconds in spent.items():
            keep(f"  {name}", nanoseconds)
        payloads = part.columns[b"payload"]
        started = time.thread_time_ns()
        json_object_texts(payloads)
        keep("payload JSON check alone", time.thread_time_ns() - started)
    return best


def measured_in_process(url: str, connector: str) -> dict[str, float]:
    """``measure`` in a fresh Python importing atlasbus from ``connector``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [connector, env.get("PYTHONPATH")]))
    command = [sys.executable, __file__, "--measure", url]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(output.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--against", help="another checkout's connector directory")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--label", help="writes decode-LABEL.json")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the measuring process's URL
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return

    from atlasbus.sandbox.redis_server import RedisServer

    server = RedisServer().start()
    versions = {"this checkout": str(CONNECTOR)}
    if args.against:
        versions["against"] = args.against
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
    try:
        publish(server.url, ENTRIES)
        load_before = os.getloadavg()
        for _ in range(args.rounds):
            for name, connector in versions.items():
                rounds[name].append(measured_in_process(server.url, connector))
        load_after = os.getloadavg()
    finally:
        server.stop()

    steps = list(dict.fromkeys(step for found in rounds.values() for step in found[0]))
    best = {
        name: {step: round(min(r.get(step, float("inf")) for r in found), 1) for step in steps}
        for name, found in rounds.items()
    }
    header = f"{'CPU ns an entry, best':<30}" + "".join(f"{name:>16}" for name in versions)
    print(f"\n{header}{'ratio' if args.against else '':>8}")
    for step in steps:
        figures = [best[name][step] for name in versions]
        ratio = f"{figures[0] / figures[1]:>8.2f}" if args.against else ""
        print(f"{step:<30}" + "".join(f"{figure:>16.1f}" for figure in figures) + ratio)
    results = RESULTS.with_name(f"decode-{args.label}.json") if args.label else RESULTS
    report: dict[str, Any] = {
        "benchmark": "decode",
        "entries_a_hand_over": ENTRIES,
        "against": args.against,
        "best_cpu_ns_per_entry": best,
        "all_rounds_cpu_ns_per_entry": rounds,
    }
    write_report(results, report, load_before, load_after)
    chart(best, steps, results.with_suffix(".png"))
    print(f"results in {results}")


def chart(best: dict[str, dict[str, float]], steps: list[str], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    figure, axes = plt.subplots(figsize=(7, 4.4))
    height = 0.8 / len(best)
    for index, (name, figures) in enumerate(best.items()):
        positions = [row + index * height for row in range(len(steps))]
        axes.barh(positions, [figures[step] for step in steps], height, label=name)
    axes.set_yticks([row + 0.4 - height / 2 for row in range(len(steps))])
    axes.set_yticklabels([step.strip() for step in steps])
    axes.invert_yaxis()
    axes.set_xlabel("CPU ns an entry (best)")
    axes.set_title(f"{ENTRIES:,} envelopes received, cut and decoded")
    axes.legend()
    save_chart(figure, path, dpi=120)


if __name__ == "__main__":
    main()
