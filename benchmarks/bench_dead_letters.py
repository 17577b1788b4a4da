"""Dead-letter appends: cost per append as the table grows, the old MERGE way against the new one.

    python benchmarks/bench_dead_letters.py --versions 10,100,500 --appends 15

Builds a dead-letter table (delta-rs, local disk) to each number of versions, one file of
dead letters per version as executors leave it, then copies it once per method and times
``--appends`` appends of one page's dead letters (``--letters``, source-decode letters of
about 420-byte envelopes) from that same state:

- ``merge``: what atlasbus did before: a Delta MERGE on ``dead_letter_id`` inserting the IDs the
  table lacks (kept here only, as the reference);
- ``append``: ``DeadLetterTable.append``: a plain Delta append made idempotent by an app
  transaction (checked with ``transaction_version`` first, recorded in the same commit);
- ``append, retried``: the same append again (a retried task): the app transaction is found
  and nothing is written.

Then two processes append ``--concurrent`` pages each at the same moment to a copy of the
largest table, per method, counting commit conflicts (each one a re-run of the write).

Prints a table, writes benchmarks/results/dead_letters.json and draws
benchmarks/results/dead_letters.png. Machines are shared and noisy: compare within one run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from run_report import benchmark_parser, pyplot, save_chart, write_report

from atlasbus.dead_letters import SOURCE_DECODE, DeadLetter, DeadLetterTable, QueryContext
from atlasbus.dead_letters.table import MAX_COMMIT_ATTEMPTS, _as_table

RESULTS = Path(__file__).parent / "results" / "dead_letters.json"
CHART = RESULTS.with_suffix(".png")
METHODS = ("merge", "append", "append, retried")


def page_letters(page: int, letters: int, *, query: str = "bench") -> list[DeadLetter]:
    """The dead letters of one decoded page: malformed envelopes of about 420 bytes."""
    at = datetime.now(UTC)
    out = []
    for j in range(letters):
        payload = json.dumps(
            {
                "order_id": page * 1000 + j,
                "customer": f"customer-{(page * 31 + j) % 9973}",
                "note": "événement ✓",
                "amount": round((page + j) * 0.37, 2),
                "items": [{"sku": f"SKU-{j % 997}", "qty": j % 5 + 1}],
            },
            ensure_ascii=False,
        )
        fields = {
            "topic": "orders",
            "priority": "high",  # the malformed part
            "payload": payload,
            "correlation_id": f"{page:016x}{j:016x}",
            "tracing": json.dumps({"trace_id": f"{page:032x}"}),
            "metadata": "{}",
            "delivery_attempts": "0",
            "enqueued_time": f"{time.time():.6f}",
        }
        out.append(
            DeadLetter.for_entry(
                SOURCE_DECODE,
                "invalid-integer",
                "field 'priority' must be a decimal integer, got 'high'",
                stream=f"atlas_bus:{query}",
                entry_id=f"{1_700_000_000_000 + page}-{j}",
                topic="orders",
                payload=payload,
                fields=fields,
                context=QueryContext(query, "bench", page),
                at=at,
            )
        )
    return out


# --- the old way, kept here only ---------------------------------------------------------------


def merge_append(uri: str, letters: list[DeadLetter], conflicts: list[str] | None = None) -> int:
    """atlasbus before: MERGE on dead_letter_id, inserting only new IDs, retried on conflict."""
    data = _as_table(letters)
    for number in range(1, MAX_COMMIT_ATTEMPTS + 1):
        try:
            metrics = (
                DeltaTable(uri)
                .merge(
                    data,
                    "t.dead_letter_id = s.dead_letter_id",
                    source_alias="s",
                    target_alias="t",
                )
                .when_not_matched_insert_all()
                .execute()
            )
            return int(metrics["num_target_rows_inserted"])
        except CommitFailedError as exc:
            if conflicts is not None:
                conflicts.append(str(exc))
            if number == MAX_COMMIT_ATTEMPTS:
                raise
            time.sleep(min(2.0, 0.02 * 2**number) * random.uniform(0.5, 1.0))
    raise AssertionError("unreachable")


def new_append(uri: str, letters: list[DeadLetter], app_id: str, version: int) -> int:
    return DeadLetterTable(uri).append(letters, app_id=app_id, version=version)


# --- measuring ----------------------------------------------------------------------------------


def build(uri: str, versions: int, letters: int, start: int) -> int:
    """Grow the table to ``versions`` versions with plain appends; returns the next page."""
    table = DeadLetterTable(uri)
    page = start
    while not table.exists() or table.version() < versions:
        table.append(page_letters(page, letters), app_id="bench/build", version=page)
        page += 1
    return page


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def measure(
    base: str, tmp: Path, versions: int, appends: int, letters: int, first_page: int
) -> list[dict[str, Any]]:
    rows = []
    for method in METHODS[:2]:
        copy = str(tmp / f"{method}-{versions}")
        shutil.copytree(base, copy)
        seconds, retried = [], []
        for k in range(appends):
            page = first_page + k
            batch = page_letters(page, letters)
            if method == "merge":
                seconds.append(timed(lambda b=batch, u=copy: merge_append(u, b)))
            else:
                app_id = f"bench/source-decode/{page}"
                seconds.append(timed(lambda b=batch, u=copy, a=app_id: new_append(u, b, a, 0)))
                retried.append(timed(lambda b=batch, u=copy, a=app_id: new_append(u, b, a, 0)))
        table = DeadLetterTable(copy)
        expected_rows = DeadLetterTable(base).to_arrow(all_rows=True).num_rows + appends * letters
        if table.to_arrow(all_rows=True).num_rows != expected_rows:
            raise RuntimeError(f"{method}: the table does not hold exactly the appended rows")
        rows.append(_row(method, versions, seconds))
        if retried:
            rows.append(_row("append, retried", versions, retried))
        shutil.rmtree(copy)
    return rows


def _row(method: str, versions: int, seconds: list[float]) -> dict[str, Any]:
    return {
        "method": method,
        "table_versions": versions,
        "appends": len(seconds),
        "median_ms": round(statistics.median(seconds) * 1000, 1),
        "p90_ms": round(sorted(seconds)[int(0.9 * (len(seconds) - 1))] * 1000, 1),
    }


def _concurrent_worker(
    method: str, uri: str, who: int, pages: int, letters: int, go: Any, q: Any
) -> None:
    import logging

    conflicts: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: (  # type: ignore[method-assign]
        conflicts.append(record.getMessage()) if "conflicted" in record.getMessage() else None
    )
    logger = logging.getLogger("atlasbus.dead_letters")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    batches = [
        page_letters(1_000_000 * (who + 1) + p, letters, query=f"w{who}") for p in range(pages)
    ]
    DeadLetterTable(uri).to_arrow("1 = 0")  # warm up: delta-rs's runtime, DataFusion
    go.get()  # start together
    failed = 0
    started = time.perf_counter()
    for page, batch in enumerate(batches):
        if method == "merge":
            try:
                merge_append(uri, batch, conflicts)
            except CommitFailedError:  # gave up after MAX_COMMIT_ATTEMPTS: the task would fail
                failed += 1
        else:
            new_append(uri, batch, f"w{who}/source-decode/0", page)
    q.put((time.perf_counter() - started, len(conflicts), failed))


def concurrent(base: str, tmp: Path, pages: int, letters: int) -> list[dict[str, Any]]:
    rows = []
    context = multiprocessing.get_context("spawn")
    for method in METHODS[:2]:
        copy = str(tmp / f"concurrent-{method}")
        shutil.copytree(base, copy)
        before = DeadLetterTable(copy).to_arrow(all_rows=True).num_rows
        start, done = context.Queue(), context.Queue()
        workers = [
            context.Process(
                target=_concurrent_worker, args=(method, copy, who, pages, letters, start, done)
            )
            for who in range(2)
        ]
        for worker in workers:
            worker.start()
        time.sleep(3)  # imports and page building done
        for _ in workers:
            start.put(None)
        results = [done.get(timeout=600) for _ in workers]
        for worker in workers:
            worker.join()
        after = DeadLetterTable(copy).to_arrow(all_rows=True).num_rows
        failed = sum(f for _, _, f in results)
        if after - before != (2 * pages - failed) * letters:
            raise RuntimeError(f"{method}: {after - before} rows added, expected more or fewer")
        seconds = max(s for s, _, _ in results)
        rows.append(
            {
                "method": method,
                "writers": 2,
                "pages_each": pages,
                "seconds": round(seconds, 2),
                "ms_per_append": round(seconds / pages * 1000, 1),
                "conflicts": sum(c for _, c, _ in results),
                "gave_up": failed,
            }
        )
        shutil.rmtree(copy)
    return rows


def chart(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return

    fig, ax = plt.subplots(figsize=(7, 4))
    for method, style in zip(METHODS, ("o-", "s-", "^--"), strict=True):
        points = sorted(
            (r["table_versions"], r["median_ms"]) for r in rows if r["method"] == method
        )
        ax.plot([p[0] for p in points], [p[1] for p in points], style, label=method)
    ax.set_xlabel("table versions when appending")
    ax.set_ylabel("median ms per append")
    ax.set_title("Dead-letter append cost as the table grows")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    save_chart(fig, path)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--versions", default="10,100,500", help="table sizes, in versions")
    parser.add_argument("--appends", type=int, default=15, help="timed appends per size/method")
    parser.add_argument("--letters", type=int, default=5, help="dead letters per append")
    parser.add_argument("--concurrent", type=int, default=20, help="pages per concurrent writer")
    args = parser.parse_args()
    sizes = sorted(int(v) for v in args.versions.split(","))
    load_before = os.getloadavg()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="atlasbus-bench-dlq-") as tmp_name:
        tmp = Path(tmp_name)
        base = str(tmp / "base")
        page = 0
        for versions in sizes:
            page = build(base, versions, args.letters, page)
            print(f"table at {versions} versions ({page} pages)", flush=True)
            rows += measure(base, tmp, versions, args.appends, args.letters, 10_000_000 + page)
            for row in rows[-3:]:
                print(f"  {row['method']:<16} {row['median_ms']:>8.1f} ms median", flush=True)
        print(f"two writers at once, {args.concurrent} pages each, table at {sizes[-1]} versions")
        concurrency = concurrent(base, tmp, args.concurrent, args.letters)

    print()
    print(f"{'method':<18} " + " ".join(f"{f'{v} versions':>14}" for v in sizes))
    for method in METHODS:
        cells = []
        for versions in sizes:
            (row,) = [r for r in rows if r["method"] == method and r["table_versions"] == versions]
            cells.append(f"{row['median_ms']:>11.1f} ms")
        print(f"{method:<18} " + " ".join(cells))
    print()
    print(f"{'two writers at once':<18} {'ms/append':>10} {'conflicts':>10} {'gave up':>8}")
    for row in concurrency:
        print(
            f"{row['method']:<18} {row['ms_per_append']:>10.1f} {row['conflicts']:>10} "
            f"{row['gave_up']:>8}"
        )
    growth = {}
    for method in METHODS:
        ordered = [r for r in rows if r["method"] == method]
        growth[method] = round(ordered[-1]["median_ms"] / ordered[0]["median_ms"], 2)
    print()
    print(f"cost at {sizes[-1]} versions / at {sizes[0]}: {growth}")

    report = {
        "benchmark": "dead-letters",
        "versions": {"deltalake": deltalake.__version__, "pyarrow": pa.__version__},
        "results": rows,
        "growth_last_over_first": growth,
        "two_writers_at_once": concurrency,
    }
    write_report(RESULTS, report, load_before, os.getloadavg())
    chart(rows, CHART)
    print(f"\nwritten to {RESULTS} and {CHART}")


if __name__ == "__main__":
    main()
