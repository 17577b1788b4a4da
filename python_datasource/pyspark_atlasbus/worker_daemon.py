"""pyspark's worker daemon, with atlasbus's executor code loaded before it forks any worker.

Set ``spark.python.daemon.module`` to ``pyspark_atlasbus.worker_daemon`` (``local_session``
does) and each executor's daemon calls ``atlasbus.preload.load_executor_code`` once, then runs
pyspark's own daemon unchanged. Workers forked from it start with atlasbus's modules,
pandas, numba and the compiled loops' machine code in memory, instead of loading them in
every fresh worker (1.5-1.6 CPU-s each; see ``atlasbus.preload``). All it holds then is
frozen out of the cyclic garbage collector's sight (``_freeze_what_is_loaded``).

Runs on executors, as Spark's daemon: ``python -m pyspark_atlasbus.worker_daemon
<worker module>``. Spark reads the daemon's port from its standard output, so nothing the
preload does may write there; and a preload that fails (say, numba cannot load its cache and
cannot compile) is reported on standard error and the daemon starts all the same: the
workers then load what they need themselves, as they would under pyspark's daemon.
"""

from __future__ import annotations

import gc
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark import daemon


def main() -> None:
    with _stdout_to_stderr():
        try:
            from atlasbus.preload import load_executor_code

            load_executor_code()
        except Exception:
            print(
                "atlasbus: the worker daemon could not preload atlasbus's executor code; "
                "each worker loads it itself:\n" + traceback.format_exc(),
                file=sys.stderr,
                flush=True,
            )
    _freeze_what_is_loaded()
    daemon.manager()


def _freeze_what_is_loaded() -> None:
    """Take every object the daemon holds now out of the cyclic collector's sight.

    pyspark's worker runs a full ``gc.collect()`` after each task. Over the 167,000 objects
    that modules and the preload leave in the daemon (numba, pandas, pyarrow, atlasbus), that
    took 75-80 ms of CPU in a freshly forked worker (it writes to each object it examines,
    so the daemon's memory pages are copied one by one) and 33-43 ms at each later task:
    in a query over 1M entries, 13.6% of the samples py-spy took of Spark's Python processes.
    Frozen (``gc.freeze``, meant for processes that fork), they stay shared, and a collection
    examines only what the worker made itself (0.1 ms).
    """
    gc.collect()  # what is garbage now would never be collected once frozen
    gc.freeze()


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Standard output (the file descriptor too) goes to standard error meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


if __name__ == "__main__":
    main()
