"""Typed, validated access to Spark's string options, shared by the source and the sink.

Keys are case-insensitive, as in Spark. Every accessor records the key it read, so anything
left over at the end is an unknown option and can be refused with the list of valid ones.
``parse_shared_options`` reads what the source and the sink have in common (the endpoint, the
stream prefix and the dead-letter table), so both parse and word those the same way. Runs on
the driver when a DataFrame is defined or a write starts; no I/O.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import overload

from atlasbus.bus.connection import RedisEndpoint
from atlasbus.bus.replication import Replication
from atlasbus.errors import ConfigurationError
from atlasbus.options import keys

# Redis's counts and lengths are signed 64-bit integers.
MAX_REDIS_INTEGER = 2**63 - 1

_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_DURATION_UNITS_MS["d"] = 24 * _DURATION_UNITS_MS["h"]
_DURATION = re.compile(r"(\d{1,19})\s*(ms|s|min|m|h|d)?")


class OptionReader:
    """Reads options by canonical name; errors name the option, the value and what is accepted."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._values = {str(key).lower(): str(value) for key, value in options.items()}
        self._names = {str(key).lower(): str(key) for key in options}
        self._read: set[str] = set()

    def has(self, name: str) -> bool:
        return name.lower() in self._values

    def string(self, name: str, default: str | None = None) -> str | None:
        self._read.add(name.lower())
        value = self._values.get(name.lower())
        return default if value is None else value

    def non_empty(self, name: str) -> str | None:
        """The value as given (not stripped), ``None`` if absent; blank is an error."""
        value = self.string(name)
        if value is not None and not value.strip():
            raise ConfigurationError(f"option '{name}' must not be empty")
        return value

    @overload
    def positive_int(self, name: str, *, maximum: int = ...) -> int | None: ...

    @overload
    def positive_int(self, name: str, *, default: int, maximum: int = ...) -> int: ...

    def positive_int(
        self, name: str, *, default: int | None = None, maximum: int = MAX_REDIS_INTEGER
    ) -> int | None:
        """The option as an integer from 1 to ``maximum``; ``default`` when it is absent.

        The default maximum is the largest integer Redis accepts as a count or length, so a
        value Redis would refuse at run time ("value is not an integer or out of range") is
        refused here, by name.
        """
        raw = self.string(name)
        if raw is None:
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            value = 0
        if value <= 0:
            raise ConfigurationError(f"option '{name}' must be a positive integer, got {raw!r}")
        if value > maximum:
            raise ConfigurationError(
                f"option '{name}' must be a positive integer at most {maximum}, got {raw!r}"
            )
        return value

    def duration_ms(self, name: str, default: int) -> int:
        """A duration as Spark writes them (``500ms``, ``2s``, ``15m``, ``1h``, ``1d``; a bare
        number is milliseconds), in milliseconds; ``default`` when absent."""
        raw = self.string(name)
        if raw is None:
            return default
        match = _DURATION.fullmatch(raw.strip().lower())
        if match is None:
            raise ConfigurationError(
                f"option '{name}' must be a duration like 500ms, 2s, 15m, 1h or 1d (a bare "
                f"number is milliseconds), got {raw!r}"
            )
        value = int(match.group(1)) * _DURATION_UNITS_MS[match.group(2) or "ms"]
        if value > MAX_REDIS_INTEGER:
            raise ConfigurationError(f"option '{name}' is too long a duration, got {raw!r}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        raw = self.string(name)
        if raw is None:
            return default
        lowered = raw.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise ConfigurationError(f"option '{name}' must be 'true' or 'false', got {raw!r}")

    def choice(self, name: str, choices: Iterable[str], default: str) -> str:
        accepted = tuple(choices)
        raw = self.string(name)
        if raw is None:
            return default
        lowered = raw.strip().lower()
        for candidate in accepted:
            if candidate.lower() == lowered:
                return candidate
        raise ConfigurationError(
            f"option '{name}' must be one of {', '.join(accepted)}, got {raw!r}"
        )

    def reject_unsupported(self, names: Iterable[str], why: str) -> None:
        for name in names:
            if self.has(name):
                self._read.add(name.lower())
                raise ConfigurationError(f"option '{name}' is not yet supported: {why}")

    def reject_unknown(self, accepted: Iterable[str], *, ignored: Iterable[str] = ()) -> None:
        """Refuse options that are neither accepted, ignored nor read: almost always a typo.

        Needs no option to have been read yet, so a parser can call it first and name a typo
        before any check that the typo would otherwise trip (a missing required option).
        """
        accepted_names = sorted(set(accepted))
        skip = {name.lower() for name in (*accepted_names, *ignored)} | self._read
        for key in self._values:
            if key in skip:
                continue
            given = self._names[key]
            close = difflib.get_close_matches(
                key, [a.lower() for a in accepted_names], n=1, cutoff=0.75
            )
            hint = spelled = ""
            if close:
                match = next(a for a in accepted_names if a.lower() == close[0])
                hint = f" Did you mean '{match}'?"
                if given == given.lower() and match != match.lower():  # Spark lowers names
                    spelled = " (named in lower case, as Spark hands options over)"
            raise ConfigurationError(
                f"unknown option '{given}'{spelled}.{hint} Accepted options: "
                f"{', '.join(accepted_names)}"
            )


@dataclass(frozen=True)
class SharedOptions:
    """The options the source and the sink share, parsed the same way for both."""

    endpoint: RedisEndpoint
    stream_prefix: str
    dead_letter_table: str | None
    replication: Replication | None = None


def parse_shared_options(reader: OptionReader) -> SharedOptions:
    """``url`` (and its timeouts), ``username``/``password``, ``streamPrefix``, dead letters,
    ``minReplicas``/``replicaTimeout``."""
    endpoint = RedisEndpoint.from_options(
        reader.string(keys.URL), reader.string(keys.USERNAME), reader.string(keys.PASSWORD)
    )
    prefix = reader.non_empty(keys.STREAM_PREFIX)
    table = reader.non_empty(keys.DEAD_LETTER_TABLE)
    return SharedOptions(
        endpoint=endpoint,
        stream_prefix=keys.DEFAULT_STREAM_PREFIX if prefix is None else prefix,
        dead_letter_table=None if table is None else table.strip(),
        replication=_parse_replication(reader),
    )


def _parse_replication(reader: OptionReader) -> Replication | None:
    """``minReplicas`` (replicas that must hold an entry) and ``replicaTimeout``; off without."""
    min_replicas = reader.positive_int(keys.MIN_REPLICAS, maximum=1_000)
    timeout = reader.duration_ms(keys.REPLICA_TIMEOUT, keys.DEFAULT_REPLICA_TIMEOUT_MS)
    if min_replicas is None:
        if reader.has(keys.REPLICA_TIMEOUT):
            raise ConfigurationError(
                f"option '{keys.REPLICA_TIMEOUT}' needs option '{keys.MIN_REPLICAS}': it bounds "
                "how long to wait for that many replicas"
            )
        return None
    if timeout <= 0:
        raise ConfigurationError(
            f"option '{keys.REPLICA_TIMEOUT}' must be a positive duration such as 10s, got "
            f"{reader.string(keys.REPLICA_TIMEOUT)!r}"
        )
    return Replication(min_replicas, timeout)
