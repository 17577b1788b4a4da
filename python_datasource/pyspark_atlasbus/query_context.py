"""Which streaming query and micro-batch a task belongs to, from Spark's local properties.

Spark hands every task of a streaming query its query ID and micro-batch ID as local
properties; the sink keys its exactly-once markers with them and dead letters record them.
Runs on executors (``task_query_context``) or on the driver in ``foreachBatch``.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark import TaskContext

from atlasbus.dead_letters import QueryContext

# Spark's own keys (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY), and the
# job description a streaming query sets: "{name}\nid = {id}\nrunId = {runId}\nbatch = {n}".
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
JOB_DESCRIPTION_PROPERTY = "spark.job.description"


def query_context_from(get: Callable[[str], str | None]) -> QueryContext:
    """The streaming query's ID, name and micro-batch from Spark's local properties.

    ``get`` is ``TaskContext.getLocalProperty`` on an executor or
    ``SparkContext.getLocalProperty`` in ``foreachBatch``. Outside a streaming query (a batch
    read) every field is None.
    """
    query_id = get(QUERY_ID_PROPERTY) or None
    raw_batch = get(BATCH_ID_PROPERTY)
    batch_id = int(raw_batch) if raw_batch and raw_batch.lstrip("-").isdigit() else None
    name = None
    description = get(JOB_DESCRIPTION_PROPERTY) or ""
    lines = description.split("\n")
    if query_id and len(lines) > 1 and lines[1] == f"id = {query_id}":
        name = lines[0] or None
    return QueryContext(query_id=query_id, query_name=name, batch_id=batch_id)


def task_query_context() -> QueryContext:
    """``query_context_from`` the running task's local properties; executor."""
    context = TaskContext.get()
    if context is None:
        return QueryContext()
    return query_context_from(context.getLocalProperty)
