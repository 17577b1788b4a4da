"""``atlasbus demo``: a whole pipeline on your laptop in one command.

Starts a private redis-server in a temporary folder (unless ``--url`` or ``$REDIS_URL`` names a
server), runs one streaming query (``format("atlasbus")`` with the source's ``deadLetterTable``
-> ``foreachBatch`` appending the good events to a Delta table with delta-rs), then publishes
realistic ATLAS traffic (atlasbus.sandbox.traffic: checkout flows over three topics, about 1%
malformed). A progress line shows entries published, read, written, dead-lettered and the lag;
the summary at the end is counted from the tables themselves.

The modules, one concern each:

- ``command``: the ``demo`` command (registered, run);
- ``args``: the command line (options, help, examples);
- ``pipeline``: the run itself, in order (Redis, Spark, query, traffic, drain, summary);
- ``server``: the Redis used (embedded or ``--url``) and its counts from ``XINFO``;
- ``publisher``: the traffic thread;
- ``writer``: the ``foreachBatch`` Delta writer and the tally the progress shows;
- ``progress``: the progress display;
- ``summary``: the summary and the next-step commands;
- ``signals``: Ctrl-C and SIGTERM;
- ``common``: names the modules share.
"""

from __future__ import annotations

from pyspark_atlasbus.demo.command import main, register, run
from pyspark_atlasbus.demo.common import GROUP, QUERY_NAME, STREAM_PREFIX, DemoError

__all__ = ["GROUP", "QUERY_NAME", "STREAM_PREFIX", "DemoError", "main", "register", "run"]
