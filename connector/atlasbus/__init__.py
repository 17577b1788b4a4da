"""atlasbus: the Spark-free core of the ATLAS bus connector for Redis Streams.

Redis Streams access, entry-ID and offset arithmetic, the envelope codec, option parsing and
planning live here; ``pyspark_atlasbus`` is the thin Spark adapter over them.
"""

from atlasbus.entry_id import EntryId
from atlasbus.errors import (
    AtlasbusError,
    ConfigurationError,
    DataLossError,
    OffsetError,
    PublishError,
    RedisUnavailableError,
)
from atlasbus.offsets import StreamOffsets

__version__ = "0.1.0"

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
