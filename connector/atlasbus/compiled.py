"""numba's compiler as the hot paths use it: cached machine code, and a memcpy (executor).

The loops that cut XRANGE replies (``atlasbus.xrange_reply``) and parse flat JSON maps
(``atlasbus.flat_json_maps``) are compiled once per installation and loaded from disk by each
worker. Only modules that work on column pages import this, so decoding alone never loads
the compiler.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any, TypeAlias

import numba
import numpy as np
import pyarrow as pa
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic


def binary_column(values: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """The bytes and the offsets (one more than the rows) of a binary column, for compiled
    loops to read where they lie; None for any other type, a null or no rows."""
    if values.type != pa.binary() or values.null_count or len(values) == 0:
        return None
    _, offsets_buffer, data_buffer = values.buffers()
    end = values.offset + len(values) + 1
    offsets = np.frombuffer(offsets_buffer, np.int32)[values.offset : end]
    if data_buffer is None:  # every value empty
        return np.empty(0, np.uint8), offsets
    return np.frombuffer(data_buffer, np.uint8), offsets


def compiled(function: Callable[..., Any]) -> Any:
    """``function`` compiled by numba, its machine code cached on disk.

    numba caches beside the module or in the user's cache directory, and refuses to compile
    (at import) when it can write to neither: a read-only installation run by a user without
    a home directory. The temporary directory serves then.
    """
    return _jit(function)


def inlined(function: Callable[..., Any]) -> Any:
    """A small helper of compiled loops, compiled into each loop that calls it.

    Called as a function of its own, each call to a scanner's helpers (whitespace, a string, a
    number) cost about as much as its work: the JSON object check took a fifth longer.
    """
    return _jit(function, inline="always")


def _jit(function: Callable[..., Any], **options: Any) -> Any:
    try:
        return njit(cache=True, nogil=True, **options)(function)
    except RuntimeError:  # "cannot cache function ...: no locator available for file ..."
        numba.config.CACHE_DIR = os.path.join(tempfile.gettempdir(), "atlasbus-numba-cache")
        return njit(cache=True, nogil=True, **options)(function)


@intrinsic
def copy_bytes(
    typing_context: Any, target: Any, target_at: Any, source: Any, source_at: Any, size: Any
) -> Any:
    """``target[target_at:][:size] = source[source_at:][:size]`` as one memcpy, unchecked.

    A loop over the bytes (what numba makes of a slice assignment) cost 15 times as much for
    the short values of an entry. Callers keep both ranges within their arrays.
    """
    signature = types.void(target, types.intp, source, types.intp, types.intp)

    def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        target_value, target_index, source_value, source_index, count = args
        target_array = context.make_array(signature.args[0])(context, builder, target_value)
        source_array = context.make_array(signature.args[2])(context, builder, source_value)
        cgutils.raw_memcpy(
            builder,
            builder.gep(target_array.data, [target_index]),
            builder.gep(source_array.data, [source_index]),
            count,
            1,
        )
        return context.get_dummy_value()

    return signature, generate


def _element(builder: Any, address: Any, index: Any, bits: int) -> Any:
    """In generated code: a pointer to element ``index`` of the ``bits``-wide integers at the
    integer ``address``, for the loads and stores below."""
    pointer = builder.inttoptr(address, ir.IntType(bits).as_pointer())
    return builder.gep(pointer, [index])


@intrinsic
def byte_at(typing_context: Any, address: Any, index: Any) -> Any:
    """The byte at ``address + index``, unchecked.

    Compiled helpers that take an array make numba count references to it at every call: two
    atomic operations per call, which cost five times the parsing in a loop of small helpers
    over a JSON text. Given the buffer's address (an integer) they count nothing. Callers keep
    the buffer alive and the index within it.
    """
    signature = types.uint8(types.intp, types.intp)

    def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address_value, index_value = args
        return builder.load(_element(builder, address_value, index_value, 8))

    return signature, generate


@intrinsic
def word_at(typing_context: Any, address: Any, index: Any) -> Any:
    """The 8 bytes at ``address + index`` as one little-endian integer, unchecked and unaligned.

    For scanning text a word at a time (``bytes_below``, ``bytes_equal``). Callers keep the
    8 bytes within the buffer.
    """
    signature = types.uint64(types.intp, types.intp)

    def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address_value, index_value = args
        byte = _element(builder, address_value, index_value, 8)
        return builder.load(builder.bitcast(byte, ir.IntType(64).as_pointer()), align=1)

    return signature, generate


@intrinsic
def put_byte(typing_context: Any, address: Any, index: Any, value: Any) -> Any:
    """Store ``value`` as the byte at ``address + index``, unchecked.

    For helpers that note things in an array their caller owns: writing through an array
    argument made numba count references to it at every call (15 ns, more than a short
    JSON text's parse), even in a helper compiled into its caller. Callers keep the array
    alive and the index within it.
    """
    signature = types.void(types.intp, types.intp, types.intp)

    def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address_value, index_value, byte_value = args
        byte = builder.trunc(byte_value, ir.IntType(8))
        builder.store(byte, _element(builder, address_value, index_value, 8))
        return context.get_dummy_value()

    return signature, generate


@intrinsic
def put_int(typing_context: Any, address: Any, index: Any, value: Any) -> Any:
    """Store ``value`` as element ``index`` of the int64 array at ``address``, unchecked, for
    the reason ``put_byte`` gives."""
    signature = types.void(types.intp, types.intp, types.int64)

    def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address_value, index_value, int_value = args
        builder.store(int_value, _element(builder, address_value, index_value, 64))
        return context.get_dummy_value()

    return signature, generate


# numba types an integer by its Python value: these stay unsigned 64-bit, as the words are
# (a signed operand would make numba compute in floating point).
_LOW_BITS = np.uint64(0x0101010101010101)
_HIGH_BITS = np.uint64(0x8080808080808080)
NO_BITS = np.uint64(0)  # a word's zero, unsigned as the words are
# A word as compiled code holds it (uint64); numpy's scalar arithmetic gives mypy no type.
Word: TypeAlias = Any


@inlined
def bytes_below(word: Word, limit: int) -> Word:
    """The high bit of each of the 8 bytes of ``word`` below ``limit`` (at most 128), branch-free.

    Exact at the lowest marked byte; a byte above it may be marked by the borrow, so callers
    take only the first (``first_marked``) or whether there is any.
    """
    return (word - _LOW_BITS * np.uint64(limit)) & ~word & _HIGH_BITS


@inlined
def bytes_equal(word: Word, byte: int) -> Word:
    """The high bit of each of the 8 bytes of ``word`` that is ``byte``, as ``bytes_below``."""
    return bytes_below(word ^ (_LOW_BITS * np.uint64(byte)), 1)


@inlined
def first_marked(marks: Word) -> int:
    """The index (0-7) of the lowest byte marked by ``bytes_below``; ``marks`` is not zero."""
    return int(trailing_zeros(marks)) >> 3


@inlined
def has_high_byte(word: int) -> bool:
    """Whether any of the 8 bytes of ``word`` is 128 or more: not ASCII."""
    return bool(word & _HIGH_BITS != NO_BITS)
