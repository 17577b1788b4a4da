"""Whether this process cuts XRANGE replies with the compiled kernels or parses them with
hiredis (executor).

The kernels (``atlasbus.decoding.kernels.cut_one_layout`` and the column loops it feeds) are
numba-compiled and give the rows ``atlasbus.reading.hiredis_receiver`` and the list decoder give,
faster. They serve only when numba is installed, ``NUMBA_DISABLE_JIT`` is not set, and every kernel
compiles (or loads from the cache) and decodes a sample page (``atlasbus.decoding.kernels.warmup``):
the first read of each process finds out, once. Otherwise the pure path serves, and a warning says
why when numba is installed but failed.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("atlasbus.compiled_kernels")

_lock = threading.Lock()
_usable: bool | None = None


def compiled_kernels_usable() -> bool:
    """Whether the compiled kernels serve in this process (decided at the first call)."""
    global _usable
    with _lock:
        if _usable is None:
            _usable = _load()
        return _usable


def jit_disabled() -> bool:
    """Whether ``NUMBA_DISABLE_JIT`` asks for plain Python (as numba reads it: an integer)."""
    try:
        return int(os.environ.get("NUMBA_DISABLE_JIT", "0") or "0") != 0
    except ValueError:
        return False


def _load() -> bool:
    if jit_disabled():
        log.info("NUMBA_DISABLE_JIT is set: XRANGE replies are parsed by hiredis")
        return False
    try:
        import numba
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "numba":
            log.info("numba is not installed: XRANGE replies are parsed by hiredis")
            return False
        # installed, but not loadable: a dependency missing, or beside another NumPy
        log.warning(
            "atlasbus: numba is installed but cannot be imported (%s); XRANGE replies are "
            "parsed by hiredis instead, which gives the same rows more slowly",
            exc,
        )
        return False
    if numba.config.DISABLE_JIT:  # also set by a .numba_config.yaml
        log.info("numba's JIT is disabled: XRANGE replies are parsed by hiredis")
        return False
    from atlasbus.decoding.kernels.warmup import run_every_kernel

    try:
        run_every_kernel()
    except Exception as exc:  # numba's errors have no common base worth naming here
        log.warning(
            "atlasbus: the compiled kernels failed to load (%s: %s); XRANGE replies are parsed "
            "by hiredis instead, which gives the same rows more slowly",
            type(exc).__name__,
            exc,
        )
        return False
    return True
