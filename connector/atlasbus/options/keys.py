"""Every option name the source and the sink accept, in one place, as Spark spells them.

Spark passes options with any key case; ``OptionReader`` compares them case-insensitively, so
these constants are the canonical spelling shown in errors and docs (docs/options.md).
"""

from __future__ import annotations

# --- shared by the source and the sink -------------------------------------------------------
URL = "url"
USERNAME = "username"
PASSWORD = "password"
STREAM_PREFIX = "streamPrefix"
DEAD_LETTER_TABLE = "deadLetterTable"
MIN_REPLICAS = "minReplicas"
REPLICA_TIMEOUT = "replicaTimeout"

DEFAULT_STREAM_PREFIX = "atlas_bus"
DEFAULT_REPLICA_TIMEOUT_MS = 10_000

# --- source ----------------------------------------------------------------------------------
TOPICS = "topics"
TOPIC_PATTERN = "topicPattern"
STREAMS = "streams"
STARTING_OFFSETS = "startingOffsets"
STARTING_TIMESTAMP = "startingTimestamp"
ENDING_OFFSETS = "endingOffsets"
ENDING_TIMESTAMP = "endingTimestamp"
GROUP = "group"
MAX_ENTRIES_PER_TRIGGER = "maxEntriesPerTrigger"
MAX_ENTRIES_PER_PARTITION = "maxEntriesPerPartition"
MIN_PARTITIONS = "minPartitions"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
FORMAT = "format"
INCLUDE_RAW_FIELDS = "includeRawFields"
PAGE_SIZE = "pageSize"
MIN_ENTRIES_PER_TRIGGER = "minEntriesPerTrigger"
MAX_TRIGGER_DELAY = "maxTriggerDelay"
TRIM_CONSUMED = "trimConsumed"
PENDING_OF = "pendingOf"
SWEEP_GROUP = "sweepGroup"
SWEEP_MAX_DELIVERIES = "sweepMaxDeliveries"
SWEEP_MIN_IDLE = "sweepMinIdle"
SWEEP_DELETE = "sweepDelete"
FILTER_PUSHDOWN = "filterPushdown"

DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
DEFAULT_SWEEP_MIN_IDLE_MS = 60 * 1000

SOURCE_OPTIONS = (
    URL,
    USERNAME,
    PASSWORD,
    STREAM_PREFIX,
    TOPICS,
    TOPIC_PATTERN,
    STREAMS,
    STARTING_OFFSETS,
    STARTING_TIMESTAMP,
    ENDING_OFFSETS,
    ENDING_TIMESTAMP,
    GROUP,
    MAX_ENTRIES_PER_TRIGGER,
    MIN_ENTRIES_PER_TRIGGER,
    MAX_TRIGGER_DELAY,
    MAX_ENTRIES_PER_PARTITION,
    MIN_PARTITIONS,
    FAIL_ON_DATA_LOSS,
    FORMAT,
    INCLUDE_RAW_FIELDS,
    PAGE_SIZE,
    DEAD_LETTER_TABLE,
    TRIM_CONSUMED,
    PENDING_OF,
    SWEEP_GROUP,
    SWEEP_MAX_DELIVERIES,
    SWEEP_MIN_IDLE,
    SWEEP_DELETE,
    FILTER_PUSHDOWN,
    MIN_REPLICAS,
    REPLICA_TIMEOUT,
)

# Spark adds these to a read's options itself; they are not ours to refuse.
SPARK_READ_OPTIONS = ("path",)

# --- sink ------------------------------------------------------------------------------------
TOPIC = "topic"
MAX_LEN = "maxLen"
MAX_MESSAGE_BYTES = "maxMessageBytes"
EXACTLY_ONCE = "exactlyOnce"

SINK_OPTIONS = (
    URL,
    USERNAME,
    PASSWORD,
    STREAM_PREFIX,
    TOPIC,
    MAX_LEN,
    MAX_MESSAGE_BYTES,
    EXACTLY_ONCE,
    DEAD_LETTER_TABLE,
    MIN_REPLICAS,
    REPLICA_TIMEOUT,
)

# Spark adds these to a write's options itself; they are not ours to refuse.
SPARK_WRITE_OPTIONS = ("path", "checkpointLocation", "queryName")
