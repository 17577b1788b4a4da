"""The exceptions atlasbus raises, with stable names users can catch.

Every message names the thing at fault (option, stream, entry) and says what to do. None ever
contains a password: connection details are described by host and port only.
"""

from __future__ import annotations


class AtlasbusError(Exception):
    """Base class of every error atlasbus raises on purpose."""


class ConfigurationError(AtlasbusError, ValueError):
    """An option is missing, unknown, or has a value atlasbus cannot accept."""


class OffsetError(AtlasbusError, ValueError):
    """An entry ID or an offsets JSON document is malformed."""


class DataLossError(AtlasbusError):
    """Entries were removed from a stream before the query read them."""


class RedisUnavailableError(AtlasbusError, ConnectionError):
    """Redis could not be reached or refused the credentials."""


class RedisPermissionError(RedisUnavailableError):
    """Redis's ACL refused the user a command or a key; the message names the rule to add."""


class PublishError(AtlasbusError):
    """A row could not be published to the bus."""
