"""``python -m pyspark_atlasbus.cli``: the ``atlasbus`` command, which lives in the core
(``atlasbus.cli``)."""

import sys

from atlasbus.cli import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
