"""Kernel-node arguments eagle owns, so that a rebind can point a node at other planes.

A rebind does not give a kernel node new parameters from nowhere: it keeps its own copy of
the node's arguments (:class:`ArgumentCopy`), which the node's parameters point at, writes
the planes' new addresses into 8-byte slots of that copy and sets the node again. For a
hawk kernel eagle knows where each plane's address lies (its packed arguments). For a
library's kernel (a cuBLAS product) it learns it (:class:`Patch`): from a capture over
moved planes, every changed 8-byte word of the arguments must be a plane's address moved
by that plane's move, and nothing else may change.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eagle.cuda import _graph_nodes as graph_nodes

__all__ = ["ALIGNED", "ArgumentCopy", "Patch", "pointer_words", "shifted"]

#: addresses that agree modulo this many bytes are aligned alike for cuBLAS, which picks its
#: kernels by the alignment of its operands: a product warmed or patched for one plane
#: serves a plane moved by a multiple of it
ALIGNED = 256

#: what a memset node's parameters hold besides its destination
_MEMSET_FIELDS = ("width", "height", "pitch", "value", "elementSize")

#: a pointer found in a kernel's arguments: (argument, byte offset, plane name, offset of
#: the address from the plane's start)
_Word = tuple[int, int, str, int]


class ArgumentCopy:
    """A kernel's arguments in one buffer of eagle's, each at its byte offset, and the
    array of their addresses that a kernel node's parameters take as ``kernelParams``."""

    def __init__(self, data: bytes, offsets: Sequence[int]) -> None:
        self._buffer = ctypes.create_string_buffer(data, max(len(data), 1))
        base = ctypes.addressof(self._buffer)
        self._pointers = (ctypes.c_void_p * len(offsets))(*[base + at for at in offsets])

    def give(self, params: Any) -> None:
        """Point a kernel node's ``params`` at these arguments."""
        params.kernelParams = ctypes.addressof(self._pointers)

    def slot(self, at: int) -> ctypes.c_uint64:
        """The 8 bytes at byte ``at`` of the buffer, to write an address into."""
        return ctypes.c_uint64.from_buffer(self._buffer, at)


def pointer_words(
    arguments: list[bytes], spans: Mapping[str, tuple[int, int]]
) -> list[_Word] | None:
    """The 8-byte words of ``arguments`` that point into a plane of ``spans`` (its first
    byte up to, not including, one past its last); None when one points into two planes."""
    words = []
    for index, data in enumerate(arguments):
        for at in range(0, len(data) - 7, 8):
            value = int.from_bytes(data[at : at + 8], "little")
            inside = [name for name, (start, end) in spans.items() if start <= value < end]
            if len(inside) > 1:
                return None
            if inside:
                words.append((index, at, inside[0], value - spans[inside[0]][0]))
    return words


def shifted(arguments: list[bytes], words: list[_Word], shifts: Mapping[str, int]) -> list[bytes]:
    """``arguments`` with each word of ``words`` whose plane ``shifts`` moves moved by as
    many bytes."""
    moved = [bytearray(data) for data in arguments]
    for index, at, name, _ in words:
        shift = shifts.get(name)
        if shift:
            value = int.from_bytes(moved[index][at : at + 8], "little") + shift
            moved[index][at : at + 8] = value.to_bytes(8, "little")
    return [bytes(data) for data in moved]


class Patch:
    """A library's nodes (a product site's), each set from eagle's own copy of its
    parameters: kernel arguments with the position of every plane pointer in them, memset
    destinations with the plane they lie in. Made by :meth:`learned`."""

    def __init__(self) -> None:
        self.params: list[Any] = []  # each node's parameters, as the graph has them
        self._setters: list[Callable[[], None]] = []
        self._words: dict[str, list[tuple[Any, int, int]]] = {}  # name -> (slot, offset, node)
        self._fills: dict[str, list[tuple[int, int]]] = {}  # name -> (offset, node)
        self._copies: list[ArgumentCopy] = []  # what the nodes' parameters point at

    @classmethod
    def learned(
        cls,
        exec_handle: Any,
        nodes: list[Any],
        previous: list[Any],
        params: list[Any],
        spans: Mapping[str, tuple[int, int]],
        shifts: Mapping[str, int],
    ) -> Patch | None:
        """The patch of ``nodes``, when moving each plane pointer found in the
        ``previous`` parameters (over the planes of ``spans``) by its plane's shift in
        ``shifts`` gives exactly the captured ``params``, and nothing else differs; else
        None."""
        found = []  # every node is checked before any is made a patch of
        for before, after in zip(previous, params, strict=True):
            if hasattr(after, "kernelParams"):
                old = graph_nodes.kernel_arguments(before)
                new = graph_nodes.kernel_arguments(after)
                if old is None or new is None or [len(a) for a in old] != [len(a) for a in new]:
                    return None
                if graph_nodes.launch_shape(before) != graph_nodes.launch_shape(after):
                    return None
            else:
                if any(getattr(before, f) != getattr(after, f) for f in _MEMSET_FIELDS):
                    return None
                # its destination, as one word
                old, new = ([int(p.dst).to_bytes(8, "little")] for p in (before, after))
            words = pointer_words(old, spans)
            if words is None or shifted(old, words, shifts) != new:
                return None
            found.append((new, words))
        patch = cls()
        for position, (node, after, (new, words)) in enumerate(
            zip(nodes, params, found, strict=True)
        ):
            if hasattr(after, "kernelParams"):
                patch._add_kernel(exec_handle, node, after, new, words, position)
            else:
                patch._add_fill(exec_handle, node, after, words, position)
        return patch

    def _add_kernel(
        self,
        exec_handle: Any,
        node: Any,
        params: Any,
        arguments: list[bytes],
        words: list[_Word],
        position: int,
    ) -> None:
        # each argument at an 8-byte boundary of one buffer, as the words were found
        padded = [data.ljust(-(-len(data) // 8) * 8, b"\0") for data in arguments]
        starts = list(itertools.accumulate((len(data) for data in padded), initial=0))
        copy = ArgumentCopy(b"".join(padded), starts[:-1])
        copy.give(params)
        self._copies.append(copy)
        for index, at, name, offset in words:
            slot = copy.slot(starts[index] + at)
            self._words.setdefault(name, []).append((slot, offset, position))
        handles = graph_nodes.driver_handles(exec_handle, node)
        self.params.append(params)
        self._setters.append(lambda: graph_nodes.set_kernel(*handles, params))

    def _add_fill(
        self, exec_handle: Any, node: Any, params: Any, words: list[_Word], position: int
    ) -> None:
        for _, _, name, offset in words:
            self._fills.setdefault(name, []).append((offset, position))
        self.params.append(params)
        self._setters.append(lambda: graph_nodes.set_memset(exec_handle, node, params))

    def point(self, spans: Mapping[str, tuple[int, int]]) -> None:
        """Point the nodes' plane pointers at the planes now at ``spans`` (name -> the
        plane's bytes) and set each node that changed."""
        touched = 0  # bit i: node i changed
        words, fills = self._words, self._fills
        for name, (ptr, _) in spans.items():
            for slot, offset, position in words.get(name, ()):
                slot.value = ptr + offset
                touched |= 1 << position
            for offset, position in fills.get(name, ()):
                self.params[position].dst = ptr + offset
                touched |= 1 << position
        for position, setter in enumerate(self._setters):
            if touched >> position & 1:
                setter()
