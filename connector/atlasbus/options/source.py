"""The source's options, parsed once into a frozen, picklable ``SourceOptions``.

Parsing does no I/O, so a bad option fails at ``load()`` before any data moves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from atlasbus.bus.connection import RedisEndpoint
from atlasbus.bus.replication import Replication
from atlasbus.bus.subscription import Subscription
from atlasbus.errors import ConfigurationError, OffsetError
from atlasbus.model.entry_id import EntryId
from atlasbus.options import keys
from atlasbus.options.reader import MAX_REDIS_INTEGER, OptionReader, parse_shared_options

__all__ = [
    "DEFAULT_MAX_ENTRIES_PER_PARTITION",
    "DEFAULT_PAGE_SIZE",
    "SourceOptions",
    "StartingPosition",
    "Subscription",
    "SweepPolicy",
    "TriggerPacing",
    "parse_source_options",
]

# A task costs Spark about 0.1-0.2 s whatever its size; at 150-200k entries/s per core a
# 250k-entry task keeps that under 10% while still splitting a hot stream (docs/benchmarks.md).
DEFAULT_MAX_ENTRIES_PER_PARTITION = 250_000
DEFAULT_PAGE_SIZE = 1_000

StartKind = Literal["earliest", "latest", "group", "offsets", "timestamp"]
ReadFormat = Literal["envelope", "raw"]


@dataclass(frozen=True)
class StartingPosition:
    """Where a query with no checkpoint starts. ``offsets`` maps stream key to last included."""

    kind: StartKind = "earliest"
    offsets: Mapping[str, EntryId] = field(default_factory=dict)
    timestamp_ms: int | None = None

    @property
    def moves(self) -> bool:
        """Whether asking again later may give another position: ``latest`` follows the
        streams' ends and ``group`` the consumer group, which others move (or set back)."""
        return self.kind in ("latest", "group")


@dataclass(frozen=True)
class SourceOptions:
    """Everything the source needs, validated. Travels to executors (no secrets in repr)."""

    endpoint: RedisEndpoint
    subscription: Subscription
    starting: StartingPosition
    ending: Mapping[str, EntryId] | None
    group: str | None
    max_entries_per_trigger: int | None
    max_entries_per_partition: int
    fail_on_data_loss: bool
    format: ReadFormat
    include_raw_fields: bool
    page_size: int
    dead_letter_table: str | None = None
    pacing: TriggerPacing | None = None
    trim_consumed: bool = False
    pending_of: str | None = None
    sweep: SweepPolicy | None = None
    # Kafka's minPartitions: cut a batch into about this many tasks at least (by time).
    min_partitions: int | None = None
    # Batch reads: apply the filters Spark pushes (docs/options.md, "Filtering batch reads");
    # None: not given (on).
    filter_pushdown: bool | None = None
    # minReplicas/replicaTimeout: plan only entries that many replicas acknowledged
    replication: Replication | None = None
    # endingTimestamp (batch reads): read only entries of milliseconds before it
    ending_timestamp_ms: int | None = None


@dataclass(frozen=True)
class TriggerPacing:
    """``minEntriesPerTrigger`` with ``maxTriggerDelay``: wait for enough, never too long."""

    min_entries: int
    max_delay_ms: int


@dataclass(frozen=True)
class SweepPolicy:
    """The retry-exhausted reaper run by the source each trigger (``sweep*`` options).

    Entries of ``group`` pending at least ``min_idle_ms`` and delivered ``max_deliveries``
    times or more become ``retry-exhausted`` dead letters, then are acknowledged (and deleted
    with ``delete``).
    """

    group: str
    max_deliveries: int
    min_idle_ms: int
    delete: bool = False


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate the source options Spark passed (strings, any key case)."""
    reader = OptionReader(options)
    # Unknown keys first: a sink option given to the source ('topic') is a typo to name, not
    # a missing subscription.
    reader.reject_unknown(keys.SOURCE_OPTIONS, ignored=keys.SPARK_READ_OPTIONS)
    shared = parse_shared_options(reader)
    subscription = _parse_subscription(reader, shared.stream_prefix)
    group = reader.non_empty(keys.GROUP)
    starting = _parse_starting(reader, subscription, group)
    ending = _parse_ending(reader, subscription)
    ending_timestamp = _parse_ending_timestamp(reader, starting)
    parsed = SourceOptions(
        endpoint=shared.endpoint,
        subscription=subscription,
        starting=starting,
        ending=ending,
        ending_timestamp_ms=ending_timestamp,
        group=group.strip() if group else None,
        max_entries_per_trigger=reader.positive_int(keys.MAX_ENTRIES_PER_TRIGGER),
        max_entries_per_partition=reader.positive_int(
            keys.MAX_ENTRIES_PER_PARTITION, default=DEFAULT_MAX_ENTRIES_PER_PARTITION
        ),
        fail_on_data_loss=reader.boolean(keys.FAIL_ON_DATA_LOSS, True),
        format="raw"
        if reader.choice(keys.FORMAT, ("envelope", "raw"), "envelope") == "raw"
        else "envelope",
        include_raw_fields=reader.boolean(keys.INCLUDE_RAW_FIELDS, False),
        page_size=reader.positive_int(keys.PAGE_SIZE, default=DEFAULT_PAGE_SIZE),
        dead_letter_table=shared.dead_letter_table,
        replication=shared.replication,
        pacing=_parse_pacing(reader),
        trim_consumed=reader.boolean(keys.TRIM_CONSUMED, False),
        pending_of=_stripped(reader.non_empty(keys.PENDING_OF)),
        sweep=_parse_sweep(reader, shared.dead_letter_table),
        min_partitions=reader.positive_int(keys.MIN_PARTITIONS),
        filter_pushdown=None
        if reader.string(keys.FILTER_PUSHDOWN) is None
        else reader.boolean(keys.FILTER_PUSHDOWN, True),
    )
    _refuse_what_pending_ignores(parsed)
    if parsed.dead_letter_table is not None and parsed.format == "raw":
        raise ConfigurationError(
            f"option '{keys.DEAD_LETTER_TABLE}' needs format=envelope: format=raw does not "
            "decode entries, so none is malformed; remove one of the two options"
        )
    return parsed


def _refuse_what_pending_ignores(options: SourceOptions) -> None:
    """Refuse options a ``pendingOf`` read would otherwise silently ignore.

    A pending read lists the group's whole pending entries list: positions do not narrow it,
    and it decodes entries only to show them (a malformed one is a row with ``error``).
    """
    if options.pending_of is None:
        return
    ignored = [
        name
        for name, given in (
            (keys.STARTING_OFFSETS, options.starting.kind in ("latest", "offsets", "group")),
            (keys.STARTING_TIMESTAMP, options.starting.kind == "timestamp"),
            (keys.ENDING_OFFSETS, options.ending is not None),
            (keys.ENDING_TIMESTAMP, options.ending_timestamp_ms is not None),
            (keys.GROUP, options.group is not None),
            (keys.MIN_PARTITIONS, options.min_partitions is not None),
            (keys.DEAD_LETTER_TABLE, options.dead_letter_table is not None),
        )
        if given
    ]
    if ignored:
        raise ConfigurationError(
            f"option '{ignored[0]}' does not apply with option '{keys.PENDING_OF}': a pending "
            "read lists the whole pending entries list of the group named by pendingOf, "
            "with malformed entries as rows whose 'error' says why; remove "
            f"'{ignored[0]}'"
        )


def _stripped(value: str | None) -> str | None:
    return None if value is None else value.strip()


def _parse_pacing(reader: OptionReader) -> TriggerPacing | None:
    min_entries = reader.positive_int(keys.MIN_ENTRIES_PER_TRIGGER)
    delay = reader.duration_ms(keys.MAX_TRIGGER_DELAY, keys.DEFAULT_MAX_TRIGGER_DELAY_MS)
    if min_entries is None:
        if reader.has(keys.MAX_TRIGGER_DELAY):
            raise ConfigurationError(
                f"option '{keys.MAX_TRIGGER_DELAY}' needs option "
                f"'{keys.MIN_ENTRIES_PER_TRIGGER}': the delay bounds how long a trigger waits "
                "for that many entries"
            )
        return None
    maximum = reader.positive_int(keys.MAX_ENTRIES_PER_TRIGGER)
    if maximum is not None and maximum < min_entries:
        raise ConfigurationError(
            f"option '{keys.MIN_ENTRIES_PER_TRIGGER}' ({min_entries}) must not exceed option "
            f"'{keys.MAX_ENTRIES_PER_TRIGGER}' ({maximum})"
        )
    return TriggerPacing(min_entries, delay)


def _parse_sweep(reader: OptionReader, dead_letter_table: str | None) -> SweepPolicy | None:
    group = _stripped(reader.non_empty(keys.SWEEP_GROUP))
    max_deliveries = reader.positive_int(keys.SWEEP_MAX_DELIVERIES)
    min_idle = reader.duration_ms(keys.SWEEP_MIN_IDLE, keys.DEFAULT_SWEEP_MIN_IDLE_MS)
    delete = reader.boolean(keys.SWEEP_DELETE, False)
    if group is None:
        given = [
            name
            for name in (keys.SWEEP_MAX_DELIVERIES, keys.SWEEP_MIN_IDLE, keys.SWEEP_DELETE)
            if reader.has(name)
        ]
        if given:
            raise ConfigurationError(
                f"option '{given[0]}' needs option '{keys.SWEEP_GROUP}': name the consumer "
                "group whose retry-exhausted entries the source should dead-letter"
            )
        return None
    if max_deliveries is None:
        raise ConfigurationError(
            f"option '{keys.SWEEP_GROUP}' needs option '{keys.SWEEP_MAX_DELIVERIES}': how many "
            "deliveries make an entry retry-exhausted (the bus's own retry limit, e.g. 3)"
        )
    if dead_letter_table is None:
        raise ConfigurationError(
            f"option '{keys.SWEEP_GROUP}' needs option '{keys.DEAD_LETTER_TABLE}': "
            "retry-exhausted entries are acknowledged only once their dead letter is written"
        )
    return SweepPolicy(group, max_deliveries, min_idle, delete)


def _parse_subscription(reader: OptionReader, prefix: str) -> Subscription:
    given = {
        name: reader.string(name)
        for name in (keys.TOPICS, keys.TOPIC_PATTERN, keys.STREAMS)
        if reader.has(name)
    }
    if len(given) != 1:
        which = f"got {', '.join(given)}" if given else "got none"
        raise ConfigurationError(
            f"exactly one of options 'topics', 'topicPattern', 'streams' must be set ({which}): "
            "'topics' takes a comma-separated topic list, 'topicPattern' a glob over topic "
            "names, 'streams' raw Redis stream keys"
        )
    name, raw = next(iter(given.items()))
    text = (raw or "").strip()
    if name == keys.TOPIC_PATTERN:
        if not text:
            raise ConfigurationError("option 'topicPattern' must not be empty, e.g. 'orders.*'")
        return Subscription("pattern", (text,), prefix)
    items = [item.strip() for item in text.split(",")]
    if not text or any(not item for item in items):
        raise ConfigurationError(
            f"option '{name}' must be a comma-separated list of non-empty names, got {raw!r}"
        )
    duplicates = sorted({item for item in items if items.count(item) > 1})
    if duplicates:
        raise ConfigurationError(f"option '{name}' lists {', '.join(duplicates)} more than once")
    return Subscription("topics" if name == keys.TOPICS else "streams", tuple(items), prefix)


def _parse_starting(
    reader: OptionReader, subscription: Subscription, group: str | None
) -> StartingPosition:
    raw = reader.string(keys.STARTING_OFFSETS)
    timestamp_raw = reader.string(keys.STARTING_TIMESTAMP)
    if timestamp_raw is not None:
        if raw is not None:
            raise ConfigurationError(
                "options 'startingOffsets' and 'startingTimestamp' cannot both be set: "
                "choose one starting position"
            )
        timestamp = _epoch_ms(keys.STARTING_TIMESTAMP, timestamp_raw)
        return StartingPosition("timestamp", timestamp_ms=timestamp)
    text = (raw or "earliest").strip()
    lowered = text.lower()
    if lowered in ("earliest", "latest"):
        return StartingPosition("earliest" if lowered == "earliest" else "latest")
    if lowered == "group":
        if group is None:
            raise ConfigurationError(
                "option 'startingOffsets' is 'group' but option 'group' is not set: name the "
                "consumer group whose position the query should start from"
            )
        return StartingPosition("group")
    if not text.startswith("{"):
        raise ConfigurationError(
            "option 'startingOffsets' must be earliest, latest, group, or a JSON object like "
            f'{{"topic": "1700000000000-0"}}, got {raw!r}'
        )
    offsets = _parse_offsets_json(keys.STARTING_OFFSETS, text, subscription, allow_keywords=True)
    return StartingPosition("offsets", offsets=offsets)


def _epoch_ms(name: str, raw: str) -> int:
    try:
        timestamp = int(raw.strip())
    except ValueError:
        timestamp = -1
    if timestamp < 0:
        raise ConfigurationError(
            f"option '{name}' must be epoch milliseconds (a non-negative integer), got {raw!r}"
        )
    if timestamp > MAX_REDIS_INTEGER:
        raise ConfigurationError(
            f"option '{name}' must be epoch milliseconds at most {MAX_REDIS_INTEGER}, got {raw!r}"
        )
    return timestamp


def _parse_ending_timestamp(reader: OptionReader, starting: StartingPosition) -> int | None:
    """Kafka's ``endingTimestamp``: the batch ends before the first entry at or after it."""
    raw = reader.string(keys.ENDING_TIMESTAMP)
    if raw is None:
        return None
    if reader.string(keys.ENDING_OFFSETS) is not None:
        raise ConfigurationError(
            f"options '{keys.ENDING_OFFSETS}' and '{keys.ENDING_TIMESTAMP}' cannot both be "
            "set: choose one ending position"
        )
    ending = _epoch_ms(keys.ENDING_TIMESTAMP, raw)
    if starting.timestamp_ms is not None and ending < starting.timestamp_ms:
        raise ConfigurationError(
            f"option '{keys.ENDING_TIMESTAMP}' ({ending}) is before option "
            f"'{keys.STARTING_TIMESTAMP}' ({starting.timestamp_ms}): the window would be "
            "empty; the start is included and the end is not"
        )
    return ending


def _parse_ending(reader: OptionReader, subscription: Subscription) -> Mapping[str, EntryId] | None:
    raw = reader.string(keys.ENDING_OFFSETS)
    if raw is None or raw.strip().lower() == "latest":
        return None
    if not raw.strip().startswith("{"):
        raise ConfigurationError(
            "option 'endingOffsets' must be latest or a JSON object like "
            f'{{"topic": "1700000000000-0"}}, got {raw!r}'
        )
    return _parse_offsets_json(keys.ENDING_OFFSETS, raw.strip(), subscription, allow_keywords=False)


def _parse_offsets_json(
    name: str, text: str, subscription: Subscription, *, allow_keywords: bool
) -> dict[str, EntryId]:
    """``{"topic or stream key": "ms-seq"}`` to stream key -> ID (``Subscription.stream_named``)."""

    def refuse_repeats(pairs: list[tuple[str, object]]) -> dict[str, object]:
        seen = [key for key, _ in pairs]
        repeated = sorted({key for key in seen if seen.count(key) > 1})
        if repeated:
            raise ConfigurationError(
                f"option '{name}' lists {', '.join(map(repr, repeated))} more than once"
            )
        return dict(pairs)

    try:
        raw = json.loads(text, object_pairs_hook=refuse_repeats)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"option '{name}' is not valid JSON ({exc.msg}): {text!r}"
        ) from None
    if not isinstance(raw, dict) or not raw:
        raise ConfigurationError(
            f'option \'{name}\' must be a non-empty JSON object like {{"topic": "1700000000000-0"}}'
        )
    positions: dict[str, EntryId] = {}
    named_by: dict[str, str] = {}
    for key, value in raw.items():
        stream = subscription.stream_named(key)
        if stream is None:
            raise ConfigurationError(
                f"option '{name}' names {key!r}, which is not in the subscription "
                f"({subscription.describe()}); accepted keys: {subscription.accepted_keys()}"
            )
        if stream in named_by:
            raise ConfigurationError(
                f"option '{name}' names stream {stream!r} twice, as {named_by[stream]!r} and "
                f"as {key!r}; keep one"
            )
        named_by[stream] = key
        keyword = value.strip().lower() if isinstance(value, str) else None
        if allow_keywords and keyword == "earliest":  # any case, as the option's own keywords
            continue
        if allow_keywords and keyword == "latest":
            raise ConfigurationError(
                f"option '{name}': 'latest' per topic is not supported (topic {key!r}); use "
                "startingOffsets=latest for all topics, or give an entry ID"
            )
        if not isinstance(value, str):
            raise ConfigurationError(
                f"option '{name}': the position of {key!r} must be an entry ID string like "
                f"'1700000000000-0', got {value!r}"
            )
        try:
            positions[stream] = EntryId.parse(value, what=f"option '{name}' for {key!r}")
        except OffsetError as exc:
            raise ConfigurationError(str(exc)) from None
    return positions


def require_streaming_compatible(options: SourceOptions) -> None:
    """Refuse, at ``load()``, options that only a batch read (``spark.read``) can honour."""
    if options.ending is not None:
        raise ConfigurationError(
            "option 'endingOffsets' is for batch reads (spark.read) only; a streaming query "
            "runs until stopped: remove it, or use trigger(availableNow=True) to stop at the end"
        )
    if options.ending_timestamp_ms is not None:
        raise ConfigurationError(
            f"option '{keys.ENDING_TIMESTAMP}' is for batch reads (spark.read) only; a "
            "streaming query runs until stopped: remove it, or use trigger(availableNow=True) "
            "to stop at the end"
        )
    if options.pending_of is not None:
        raise ConfigurationError(
            f"option '{keys.PENDING_OF}' is for batch reads (spark.read) only: it lists a "
            "group's pending entries as they are now; read it with spark.read"
        )
    if options.filter_pushdown is not None:
        raise ConfigurationError(
            f"option '{keys.FILTER_PUSHDOWN}' is for batch reads (spark.read) only: a "
            "streaming query reads every new entry and Spark filters the rows; remove it"
        )


def require_batch_compatible(options: SourceOptions) -> None:
    """Refuse, at ``load()``, options that only a streaming query can honour."""
    if options.starting.kind == "latest":
        raise ConfigurationError(
            "option 'startingOffsets' cannot be 'latest' for a batch read (spark.read): it would "
            "read nothing. Use earliest, group, a JSON object, or startingTimestamp"
        )
    streaming_only = [
        name
        for name, given in (
            (keys.MIN_ENTRIES_PER_TRIGGER, options.pacing is not None),
            (keys.TRIM_CONSUMED, options.trim_consumed),
            (keys.SWEEP_GROUP, options.sweep is not None),
        )
        if given
    ]
    if streaming_only:
        raise ConfigurationError(
            f"option '{streaming_only[0]}' is for streaming queries (spark.readStream) only: "
            "it acts once per trigger; remove it from this batch read"
        )
