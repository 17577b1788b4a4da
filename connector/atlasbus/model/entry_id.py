"""Redis stream entry IDs (``ms-seq``) as ordered values.

IDs compare as ``(ms, seq)`` tuples, never as strings: ``"9-0" < "10-0"`` only numerically.
"""

from __future__ import annotations

from dataclasses import dataclass

from atlasbus.errors import OffsetError

MAX_SEQ = 2**64 - 1
_MAX_MS = 2**64 - 1


@dataclass(frozen=True, order=True, slots=True)
class EntryId:
    """One position in a stream: milliseconds and sequence number."""

    ms: int
    seq: int = 0

    @classmethod
    def parse(cls, text: str | bytes, *, what: str = "entry ID") -> EntryId:
        """Parse ``ms-seq`` (or a bare ``ms``, meaning ``ms-0``); ``what`` names it in errors."""
        raw = text.decode() if isinstance(text, bytes) else str(text)
        ms_text, sep, seq_text = raw.strip().partition("-")
        try:
            ms = int(ms_text)
            seq = int(seq_text) if sep else 0
        except ValueError:
            raise OffsetError(
                f"{what} {raw!r} is not a Redis stream entry ID: expected 'ms-seq' with two "
                "non-negative integers, for example '1700000000000-0'"
            ) from None
        if not (0 <= ms <= _MAX_MS and 0 <= seq <= MAX_SEQ):
            raise OffsetError(f"{what} {raw!r} is out of range for a Redis stream entry ID")
        return cls(ms, seq)

    def predecessor(self) -> EntryId:
        """The greatest ID strictly smaller than this one (``0-0`` has none and stays)."""
        if self.seq > 0:
            return EntryId(self.ms, self.seq - 1)
        if self.ms > 0:
            return EntryId(self.ms - 1, MAX_SEQ)
        return self

    def successor(self) -> EntryId:
        """The smallest ID strictly greater than this one."""
        if self.seq < MAX_SEQ:
            return EntryId(self.ms, self.seq + 1)
        return EntryId(self.ms + 1, 0)

    def exclusive(self) -> str:
        """This ID as the exclusive lower bound of an XRANGE (``(ms-seq``)."""
        return f"({self}"

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"


ZERO = EntryId(0, 0)
