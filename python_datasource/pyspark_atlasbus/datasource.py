"""``format("atlasbus")``: the PySpark Python Data Source for the ATLAS bus on Redis Streams.

Options are validated when the DataFrame is defined (``load()``), before any data moves; the
full options reference is docs/options.md.

Source options (``spark.read`` / ``spark.readStream``):

=========================  ===============================================================
url                        Redis URL (redis://, rediss://, unix://); default $REDIS_URL, else
                           redis://localhost:6379/0
username, password         override the URL's credentials; never printed or logged
streamPrefix               stream key prefix, default ``atlas_bus`` (streams are prefix:topic)
topics | topicPattern |    exactly one: comma-separated topics, a glob over topics (new
streams                    streams are picked up each trigger), or raw stream keys
startingOffsets            earliest (default), latest, group, or JSON {"topic": "ms-seq"}
startingTimestamp          epoch ms: start at the first entry at or after it
endingOffsets              batch only: latest (default) or JSON
endingTimestamp            batch only: epoch ms: end before the first entry at or after it
group                      consumer group mirrored by the query (XINFO GROUPS shows its lag)
maxEntriesPerTrigger       cap per micro-batch across all streams
minEntriesPerTrigger,      streaming only: wait for this many new entries, but never longer
maxTriggerDelay            than the delay (15m) since the last batch, as Kafka's source
maxEntriesPerPartition     split a stream's range into tasks of about this many (250000)
minPartitions              Kafka's: cut each batch into about this many tasks at least, by
                           time, streams sharing them by their share of the batch's entries
failOnDataLoss             true (default): fail when unread entries were trimmed; false: go
                           on (and record a data-loss dead letter with deadLetterTable)
deadLetterTable            Delta table path: malformed entries go there (stage
                           source-decode), not into the output; needs format=envelope
format                     envelope (default) or raw
includeRawFields           also fill ``fields`` for well-formed entries (false)
pageSize                   XRANGE COUNT per round trip (1000); also XPENDING's count
filterPushdown             batch only: false (default); true narrows the read to the filters
                           Spark pushes (timestamp, id, topic, stream; pyspark 4.1+ with
                           spark.sql.python.filterPushdown.enabled; load the DataFrame per
                           filtered query: Spark reuses a pushed scan's partitions)
pendingOf                  batch only: list this consumer group's pending entries (who holds
                           each, idle ms, delivery count, the entry decoded) instead of
                           reading the streams; not with positions, group, deadLetterTable
trimConsumed               streaming only: after each commit, trim every stream to what all
                           its consumer groups and the query consumed (false)
sweepGroup,                streaming only: before triggers plan, dead-letter the group's
sweepMaxDeliveries,        entries delivered sweepMaxDeliveries times or more and idle
sweepMinIdle, sweepDelete  sweepMinIdle (60s), then XACK (and XDEL the read ones)
=========================  ===============================================================

Sink options (``df.write`` / ``df.writeStream``; docs/sink.md). Input columns: ``payload``
(required: JSON text, struct or map), optional ``topic``, ``priority``, ``correlation_id``,
``tracing``, ``metadata``, ``delivery_attempts``; any other column fails at start.

=========================  ===============================================================
url                        as for the source
username, password         as for the source; never printed or logged
streamPrefix               entries go to prefix:topic, default ``atlas_bus``
topic                      the topic when there is no ``topic`` column (and for its nulls)
maxLen                     XADD MAXLEN ~ n: approximate trimming of each stream written to
maxMessageBytes            refuse a row whose entry exceeds this many bytes (262144)
exactlyOnce                true (default): retried tasks and replayed micro-batches add no
                           entry twice; false: at least once, a little faster
deadLetterTable            Delta table path: rows that cannot be published go there (stage
                           sink-publish) and the rest is published; without it such a row
                           fails the batch
=========================  ===============================================================
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from atlasbus.errors import ConfigurationError
from atlasbus.model.read_schema import pending_schema, schema_for, spark_ddl
from atlasbus.options.sink import SinkOptions, check_input_schema, parse_sink_options
from atlasbus.options.sink_columns import ACCEPTED_TYPES
from atlasbus.options.source import (
    SourceOptions,
    parse_source_options,
    require_batch_compatible,
    require_streaming_compatible,
)
from pyspark_atlasbus.user_errors import user_facing


class AtlasbusDataSource(DataSource):
    """Reads and publishes ATLAS bus envelopes on Redis Streams."""

    @classmethod
    def name(cls) -> str:
        return "atlasbus"

    def _source_options(self) -> SourceOptions:
        return parse_source_options(self.options)

    @user_facing
    def schema(self) -> str:
        """The read schema; parsing the options here makes a bad option fail at ``load()``.

        With ``pendingOf``, the schema of a group's pending entries (``pending_schema``).
        """
        options = self._source_options()
        if options.pending_of is not None:
            return spark_ddl(pending_schema(options.format))
        return spark_ddl(schema_for(options.format))

    @user_facing
    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader; with filters when Spark's filter-pushdown planning asks; driver.

        ``spark_features.planning_with_filters`` says why only then: Spark refuses a reader
        that takes filters while ``spark.sql.python.filterPushdown.enabled`` is off.
        """
        from pyspark_atlasbus.batch_reader import AtlasbusBatchReader, AtlasbusFilteringBatchReader
        from pyspark_atlasbus.spark_features import planning_with_filters

        options = self._source_options()
        require_batch_compatible(options)
        filtering = options.filter_pushdown is True and planning_with_filters()
        if options.pending_of is not None:
            from pyspark_atlasbus.pending_reader import (
                AtlasbusFilteringPendingReader,
                AtlasbusPendingReader,
            )

            if filtering:
                return AtlasbusFilteringPendingReader(options)
            return AtlasbusPendingReader(options)
        if filtering:
            return AtlasbusFilteringBatchReader(options)
        return AtlasbusBatchReader(options)

    @user_facing
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pyspark_atlasbus.spark_features import require_spark_for
        from pyspark_atlasbus.stream_reader import AtlasbusStreamReader

        options = self._source_options()
        require_streaming_compatible(options)
        require_spark_for(options)
        return AtlasbusStreamReader(options)

    def _sink_options(self, schema: StructType) -> SinkOptions:
        """Options and input columns, checked when the write or query starts; driver."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        options = parse_sink_options(self.options)
        fields = []
        for field in schema.fields:
            try:
                fields.append(to_arrow_schema(StructType([field]))[0])
            except Exception:  # a type Arrow cannot hold
                if field.name in ACCEPTED_TYPES:
                    _, expected = ACCEPTED_TYPES[field.name]
                    raise ConfigurationError(
                        f"column '{field.name}' must be {expected}, got Spark type "
                        f"{field.dataType.simpleString()}"
                    ) from None
                fields.append(pa.field(field.name, pa.null()))  # unknown: the check names it
        check_input_schema(pa.schema(fields), options)
        return options

    @user_facing
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pyspark_atlasbus.writer import AtlasbusBatchWriter

        return AtlasbusBatchWriter(self._sink_options(schema))

    @user_facing
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pyspark_atlasbus.writer import AtlasbusStreamWriter

        return AtlasbusStreamWriter(self._sink_options(schema))
