"""atlasbus: the Spark-free core of the ATLAS bus connector for Redis Streams.

Redis Streams access, entry-ID and offset arithmetic, the envelope codec, option parsing,
planning, reading and publishing live here, a package per concern (docs/architecture.md);
``pyspark_atlasbus`` is the Spark adapter over them.
"""

from atlasbus import former_names
from atlasbus.errors import (
    AtlasbusError,
    ConfigurationError,
    DataLossError,
    OffsetError,
    PublishError,
    RedisUnavailableError,
)
from atlasbus.model.entry_id import EntryId
from atlasbus.model.offsets import StreamOffsets
from atlasbus.version import __version__

former_names.install()

__all__ = [
    "AtlasbusError",
    "ConfigurationError",
    "DataLossError",
    "EntryId",
    "OffsetError",
    "PublishError",
    "RedisUnavailableError",
    "StreamOffsets",
    "__version__",
]
