"""Where atlasbus keeps what it builds or fetches once per machine, on the driver.

``$ATLASBUS_CACHE_DIR``, else ``$XDG_CACHE_HOME/atlasbus``, else ``~/.cache/atlasbus``: the list
of the Delta Lake jars (``delta_jars``) and the SPARK_HOME with pyspark's bytecode
(``spark_home``). Everything in it can be deleted; it is made again when needed.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    chosen = os.environ.get("ATLASBUS_CACHE_DIR")
    if chosen:
        return Path(chosen)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "atlasbus"
