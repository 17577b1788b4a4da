"""atlasbus's modules compiled to bytecode, as pip installs them, before a benchmark starts Spark.

pip writes each module's ``.pyc`` when it installs atlasbus. An editable install (a
developer's checkout) has them only once Python has written them, and with
``PYTHONDONTWRITEBYTECODE=1`` it never does: every Python process Spark starts would compile
atlasbus's modules from source again (the modules a query's runner imports: 76-99 ms so,
25-32 ms from bytecode). Python reads existing ``.pyc`` files whatever that variable says, so
writing them once here makes the benchmarks measure what users install.
"""

from __future__ import annotations

import compileall

import atlasbus
import pyspark_atlasbus


def compile_atlasbus() -> None:
    """Write the ``.pyc`` of every atlasbus module whose bytecode is missing or stale."""
    for directory in (*atlasbus.__path__, *pyspark_atlasbus.__path__):
        compileall.compile_dir(directory, quiet=1)
