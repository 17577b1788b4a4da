"""A streaming query in its own process, for the crash tests to SIGKILL and restart.

Reads topics ``a`` and ``b`` with small partitions of small pages (several a task) and writes
either to the atlasbus sink (topic ``target``), to Spark's parquet sink, or to Spark's Delta
sink (``format("delta")``, needing the Delta Lake jars ``local_session`` loads), on a
checkpoint that survives the kills.
``--source-option KEY=VALUE`` adds source options (retention, the reaper, a mirrored group;
``topicPattern`` instead of the topics; ``format=raw``, whose fields' map gives the file
sinks the same two columns); ``--sink-option KEY=VALUE`` adds atlasbus sink options (a
``deadLetterTable``, ``maxMessageBytes``).
Prints ``STARTED`` once the query runs; with ``--available-now`` it drains what is there,
prints ``DONE`` and exits.
"""

from __future__ import annotations

import argparse
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--sink", choices=["atlasbus", "parquet", "delta"], required=True)
    parser.add_argument("--out", help="the parquet or Delta sink's path")
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another option of the source (repeatable)",
    )
    parser.add_argument(
        "--sink-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another option of the atlasbus sink (repeatable)",
    )
    args = parser.parse_args()

    from pyspark_atlasbus.session import local_session

    # the Delta Lake jars only where the sink needs them: the other runs start as before
    spark = local_session("atlasbus-crash", driver_memory="1g", delta=args.sink == "delta")
    options = dict(option.split("=", 1) for option in args.source_option)
    sink_options = dict(option.split("=", 1) for option in args.sink_option)
    if "topicPattern" not in options:  # else the pattern names the topics
        options["topics"] = "a,b"
    source = (
        spark.readStream.format("atlasbus")
        .option("url", args.url)
        .option("streamPrefix", args.prefix)
        .option("maxEntriesPerPartition", "700")
        # a task's range spans several XRANGE pages, which its reader cuts together
        .option("pageSize", "97")
        .options(**options)
        .load()
    )
    if args.sink == "atlasbus":
        writer = (
            source.select("payload", "correlation_id", "priority")
            .writeStream.format("atlasbus")
            .option("url", args.url)
            .option("streamPrefix", args.prefix)
            .option("topic", "target")
            .options(**sink_options)
        )
    else:  # Spark's own file sinks: exactly once through their commit logs
        if options.get("format") == "raw":  # the fields as one map: the same two columns
            columns = [source.fields[name].alias(name) for name in ("correlation_id", "payload")]
            selected = source.select(*columns)
        else:
            selected = source.select("correlation_id", "payload")
        writer = selected.writeStream.format(args.sink).option("path", args.out)
    writer = writer.option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print("STARTED", flush=True)
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
