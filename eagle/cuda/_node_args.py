"""The arguments of captured nodes, as a rebind moves them without capturing again.

Another library's kernel nodes (cuBLAS products) take arguments eagle did not pack:
their parameters come only from a capture. A rebind of such nodes first captures the
work again over the new planes and copies the new nodes' parameters over
(:mod:`eagle.cuda._rebind`). Comparing the two captures shows which argument words
hold a plane's address: each word that differs must have moved by exactly the distance
its plane moved (:func:`learn`). Once learned, eagle keeps its own copy of each node's
arguments (:class:`NodeArgs`), and a later rebind of those planes, to addresses aligned
as before, adds each plane's distance to its words and gives each node the patched
arguments: one driver call per node, no capture, no cuBLAS call.

A difference that no plane's move explains (cuBLAS chose another kernel, another
launch shape or other non-address arguments) leaves nothing learned, and such work is
always captured again.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

from eagle._cache import KeyedCache
from eagle.cuda import _graph_nodes as graph_nodes

__all__ = ["ALIGNED", "NodeArgs", "Word", "learn", "read_args"]

ALIGNED = 256
"""Bytes: a plane moved by a multiple of this is aligned alike for cuBLAS, which then
picks the kernels it picked before (so learned words can be patched)."""

_WORD = 8  # an address argument is 8 bytes, 8-byte aligned in its argument
_SHAPE = ("gridDimX", "gridDimY", "gridDimZ", "blockDimX", "blockDimY", "blockDimZ",
          "sharedMemBytes")  # fmt: skip
_MEMSET = ("value", "width", "height", "pitch", "elementSize")

#: a kernel function's handle -> the byte size of each of its arguments (None: unknown)
_sizes: KeyedCache[int, tuple[int, ...] | None] = KeyedCache("kernel argument sizes", 256)


class Word(NamedTuple):
    """One argument word that holds an address in a plane.

    Attributes:
        node: the node's position in its site's chain.
        argument: the argument's position (-1: a memset node's destination).
        at: the word's byte offset in the argument.
        plane: the plane's name.
    """

    node: int
    argument: int
    at: int
    plane: str


def argument_sizes(params: Any) -> tuple[int, ...] | None:
    """The byte size of each argument of the kernel node with ``params``, or None when
    the driver cannot say (then only a capture gives its arguments)."""
    if not int(params.kernelParams):  # arguments packed in one buffer ("extra")
        return None
    key = int(params.func) or int(params.kern)
    if key not in _sizes:
        _sizes[key] = graph_nodes.argument_sizes(params)
    return _sizes.get(key)


def read_args(params: Any, sizes: tuple[int, ...]) -> list[bytes]:
    """The bytes of each argument of a kernel node's ``params``."""
    pointers = (ctypes.c_void_p * len(sizes)).from_address(int(params.kernelParams))
    return [
        ctypes.string_at(pointer or 0, size) for pointer, size in zip(pointers, sizes, strict=True)
    ]


class NodeArgs:
    """eagle's own copy of one kernel node's arguments, and the driver's struct that
    points at it (what ``cuGraphExecKernelNodeSetParams`` takes)."""

    def __init__(self, params: Any, sizes: tuple[int, ...]) -> None:
        values = read_args(params, sizes)
        self._offsets = []
        at = 0
        for size in sizes:
            self._offsets.append(at)
            at += -(-size // _WORD) * _WORD  # each argument 8-byte aligned in our copy
        self._data = ctypes.create_string_buffer(max(at, 1))
        for offset, value in zip(self._offsets, values, strict=True):
            ctypes.memmove(ctypes.addressof(self._data) + offset, value, len(value))
        base = ctypes.addressof(self._data)
        self._array = (ctypes.c_void_p * len(sizes))(*[base + at for at in self._offsets])
        params.kernelParams = ctypes.addressof(self._array)
        self.params = params

    def add(self, argument: int, at: int, distance: int) -> None:
        """Move the address word ``at`` bytes into ``argument`` by ``distance`` bytes."""
        word = ctypes.c_uint64.from_buffer(self._data, self._offsets[argument] + at)
        word.value = (word.value + distance) % (1 << 64)


def learn(
    old: list[Any], new: list[Any], moved: Mapping[str, tuple[int, int, int]]
) -> list[Word] | None:
    """The argument words that hold plane addresses, from each node's parameters as
    captured over the old planes (``old``) and again over the new (``new``): every word
    that differs must have moved by its plane's distance. ``moved`` gives each plane
    that moved: its old start and end, and its new start. None when some difference is
    no plane's move, or the driver cannot give a node's arguments."""
    words: list[Word] = []
    for node, (before, after) in enumerate(zip(old, new, strict=True)):
        if hasattr(before, "kernelParams"):
            sizes = argument_sizes(before)
            if sizes is None or argument_sizes(after) != sizes:
                return None
            if any(getattr(before, name) != getattr(after, name) for name in _SHAPE):
                return None
            pairs = zip(read_args(before, sizes), read_args(after, sizes), strict=True)
            for argument, (was, now) in enumerate(pairs):
                if was == now:
                    continue
                found = _moved_words(was, now, moved)
                if found is None:
                    return None
                words += [Word(node, argument, at, plane) for at, plane in found]
        else:
            if any(getattr(before, name) != getattr(after, name) for name in _MEMSET):
                return None
            start, to = int(before.dst), int(after.dst)
            if start != to:
                plane = _plane_moved(start, to, moved)
                if plane is None:
                    return None
                words.append(Word(node, -1, 0, plane))
    return words


def _moved_words(
    was: bytes, now: bytes, moved: Mapping[str, tuple[int, int, int]]
) -> list[tuple[int, str]] | None:
    """The offsets of the words of one argument that differ, each with the plane whose
    move explains it; None when a difference is unexplained."""
    whole = len(was) - len(was) % _WORD
    if was[whole:] != now[whole:]:
        return None
    found = []
    for at in range(0, whole, _WORD):
        if was[at : at + _WORD] == now[at : at + _WORD]:
            continue
        (old,) = struct.unpack_from("<Q", was, at)
        (new,) = struct.unpack_from("<Q", now, at)
        plane = _plane_moved(old, new, moved)
        if plane is None:
            return None
        found.append((at, plane))
    return found


def _plane_moved(old: int, new: int, moved: Mapping[str, tuple[int, int, int]]) -> str | None:
    """The plane whose memory holds address ``old`` (its end included) and that moved
    by ``new - old``, or None."""
    for plane, (start, end, to) in moved.items():
        if start <= old <= end and new - old == to - start:
            return plane
    return None
