"""``atlasbus dlq show | summary | replay | sweep | compact``: the dead-letter table, by terminal.

Reads and writes the table with delta-rs and pandas; never starts Spark or a JVM, which is why it
lives in the core (``atlasbus.cli`` only registers it). ``replay`` is
``atlasbus.dead_letters.replay_dead_letters``: it claims the dead letters in the table before
publishing them, so two runs at once publish each one once (docs/dead-letters.md, Replay). ``sweep``
is ``atlasbus.operations.reaper.sweep_retry_exhausted``: a consumer group's entries pending past a
delivery count and an idle time become ``retry-exhausted`` dead letters, then are acknowledged.

What the command line prints names its flags (``--url``, ``--table``, ``--again``), not the
Python arguments or Spark options the core's messages name: see ``cli_common.CLI_NAMES``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from atlasbus.cli.common import (
    HelpFormatter,
    add_bus_flags,
    cell,
    duration,
    endpoint_from_flag,
    format_table,
    guarded,
    non_empty,
    positive,
    subscription_from_flags,
)
from atlasbus.cli.compact import add_compact
from atlasbus.errors import AtlasbusError, ConfigurationError
from atlasbus.options.keys import DEFAULT_STREAM_PREFIX, DEFAULT_SWEEP_MIN_IDLE_MS
from atlasbus.options.source import SweepPolicy

if TYPE_CHECKING:  # loaded when a command runs: delta-rs and Arrow cost 0.4 s to import
    from atlasbus.dead_letters import ReplayResult
    from atlasbus.operations.reaper import SweepResult

SHOW_COLUMNS = (
    "dead_letter_id",
    "dead_lettered_at",
    "stage",
    "reason",
    "topic",
    "entry_id",
    "error",
)
# Shown on a line of their own under each row, not in a column: long text that would make the
# table wider than a terminal.
TEXT_COLUMNS = ("error", "payload", "fields")
SHOW_WIDTH = 100  # a terminal's columns, unless --width or --full
REFUSALS_LISTED = 10  # of a replay's refusals; the rest are counted
# ``DeadLetterTable.summary``'s grouping too (tests/test_cli_start.py holds them equal); named
# here so that ``--help`` need not load the table's module
SUMMARY_BY = ("topic", "stage", "reason")
ID_WIDTH = 12
CELL_WIDTH = 48
SHOW_CELL_WIDTH = 30  # a table cell of dlq show: the row fits --width's default

WHERE_HELP = (
    "a SQL condition over the table's columns, e.g. \"stage = 'sink-publish' AND topic = "
    "'orders'\" or \"dead_lettered_at > '2024-05-01'\""
)
AGAIN = "use --again"
"""How the command line says ``again=True`` in a refusal (``Refused.explain``)."""


def register(subparsers: Any) -> None:
    """Add the ``dlq`` command group to the ``atlasbus`` command line."""
    dlq = subparsers.add_parser(
        "dlq",
        formatter_class=HelpFormatter,
        help="inspect and replay the dead-letter table; sweep retry-exhausted entries into it",
        description="Inspect and replay an atlasbus dead-letter table (a Delta table), and "
        "sweep a consumer group's retry-exhausted entries into it. Uses delta-rs; starts no "
        "Spark.",
    )
    commands = dlq.add_subparsers(dest="dlq_command", metavar="SUBCOMMAND", required=True)

    show = commands.add_parser(
        "show",
        formatter_class=HelpFormatter,
        help="list dead letters, newest first",
        description="List dead letters, newest first, as a table 100 columns wide (--width "
        "for another width), each row's error on a line of its own under it. Long values are "
        "cut in the middle, keeping how they begin and end (the value an error quotes is at "
        "its end); --full cuts nothing.",
    )
    _common(show)
    show.add_argument("--limit", type=positive, default=20, help="rows to show (default 20)")
    show.add_argument(
        "--columns",
        default=",".join(SHOW_COLUMNS),
        help=f"comma-separated columns to show (default {', '.join(SHOW_COLUMNS)}); "
        f"{', '.join(TEXT_COLUMNS)} go on a line of their own under each row",
    )
    show.add_argument(
        "--width",
        type=positive,
        default=SHOW_WIDTH,
        help=f"the terminal's columns: long values are cut to fit (default {SHOW_WIDTH})",
    )
    show.add_argument("--full", action="store_true", help="do not cut long values")
    show.set_defaults(run=run_show)

    summary = commands.add_parser(
        "summary",
        formatter_class=HelpFormatter,
        help="count dead letters per group",
        description="Count dead letters per group (default: topic, stage, reason), with the "
        "first and last time one was recorded.",
    )
    _common(summary)
    summary.add_argument(
        "--by",
        default=",".join(SUMMARY_BY),
        help=f"comma-separated columns to group by (default {', '.join(SUMMARY_BY)}; an empty "
        "list counts them all together)",
    )
    summary.add_argument(
        "--freq",
        type=_frequency,
        help="also group by time window: a fixed pandas frequency such as 1h, 15min, 1D",
    )
    summary.set_defaults(run=run_summary)

    replay = commands.add_parser(
        "replay",
        formatter_class=HelpFormatter,
        help="re-publish dead letters to their topics",
        description="Re-publish the chosen dead letters to {stream-prefix}:{topic} in the wire "
        "format, with delivery_attempts one higher, and record replay_count, last_replayed_at "
        "and last_replay_entry_id in the table. Each dead letter is first claimed in the table "
        "(a conditional Delta MERGE), so runs started at the same time publish it once between "
        "them. Dead letters already replayed, or claimed by another run, are refused unless "
        "--again. Exit status 1 when a chosen dead letter was not replayed.",
    )
    _common(replay)
    replay.add_argument(
        "--limit",
        type=positive,
        help="replay at most this many, oldest first; dead letters refused (replayed before, "
        "nothing to publish) do not count",
    )
    add_bus_flags(
        replay,
        url_help="Redis URL to publish to (default $REDIS_URL, else redis://localhost:6379/0)",
        prefix_help=f"publish to {{prefix}}:{{topic}} (default {DEFAULT_STREAM_PREFIX})",
    )
    replay.add_argument(
        "--again", action="store_true", help="also replay dead letters replayed before"
    )
    replay.add_argument(
        "--dry-run", action="store_true", help="say what would be replayed; publish nothing"
    )
    replay.set_defaults(run=run_replay)

    sweep = commands.add_parser(
        "sweep",
        formatter_class=HelpFormatter,
        help="dead-letter a consumer group's retry-exhausted entries, then acknowledge them",
        description="Find the entries of consumer group --group pending for at least "
        "--min-idle and delivered at least --max-deliveries times; write each to the "
        "dead-letter table (stage retry-exhausted, the raw entry in fields), then acknowledge "
        "it (XACK), and delete it from its stream (XDEL) with --delete. Entries pending but "
        "not exhausted are not touched. A run killed at any point and run again records each "
        "entry once and loses none. Needs Redis 6.2 or later.",
    )
    sweep.add_argument(
        "--table",
        type=non_empty,
        required=True,
        help="the dead-letter table: a path or a delta-rs URI (created if missing)",
    )
    sweep.add_argument("--group", type=non_empty, required=True, help="the consumer group")
    sweep.add_argument(
        "--max-deliveries",
        type=positive,
        required=True,
        help="deliveries after which a pending entry is given up on (the handlers' retry "
        "limit, e.g. 3)",
    )
    sweep.add_argument(
        "--min-idle",
        type=duration,
        default=DEFAULT_SWEEP_MIN_IDLE_MS,
        help="how long an entry must have been pending since its last delivery: 500ms, 2s, "
        "15m, 1h, 1d; a bare number is milliseconds (default 60s)",
    )
    sweep.add_argument(
        "--delete", action="store_true", help="also delete swept entries from their stream"
    )
    add_bus_flags(
        sweep, topics_help="comma-separated topics to sweep (default: every stream {prefix}:*)"
    )
    sweep.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would be swept; write, acknowledge and delete nothing",
    )
    sweep.set_defaults(run=run_sweep)
    add_compact(commands, _guard)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--table",
        type=non_empty,
        required=True,
        help="the dead-letter table: a path or a delta-rs URI",
    )
    parser.add_argument("--where", type=non_empty, help=WHERE_HELP)


def _frequency(text: str) -> str:
    """A pandas frequency of fixed length (``dt.floor`` takes no months or years)."""
    pd: Any = importlib.import_module("pandas")  # untyped for mypy; summary() uses it anyway

    try:
        with warnings.catch_warnings():  # pandas' deprecation notes on aliases such as "M"
            warnings.simplefilter("ignore")
            span = pd.Timedelta(pd.tseries.frequencies.to_offset(text))
    except (TypeError, ValueError):
        span = None
    if span is None or span <= pd.Timedelta(0):
        raise argparse.ArgumentTypeError(
            f"must be a fixed time span such as 1h, 15min or 1D, got {text!r}"
        )
    return text


def _columns(text: str, what: str, *, allow_none: bool = False) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    from atlasbus.dead_letters.schema import COLUMNS

    unknown = [c for c in names if c not in COLUMNS]
    if unknown:
        raise AtlasbusError(f"{what}: unknown column(s) {unknown}; valid: {', '.join(COLUMNS)}")
    if not names and not allow_none:
        raise AtlasbusError(f"{what}: names no column; valid: {', '.join(COLUMNS)}")
    return names


# --- commands ------------------------------------------------------------------------------------


def run_show(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    return _guard(out, lambda: _show(args, out))


def _show(args: argparse.Namespace, out: TextIO) -> int:
    columns = _columns(args.columns, "--columns")
    from atlasbus.dead_letters import DeadLetterTable

    data = DeadLetterTable(args.table).to_arrow(args.where)
    total = data.num_rows
    data = data.sort_by([("dead_lettered_at", "descending"), ("dead_letter_id", "ascending")])
    rows = data.slice(0, args.limit).select(columns).to_pylist()
    full = args.full
    in_table = [c for c in columns if c not in TEXT_COLUMNS]
    under = [c for c in columns if c in TEXT_COLUMNS]
    for row in rows:  # a short ID, like git's: enough to tell dead letters apart
        if not full and row.get("dead_letter_id"):
            row["dead_letter_id"] = row["dead_letter_id"][:ID_WIDTH]
    cells = [
        [cell(row[c], width=None if full else SHOW_CELL_WIDTH) for c in in_table] for row in rows
    ]
    below = [
        [
            f"  {name}: {cell(row[name], width=None if full else args.width - len(name) - 4)}"
            for name in under
        ]
        for row in rows
    ]
    out.write(format_table(in_table, cells, below=below))
    out.write(f"{len(rows)} of {total} dead letter(s)\n")
    return 0


def run_summary(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    return _guard(out, lambda: _summary(args, out))


def _summary(args: argparse.Namespace, out: TextIO) -> int:
    by = _columns(args.by, "--by", allow_none=True)
    from atlasbus.dead_letters import DeadLetterTable

    frame = DeadLetterTable(args.table).summary(by=by, freq=args.freq, filter=args.where)
    headers = [str(c) for c in frame.columns]
    cells = [[cell(v, width=CELL_WIDTH) for v in row] for row in frame.itertuples(index=False)]
    out.write(format_table(headers, cells))
    out.write(f"{int(frame['count'].sum()) if len(frame) else 0} dead letter(s)\n")
    return 0


def run_replay(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    return _guard(out, lambda: _replay(args, out))


def _replay(args: argparse.Namespace, out: TextIO) -> int:
    from atlasbus.dead_letters import DeadLetterTable, replay_dead_letters

    result = replay_dead_letters(
        DeadLetterTable(args.table),
        endpoint=endpoint_from_flag(args.url),
        where=args.where,
        stream_prefix=args.stream_prefix,
        again=args.again,
        dry_run=args.dry_run,
        limit=args.limit,
    )
    write_replay_report(result, out)
    return 1 if result.refused else 0


def write_replay_report(result: ReplayResult, out: TextIO) -> None:
    verb = "would replay" if result.dry_run else "replayed"
    if result.replayed:
        out.write(
            format_table(
                ["dead_letter_id", "topic", "stream", "new entry_id"],
                [
                    [r.dead_letter_id[:ID_WIDTH], r.topic, r.stream, r.entry_id or "-"]
                    for r in result.replayed
                ],
            )
        )
    if result.refused:
        listed = result.refused[:REFUSALS_LISTED]
        out.write(
            format_table(
                ["not replayed", "why"],
                [[r.dead_letter_id[:ID_WIDTH], r.explain(AGAIN)] for r in listed],
            )
        )
        if len(result.refused) > len(listed):
            out.write(
                f"... and {len(result.refused) - len(listed)} more not replayed (narrow them "
                "with --where; 'dlq summary --by reason' counts them)\n"
            )
    out.write(
        f"{verb} {len(result.replayed)} dead letter(s); refused {len(result.already_replayed)} "
        f"already replayed (use --again), {len(result.not_replayable)} not replayable\n"
    )


def _guard(out: TextIO, action: Callable[[], int]) -> int:
    """Known errors as one line on stderr (in the command line's words) and exit status 2."""
    from deltalake.exceptions import DeltaError

    return guarded(
        "atlasbus dlq",
        action,
        store_errors=(DeltaError, OSError),  # delta-rs, DataFusion, an object store: the table
        store_advice="cannot use the table (check --table, and --where if given)",
    )


def run_sweep(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    return _guard(out, lambda: _sweep(args, out))


def _sweep(args: argparse.Namespace, out: TextIO) -> int:
    endpoint = endpoint_from_flag(args.url)
    prefix = args.stream_prefix
    subscription = subscription_from_flags(args)
    from atlasbus.bus.stream_catalog import StreamCatalog
    from atlasbus.operations.reaper import sweep_retry_exhausted

    streams = StreamCatalog(endpoint).discover(subscription)
    if not streams:
        raise ConfigurationError(
            f"no stream matches {prefix}:* on Redis at {endpoint.description}: check "
            "--stream-prefix and --url"
        )
    policy = SweepPolicy(args.group, args.max_deliveries, args.min_idle, args.delete)
    result = sweep_retry_exhausted(
        endpoint,
        streams,
        policy,
        args.table,
        topic_of=subscription.topic_of,
        dry_run=args.dry_run,
    )
    write_sweep_report(result, out)
    return 0


def write_sweep_report(result: SweepResult, out: TextIO) -> None:
    """One row per stream swept, then one line of totals."""
    policy = result.policy
    if result.dry_run:
        headers = ["stream", "exhausted", "deleted from stream", "pending"]
        picked: tuple[str, ...] = ("exhausted", "missing", "pending")
    else:
        headers = [
            "stream",
            "exhausted",
            "dead-lettered",
            "already recorded",
            "acked",
            "deleted",
            "taken back",
            "pending",
        ]
        picked = (
            "exhausted",
            "dead_lettered",
            "already_recorded",
            "acked",
            "deleted",
            "taken_back",
            "pending",
        )
    rows = [[s.stream, *(str(getattr(s, name)) for name in picked)] for s in result.streams]
    if rows:
        out.write(format_table(headers, rows))
    if result.without_group:
        out.write(f"no group {policy.group!r} on: {', '.join(result.without_group)}\n")
    total = result.total
    rule = (
        f"group {policy.group!r}, {policy.max_deliveries}+ deliveries, idle "
        f"{policy.min_idle_ms} ms or more"
    )
    if result.dry_run:
        out.write(
            f"would sweep {total.exhausted} entr{'y' if total.exhausted == 1 else 'ies'} "
            f"({rule}); nothing written, acknowledged or deleted\n"
        )
        return
    out.write(
        f"swept {total.exhausted} entr{'y' if total.exhausted == 1 else 'ies'} ({rule}): "
        f"{total.dead_lettered} dead-lettered, {total.already_recorded} already recorded, "
        f"{total.acked} acknowledged, {total.deleted} deleted, {total.taken_back} taken back by "
        f"a consumer; {total.pending} still pending\n"
    )
    if total.gone:
        out.write(
            f"{total.gone} recorded but gone from the pending list before the claim "
            "(acknowledged by their consumer, or deleted from the stream)\n"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``atlasbus dlq ...`` on its own (the ``atlasbus`` entry point is ``atlasbus.cli``)."""
    parser = argparse.ArgumentParser(prog="atlasbus")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
