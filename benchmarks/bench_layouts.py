"""A stream whose entries do not all share one field layout: the reader's CPU per entry.

    python benchmarks/bench_layouts.py [--rows 200000] [--every 5000] [--repeat 3] [--label L]

Publishers omit optional fields now and then, and streams read with ``format=raw`` may hold whatever
their producers write. A reply whose entries share one field layout is cut into a column per field;
any other reply is cut into names and values, from which the envelope decoder picks its fields by
name; ``format=raw`` cuts every reply into names and values. This measures what that costs the core
reader, without Spark, on one private redis-server holding three streams of --rows envelopes
(envelope_stream.py's): one where every entry has all 8 fields ("uniform"), one where one entry in
--every lacks ``correlation_id`` ("mixed"), and one where each entry is one of five layouts in turn
("varied": all fields; without ``correlation_id``; without ``tracing``; with an extra field; the
fields in another order). Each is read whole in one process by
``atlasbus.reading.range_reader.read_range``, with ``format=envelope`` and ``format=raw``, --repeat
rounds, the readings alternating; reports the best CPU µs per entry of each and each stream's over
the uniform one's. Writes benchmarks/results/layouts.json (layouts-L.json with --label) and the
chart beside it.

It also times, in the same process, ``atlasbus.decoding.kernels.pick_fields.field_columns`` alone
(picking the decoder's fields by name out of a page of names and values) on a 10,000-entry page of
each stream's envelopes: the part of the reader's work that depends on the layouts, measured without
Redis's noise (best of 9 rounds of 20 calls, ns an entry).
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from envelope_stream import envelope
from installed_bytecode import compile_atlasbus
from run_report import benchmark_parser, pyplot, save_chart, write_report

RESULTS = Path(__file__).parent / "results" / "layouts.json"
STREAMS = {
    "uniform": "bench:layouts:uniform",
    "mixed": "bench:layouts:mixed",
    "varied": "bench:layouts:varied",
}
FORMATS = ("envelope", "raw")


def publish(url: str, stream: str, rows: int, every: int, *, varied: bool = False) -> None:
    """``rows`` envelopes; with ``every``, one in that many without ``correlation_id``; with
    ``varied``, each of the five layouts in turn."""
    import redis

    client = redis.Redis.from_url(url)
    client.delete(stream)
    for offset in range(0, rows, 2000):
        pipe = client.pipeline(transaction=False)
        for index in range(offset, min(offset + 2000, rows)):
            fields = envelope(index)
            if every and index % every == every // 2:
                del fields["correlation_id"]
            if varied:
                fields = _varied(fields, index % 5)
            pipe.xadd(stream, fields)
        pipe.execute()


def _varied(fields: dict[str, Any], layout: int) -> dict[str, Any]:
    if layout == 1:
        del fields["correlation_id"]
    elif layout == 2:
        del fields["tracing"]
    elif layout == 3:
        fields["source"] = "bench"
    elif layout == 4:
        fields = dict(reversed(fields.items()))
    return fields


def read_whole(url: str, stream: str, data_format: str) -> tuple[int, float]:
    """The whole stream through the core reader: (rows, CPU seconds)."""
    from atlasbus.model.entry_id import EntryId
    from atlasbus.options.source import parse_source_options
    from atlasbus.planning.batch_plan import ReadRange
    from atlasbus.reading.range_reader import read_range

    options = parse_source_options({"url": url, "streams": stream, "format": data_format})
    whole = ReadRange(stream, stream, EntryId(0, 0), EntryId(2**63, 0))
    started = time.process_time()
    rows = sum(batch.num_rows for batch in read_range(options, whole))
    return rows, time.process_time() - started


def pick_fields_ns(kind: str, every: int, entries: int = 10_000) -> float:
    """CPU ns an entry that ``field_columns`` takes on a page of ``kind``'s envelopes."""
    import numpy as np
    import pyarrow as pa

    from atlasbus.decoding.cut_pages import PairPage
    from atlasbus.decoding.decoder import _DECODED_FIELDS
    from atlasbus.decoding.kernels.pick_fields import field_columns

    pages: list[list[tuple[bytes, bytes]]] = []
    for index in range(entries):
        fields = envelope(index)
        if kind == "mixed" and index % every == every // 2:
            del fields["correlation_id"]
        if kind == "varied":
            fields = _varied(fields, index % 5)
        pages.append([(name.encode(), value.encode()) for name, value in fields.items()])
    counts = np.cumsum([0] + [len(fields) for fields in pages], dtype=np.int32)
    page = PairPage(
        pa.array([b"%d-0" % index for index in range(entries)], pa.binary()),
        pa.array(counts, pa.int32()),
        pa.array([name for fields in pages for name, _ in fields], pa.binary()),
        pa.array([value for fields in pages for _, value in fields], pa.binary()),
    )
    names = list(_DECODED_FIELDS)
    best = math.inf
    for _ in range(9):
        started = time.process_time()
        for _ in range(20):
            field_columns(page, names)
        best = min(best, (time.process_time() - started) / 20 / entries * 1e9)
    return best


def main() -> None:
    compile_atlasbus()
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--every", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--label", help="writes layouts-LABEL.json")
    args = parser.parse_args()

    from atlasbus.sandbox.redis_server import RedisServer

    server = RedisServer().start()
    try:
        publish(server.url, STREAMS["uniform"], args.rows, 0)
        publish(server.url, STREAMS["mixed"], args.rows, args.every)
        publish(server.url, STREAMS["varied"], args.rows, 0, varied=True)
        load_before = os.getloadavg()
        for data_format in FORMATS:  # numba's code loaded, the caches warm
            read_whole(server.url, STREAMS["uniform"], data_format)
        micros: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            for data_format in FORMATS:
                for kind, stream in STREAMS.items():
                    rows, cpu = read_whole(server.url, stream, data_format)
                    if rows != args.rows:
                        raise SystemExit(f"{stream}: read {rows:,} entries of {args.rows:,}")
                    micros.setdefault(f"{data_format}, {kind}", []).append(cpu / rows * 1e6)
        load_after = os.getloadavg()
    finally:
        server.stop()

    picking = {kind: round(pick_fields_ns(kind, args.every), 1) for kind in STREAMS}
    best = {name: min(values) for name, values in micros.items()}
    over_uniform = {
        f"{data_format}, {kind}": round(
            best[f"{data_format}, {kind}"] / best[f"{data_format}, uniform"], 2
        )
        for data_format in FORMATS
        for kind in ("mixed", "varied")
    }
    print(f"\n{'core reader, one process':<34}{'best µs/entry':>15}{'all rounds':>28}")
    for name, value in best.items():
        rounds = ", ".join(f"{v:.2f}" for v in micros[name])
        print(f"{name:<34}{value:>15.2f}{rounds:>28}")
    print(f"over uniform, best rounds: {over_uniform}")
    print(f"field_columns alone, CPU ns an entry of a 10,000-entry page: {picking}")
    results = RESULTS.with_name(f"layouts-{args.label}.json") if args.label else RESULTS
    report: dict[str, Any] = {
        "benchmark": "layouts",
        "rows": args.rows,
        "one_entry_without_correlation_id_in": args.every,
        "best_cpu_us_per_entry": {k: round(v, 3) for k, v in best.items()},
        "all_rounds_cpu_us_per_entry": {k: [round(v, 3) for v in vs] for k, vs in micros.items()},
        "over_uniform": over_uniform,
        "field_columns_ns_per_entry": picking,
    }
    write_report(results, report, load_before, load_after)
    chart(best, args.every, results.with_suffix(".png"))
    print(f"results in {results}")


def chart(best: dict[str, float], every: int, path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    figure, axes = plt.subplots(figsize=(7, 3.6))
    names = list(best)
    axes.barh(range(len(names)), [best[n] for n in names], color="tab:blue")
    axes.set_yticks(range(len(names)), names, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("core reader, CPU µs per entry (best round)")
    axes.set_title(
        f"one layout; one in {every:,} without a field; five layouts in turn", fontsize=9
    )
    save_chart(figure, path)


if __name__ == "__main__":
    main()
