# ruff: noqa: F821, UP037 - hawk's axis annotations
"""Kernels that add into small tables, for the privatised adds (hawk.emit.private)."""

from __future__ import annotations

import itertools
import linecache

import hawk
from hawk import math as hm

BINS = 1024
#: float32 cells whose one copy is exactly the 32 KiB a block's copies may take
AT_BOUND = 8192


_HISTOGRAM = """
@hawk.kernel
def histogram(x: hawk.Scalar, w: hawk.Scalar, counts: hawk.Mutable[hawk.Table["bin":{bins}]]):
    b = int(hm.minimum(hm.maximum(x * {bins}.0, 0.0), {last}.0))
    counts.add(bin=b, value=w)
"""
_COUNTER = """
@hawk.kernel
def counter(x: hawk.Scalar, counts: hawk.Mutable[hawk.Table["bin":{bins}]]):
    b = int(hm.minimum(hm.maximum(x * {bins}.0, 0.0), {last}.0))
    counts.add(bin=b, value={value})
"""
_made = itertools.count()


def _kernel(template: str, name: str, **fields: object) -> hawk.Kernel:
    """Kernel ``name`` of ``template`` filled with ``fields``, its source kept where hawk
    reads it (``linecache``)."""
    source = template.format(**fields)
    filename = f"<private kernel {next(_made)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"hawk": hawk, "hm": hm}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def make_histogram(bins: int) -> hawk.Kernel:
    """``counts[bin(x)] += w``, ``x`` in [0, 1) over ``bins`` bins, ``bin`` clamped."""
    return _kernel(_HISTOGRAM, "histogram", bins=bins, last=bins - 1)


def make_counter(bins: int, value: float = 1.0) -> hawk.Kernel:
    """``counts[bin(x)] += value`` for a constant ``value``: a counted table."""
    return _kernel(_COUNTER, "counter", bins=bins, last=bins - 1, value=repr(value))


histogram = make_histogram(BINS)
counter = make_counter(BINS)


@hawk.kernel
def counted_twice(x: hawk.Scalar, counts: hawk.Mutable[hawk.Table["bin":BINS]]):
    """Two adds of 0.5 a lane, one of them under an if: counted."""
    b = int(hm.minimum(hm.maximum(x * 1024.0, 0.0), 1023.0))
    counts.add(bin=b, value=0.5)
    if x > 0.5:
        counts.add(bin=1023 - b, value=0.5)


@hawk.kernel
def two_constants(x: hawk.Scalar, counts: hawk.Mutable[hawk.Table["bin":BINS]]):
    """Adds of two different constants: not counted."""
    b = int(hm.minimum(hm.maximum(x * 1024.0, 0.0), 1023.0))
    counts.add(bin=b, value=1.0)
    counts.add(bin=1023 - b, value=2.0)


@hawk.kernel
def counted_in_a_loop(x: hawk.Scalar, counts: hawk.Mutable[hawk.Table["bin":BINS]]):
    """Adds of one constant inside a loop: not counted (the count is not bounded by the
    lanes)."""
    b = int(hm.minimum(hm.maximum(x * 1024.0, 0.0), 1023.0))
    for m in range(3):
        counts.add(bin=(b + m) % 1024, value=1.0)


@hawk.kernel
def at_index(i: hawk.Scalar, w: hawk.Scalar, t: hawk.Mutable[hawk.Table]):
    """``t[int(i)] += w``, unclamped: a bad index is refused."""
    t.add(int(i), value=w)


@hawk.kernel
def two_tables(
    i: hawk.Scalar,
    w: hawk.Scalar,
    a: hawk.Mutable[hawk.Table],
    b: hawk.Mutable[hawk.Table["row":3, "col":5]],
):
    """Adds into a flat table and a named one."""
    k = int(i)
    a.add(k, value=w)
    b.add(row=k % 3, col=k % 5, value=w * 2.0)


@hawk.kernel
def branched(i: hawk.Scalar, w: hawk.Scalar, t: hawk.Mutable[hawk.Table["bin":16]]):
    """An add under an if whose condition depends on the lane."""
    if w > 0.0:
        t.add(bin=int(i), value=w)


@hawk.kernel
def uniform(w: hawk.Scalar, t: hawk.Mutable[hawk.Table["bin":4]]):
    """An add at the same address on every lane."""
    t.add(bin=1, value=w)
