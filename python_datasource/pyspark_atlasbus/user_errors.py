"""atlasbus's own errors reach the user as one clear line, not under a page of traceback.

Spark shows a Python data source's error as ``[PYTHON_DATA_SOURCE_ERROR] ...`` followed by
the Python traceback, then the exception's line. An ``AtlasbusError`` already says what is
wrong and what to do, so the frames that led to it (option parsing, planning) only push that
line down: they are dropped. Any other exception keeps its whole traceback. Driver.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from atlasbus.errors import AtlasbusError

_P = ParamSpec("_P")
_R = TypeVar("_R")


def user_facing(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Raise an ``AtlasbusError`` from ``method`` without the frames beneath it."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except AtlasbusError as error:
            raise error.with_traceback(None) from None

    return wrapper
