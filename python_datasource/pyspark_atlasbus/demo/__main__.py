"""``python -m pyspark_atlasbus.demo [options]``: the same as ``atlasbus demo [options]``."""

import sys

from pyspark_atlasbus.demo import main

sys.exit(main())
