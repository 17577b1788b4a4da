"""``python -m atlasbus.cli``: the ``atlasbus`` command."""

import sys

from atlasbus.cli import main

sys.exit(main())
