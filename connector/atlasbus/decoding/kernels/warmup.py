"""A small XRANGE reply run through every compiled kernel, to load their machine code (executor).

Two entries, one well formed and one not, walked and cut into a column per field and into
names and values, and each page decoded as a task would: every kernel those paths call is
compiled, or loaded from numba's cache, and run once. ``atlasbus.decoding.kernels.selection`` calls
it to decide whether the kernels serve; ``atlasbus.preload`` decodes the same entries as
hiredis's lists for the pure path.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

SAMPLE_TOPIC = "preload"
SAMPLE_STREAM = "atlas:preload"
_ENTRIES: Sequence[tuple[bytes, Sequence[tuple[bytes, bytes]]]] = (
    (
        b"1700000000000-0",
        (
            (b"topic", SAMPLE_TOPIC.encode()),
            (b"priority", b"5"),
            (b"payload", json.dumps({"id": 1, "items": [{"sku": "A", "qty": 2}]}).encode()),
            (b"correlation_id", b"c0ffee"),
            (b"tracing", b'{"trace_id": "abc"}'),
            (b"metadata", b"{}"),
            (b"delivery_attempts", b"0"),
            (b"enqueued_time", b"1700000000.000001"),
        ),
    ),
    (
        b"1700000000000-1",
        (
            (b"topic", SAMPLE_TOPIC.encode()),
            (b"priority", b"high"),
            (b"payload", b"[not json"),
            (b"correlation_id", b"c0ffee"),
            (b"tracing", b'{"trace_id": 7}'),
            (b"metadata", b"{"),
            (b"delivery_attempts", b"-1"),
            (b"enqueued_time", b"soon"),
        ),
    ),
)


def sample_entries() -> list[Any]:
    """The sample's entries as hiredis gives them: [ID, [name, value, ...]]."""
    return [[entry_id, [part for pair in fields for part in pair]] for entry_id, fields in _ENTRIES]


def run_every_kernel() -> None:
    """Walk, cut and decode the sample with the compiled kernels (compiling them if need be)."""
    import numpy as np

    from atlasbus.decoding.decoder import decode_envelope_page, decode_raw
    from atlasbus.decoding.kernels.cut_any_layout import PairWalk, cut_pairs, walk_pairs
    from atlasbus.decoding.kernels.cut_one_layout import COMPLETE, Walk, cut_reply, walk_reply

    reply = _xrange_reply(_ENTRIES)
    buffer = np.frombuffer(bytearray(reply), np.uint8)
    walk, pair_walk = Walk(), PairWalk()
    if (
        walk_reply(buffer, len(reply), walk) != COMPLETE
        or walk_pairs(buffer, len(reply), pair_walk) != COMPLETE
    ):
        raise RuntimeError("the sample XRANGE reply did not walk to its end")
    page = cut_reply(buffer, walk)
    if page is None:
        raise RuntimeError("the sample XRANGE reply was not cut into columns")
    pairs = cut_pairs(buffer, [pair_walk])
    for cut in (page, pairs):
        decode_envelope_page(
            cut, topic=SAMPLE_TOPIC, stream=SAMPLE_STREAM, include_raw_fields=False
        )
        decode_raw(cut, topic=SAMPLE_TOPIC, stream=SAMPLE_STREAM)


def _xrange_reply(entries: Sequence[tuple[bytes, Sequence[tuple[bytes, bytes]]]]) -> bytes:
    """The RESP2 bytes Redis sends for an XRANGE that finds ``entries``."""

    def bulk(value: bytes) -> bytes:
        return b"$%d\r\n%s\r\n" % (len(value), value)

    parts = [b"*%d\r\n" % len(entries)]
    for entry_id, fields in entries:
        parts.append(b"*2\r\n" + bulk(entry_id) + b"*%d\r\n" % (2 * len(fields)))
        parts.extend(bulk(name) + bulk(value) for name, value in fields)
    return b"".join(parts)
