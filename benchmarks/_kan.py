"""One KAN layer in hawk: the kernels bench_kan.py, tests/test_kan*.py and docs/kan.md share.

A KAN layer maps inputs ``x[s, i]`` to outputs ``y[s, o] = sum_{i,k} c[i*NB + k, o] *
B_k(x[s, i])``, where ``B_k`` are the ``NB = G + 3`` uniform cubic B-splines of a grid of
``G`` intervals on ``[lo, hi)``. It is two launches:

* :func:`KanKernels.basis` evaluates every basis function of every input into a table
  ``phi[r, s]``, ``r = i*NB + k`` (rows = input x basis, columns = samples), one lane per
  element in row-major order, so consecutive lanes write consecutive samples of one row;
* :func:`KanKernels.contract`, the seed's contraction ``y[s, o] = sum_r c[r, o] phi[r, s]``,
  which takes the GEMM route under ``policy.using(contraction="gemm")``.

The inputs are stored input-major, ``x[i, s]`` (the transpose of a torch batch), so the
basis kernel reads them, and its adjoint writes ``x_bar``, with consecutive lanes on
consecutive addresses. :func:`KanKernels.basis_adjoint` is that adjoint written by hand:
one lane per ``(i, s)`` that sums the 11 slopes times ``phi_bar`` and adds the result into
``x_bar`` with no atomics (``eagle.diff.reverse`` of the basis plan adds every lane's term
atomically instead).

The *local* kernels use that each input reaches only 4 of its ``NB`` basis functions:
the cell ``j = hm.floor(u)`` of ``u = (x - g0) / h`` names them (``k = j - 3 .. j``) and
the fraction ``u - j`` gives their 4 weights, so no ``phi`` is stored and no product runs.
They read ``c`` as ``(input, function, out)``, the same memory as the dense ``(row, out)``:

* :func:`KanKernels.local`, the forward: a lane per ``(s, o)`` over the inputs and their
  4 functions;
* :func:`KanKernels.local_x_bar`: a lane per ``(i, s)`` that sums ``c[i, k, o] *
  y_bar[s, o]`` over the outputs for its 4 functions and writes ``x_bar``;
* :func:`KanKernels.local_c_bar`, a chunked reduction over samples: a lane per
  ``(chunk, row)`` and 4 outputs writes the sums over its chunk of ``B_row(x) * y_bar``
  (each weight serves 4 outputs), and :func:`KanKernels.local_c_bar_sum` writes ``c_bar``
  as the sum over the chunks.

Differentiated by ``eagle.diff.reverse``, the local forward gives both gradients too: the
address through ``hm.floor`` is piecewise constant, so the gradient flows through the
weights.

:func:`cardinal`, :func:`cardinal_slope` and :func:`reference` are the same math on
numpy (float64) or torch arrays.
"""

# ruff: noqa: F821, F841 - hawk's axis annotations and output planes confuse these checks
# No ``from __future__ import annotations`` here: the table extents come from the factory's
# arguments, and hawk evaluates annotations in the kernel's module, where those are not.

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

import hawk
from hawk import math as hm


class KanKernels(NamedTuple):
    """The kernels of one KAN layer and its extents (see the module docstring)."""

    basis: hawk.Kernel
    contract: hawk.Kernel
    basis_adjoint: hawk.Kernel
    local: hawk.Kernel
    local_x_bar: hawk.Kernel
    local_c_bar: hawk.Kernel
    local_c_bar_sum: hawk.Kernel
    chunk: int
    samples: int
    inputs: int
    outputs: int
    intervals: int
    lo: float
    hi: float

    @property
    def functions(self) -> int:
        """Basis functions per input: ``intervals + 3``."""
        return self.intervals + 3

    @property
    def rows(self) -> int:
        """Contracted rows: ``inputs * functions``."""
        return self.inputs * self.functions


def kan_kernels(
    samples: int,
    inputs: int,
    outputs: int,
    intervals: int,
    lo: float = -1.0,
    hi: float = 1.0,
    chunk: int = 64,
) -> KanKernels:
    """The dense kernels (basis, contraction, hand-written basis adjoint) and the local
    ones (forward, ``x_bar``, ``c_bar``) for these extents.

    Args:
        samples, inputs, outputs: the batch size S, the layer's widths I and O.
        intervals: G, the grid's intervals on ``[lo, hi)``; each input has G + 3 functions.
        lo, hi: the grid's ends; inputs outside them get the basis functions' tails (zero
            beyond three intervals).
        chunk: the most samples one lane of :func:`KanKernels.local_c_bar` sums over; it
            sums over ``gcd(samples, chunk)``, a chunk that divides the samples.
    """
    S, NI, NO, NB = samples, inputs, outputs, intervals + 3
    R = NI * NB
    INV_H = intervals / (hi - lo)
    G0 = lo - 3.0 / INV_H  # the first knot: B_k is supported on [G0 + k h, G0 + (k + 4) h)

    @hawk.kernel
    def basis(x: hawk.Table["input":NI, "sample":S], phi: hawk.Mutable[hawk.Scalar]):
        row, s = hm.split_index(S)  # lane = row * S + s: phi[row, s], row = i * NB + k
        i = row // NB
        u = (x.at(input=i, sample=s) - G0) * INV_H - (row - i * NB)
        if u < 1.0:
            b = u * u * u
        elif u < 2.0:
            t = u - 1.0
            b = ((-3.0 * t + 3.0) * t + 3.0) * t + 1.0
        elif u < 3.0:
            t = u - 2.0
            b = (3.0 * t - 6.0) * t * t + 4.0
        else:
            t = 4.0 - u
            b = t * t * t
        phi = b * (1.0 / 6.0) if u >= 0.0 and u < 4.0 else 0.0

    @hawk.kernel
    def contract(
        c: hawk.Table["row":R, "out":NO],
        phi: hawk.Table["row":R, "sample":S],
        y: hawk.Mutable[hawk.Scalar],
    ):
        sample, out = hm.split_index(NO)  # lane = sample * O + out: y[s, o]
        acc = 0.0
        for r in range(R):
            acc = acc + c.at(row=r, out=out) * phi.at(row=r, sample=sample)
        y = acc

    @hawk.kernel
    def basis_adjoint(
        x: hawk.Table["input":NI, "sample":S],
        phi_bar: hawk.Table["row":R, "sample":S],
        x_bar: hawk.Mutable[hawk.Scalar],
    ):
        i, s = hm.split_index(S)  # lane = i * S + s: x_bar[i, s]
        t0 = (x.at(input=i, sample=s) - G0) * INV_H
        acc = 0.0
        for k in range(NB):  # every row, read coalesced: the slope is 0 off the support
            u = t0 - k
            if u < 1.0:
                d = 0.5 * u * u
            elif u < 2.0:
                t = u - 1.0
                d = (-1.5 * t + 1.0) * t + 0.5
            elif u < 3.0:
                t = u - 2.0
                d = (1.5 * t - 2.0) * t
            else:
                t = 4.0 - u
                d = -0.5 * t * t
            slope = d if u >= 0.0 and u < 4.0 else 0.0
            acc = acc + slope * phi_bar.at(row=i * NB + k, sample=s)
        x_bar = x_bar + acc * INV_H

    # -- the local kernels: each input reaches 4 basis functions and 4 rows of c ------------
    # With u = (x - G0) / h, j = floor(u) and t = u - j, the functions that are not 0 at x
    # are k = j - 3 + m, m = 0..3, weighing N(t + 3 - m): the four cubic pieces in t below
    # (dw: their slopes in u). A function k outside 0 .. NB - 1 (x in a tail of the grid)
    # does not exist: its index is clamped, so the read stays in range, and its weight is 0.
    # The int arithmetic runs on j clamped to -1 .. NB + 3, which changes no weight (beyond
    # it every k is outside): a clamped int fits 32 bits, so it runs in 32-bit arithmetic
    # (j itself may be any int64: x is any real).
    # c is read as (input, function, out), the same memory as the dense (row, out).
    CH = math.gcd(S, chunk)  # samples per chunk: they divide S
    NCH = S // CH  # chunks
    QO = -(-NO // 4)  # outputs per quarter: a local_c_bar lane sums for 4 of them

    @hawk.kernel
    def local(
        x: hawk.Table["input":NI, "sample":S],
        c: hawk.Table["input":NI, "fn":NB, "out":NO],
        y: hawk.Mutable[hawk.Scalar],
    ):
        s, o = hm.split_index(NO)  # lane = s * NO + o: y[s, o]
        acc = 0.0
        for i in range(NI):
            u = (x.at(input=i, sample=s) - G0) * INV_H
            j = hm.floor(u)
            t = u - j
            r = 1.0 - t
            cell = hm.minimum(hm.maximum(j, -1), NB + 3)  # j where any weight is not 0
            k0 = hm.minimum(hm.maximum(cell - 3, 0), NB - 1)
            k1 = hm.minimum(hm.maximum(cell - 2, 0), NB - 1)
            k2 = hm.minimum(hm.maximum(cell - 1, 0), NB - 1)
            k3 = hm.minimum(hm.maximum(cell, 0), NB - 1)
            w0 = r * r * r if k0 == cell - 3 else 0.0  # six times the weights
            w1 = (3.0 * t - 6.0) * t * t + 4.0 if k1 == cell - 2 else 0.0
            w2 = ((-3.0 * t + 3.0) * t + 3.0) * t + 1.0 if k2 == cell - 1 else 0.0
            w3 = t * t * t if k3 == cell else 0.0
            acc = acc + (
                w0 * c.at(input=i, fn=k0, out=o)
                + w1 * c.at(input=i, fn=k1, out=o)
                + w2 * c.at(input=i, fn=k2, out=o)
                + w3 * c.at(input=i, fn=k3, out=o)
            ) * (1.0 / 6.0)
        y = acc

    @hawk.kernel
    def local_x_bar(
        x: hawk.Table["input":NI, "sample":S],
        c: hawk.Table["input":NI, "fn":NB, "out":NO],
        y_bar: hawk.Table["sample":S, "out":NO],
        x_bar: hawk.Mutable[hawk.Scalar],
    ):
        i, s = hm.split_index(S)  # lane = i * S + s: x_bar[i, s], written
        u = (x.at(input=i, sample=s) - G0) * INV_H
        j = hm.floor(u)
        t = u - j
        r = 1.0 - t
        cell = hm.minimum(hm.maximum(j, -1), NB + 3)
        k0 = hm.minimum(hm.maximum(cell - 3, 0), NB - 1)
        k1 = hm.minimum(hm.maximum(cell - 2, 0), NB - 1)
        k2 = hm.minimum(hm.maximum(cell - 1, 0), NB - 1)
        k3 = hm.minimum(hm.maximum(cell, 0), NB - 1)
        g0, g1, g2, g3 = 0.0, 0.0, 0.0, 0.0
        for o in range(NO):  # the cotangent reaching each of the 4 functions
            g = y_bar.at(sample=s, out=o)
            g0 = g0 + c.at(input=i, fn=k0, out=o) * g
            g1 = g1 + c.at(input=i, fn=k1, out=o) * g
            g2 = g2 + c.at(input=i, fn=k2, out=o) * g
            g3 = g3 + c.at(input=i, fn=k3, out=o) * g
        dw0 = -0.5 * r * r if k0 == cell - 3 else 0.0
        dw1 = (1.5 * t - 2.0) * t if k1 == cell - 2 else 0.0
        dw2 = (-1.5 * t + 1.0) * t + 0.5 if k2 == cell - 1 else 0.0
        dw3 = 0.5 * t * t if k3 == cell else 0.0
        x_bar = (dw0 * g0 + dw1 * g1 + dw2 * g2 + dw3 * g3) * INV_H

    @hawk.kernel
    def local_c_bar(
        x: hawk.Table["input":NI, "sample":S],
        y_bar: hawk.Table["sample":S, "out":NO],
        p0: hawk.Mutable[hawk.Scalar],
        p1: hawk.Mutable[hawk.Scalar],
        p2: hawk.Mutable[hawk.Scalar],
        p3: hawk.Mutable[hawk.Scalar],
    ):
        # lane = (chunk * R + i * NB + k) * QO + og: the sums over one chunk of samples of
        # B_k(x[i, s]) * y_bar[s, o] for the 4 outputs o = og + m * QO, written into pm
        # (an output past the last repeats it). N(v) = N(4 - v), so with a = |v - 2| it is
        # 2/3 - a^2 + a^3 / 2 below a = 1 and (2 - a)^3 / 6 up to a = 2.
        chunk, row, og = hm.split_index(R, QO)
        first = chunk * CH
        i = row // NB
        k = row % NB
        o1 = hm.minimum(og + QO, NO - 1)
        o2 = hm.minimum(og + 2 * QO, NO - 1)
        o3 = hm.minimum(og + 3 * QO, NO - 1)
        a0, a1, a2, a3 = 0.0, 0.0, 0.0, 0.0
        for p in range(CH):
            s = first + p
            a = hm.abs((x.at(input=i, sample=s) - G0) * INV_H - k - 2.0)
            b = 2.0 - a
            near = (0.5 * a - 1.0) * a * a + 2.0 / 3.0
            far = b * b * b * (1.0 / 6.0) if a < 2.0 else 0.0
            w = near if a < 1.0 else far
            a0 = a0 + w * y_bar.at(sample=s, out=og)
            a1 = a1 + w * y_bar.at(sample=s, out=o1)
            a2 = a2 + w * y_bar.at(sample=s, out=o2)
            a3 = a3 + w * y_bar.at(sample=s, out=o3)
        p0, p1, p2, p3 = a0, a1, a2, a3

    @hawk.kernel
    def local_c_bar_sum(
        p0: hawk.Table["chunk":NCH, "row":R, "og":QO],
        p1: hawk.Table["chunk":NCH, "row":R, "og":QO],
        p2: hawk.Table["chunk":NCH, "row":R, "og":QO],
        p3: hawk.Table["chunk":NCH, "row":R, "og":QO],
        c_bar: hawk.Mutable[hawk.Scalar],
    ):
        row, o = hm.split_index(NO)  # lane = row * NO + o: c_bar[row, o], written
        m = o // QO  # which of a local_c_bar lane's 4 outputs o is
        og = o % QO
        acc = 0.0
        for chunk in range(NCH):
            if m == 0:
                v = p0.at(chunk=chunk, row=row, og=og)
            elif m == 1:
                v = p1.at(chunk=chunk, row=row, og=og)
            elif m == 2:
                v = p2.at(chunk=chunk, row=row, og=og)
            else:
                v = p3.at(chunk=chunk, row=row, og=og)
            acc = acc + v
        c_bar = acc

    return KanKernels(
        basis,
        contract,
        basis_adjoint,
        local,
        local_x_bar,
        local_c_bar,
        local_c_bar_sum,
        CH,
        S,
        NI,
        NO,
        intervals,
        lo,
        hi,
    )


Where = Callable[[Any, Any, Any], Any]


def cardinal(u: Any, where: Where) -> Any:
    """The uniform cubic B-spline ``N(u)`` on ``[0, 4)``, zero outside, for an array ``u``
    (numpy with ``where=np.where``, torch with ``torch.where``)."""
    t1, t2, t3 = u - 1.0, u - 2.0, 4.0 - u
    inner = where(
        u < 1.0,
        u * u * u,
        where(
            u < 2.0,
            ((-3.0 * t1 + 3.0) * t1 + 3.0) * t1 + 1.0,
            where(u < 3.0, (3.0 * t2 - 6.0) * t2 * t2 + 4.0, t3 * t3 * t3),
        ),
    )
    return where((u >= 0.0) & (u < 4.0), inner / 6.0, 0.0 * u)


def cardinal_slope(u: Any, where: Where) -> Any:
    """``dN/du``, zero outside ``[0, 4)``; arguments as :func:`cardinal`."""
    t1, t2, t3 = u - 1.0, u - 2.0, 4.0 - u
    inner = where(
        u < 1.0,
        0.5 * u * u,
        where(
            u < 2.0,
            (-1.5 * t1 + 1.0) * t1 + 0.5,
            where(u < 3.0, (1.5 * t2 - 2.0) * t2, -0.5 * t3 * t3),
        ),
    )
    return where((u >= 0.0) & (u < 4.0), inner, 0.0 * u)


def basis_arguments(layer: KanKernels, x: Any, functions: Any) -> Any:
    """``u[s, i, k] = (x[s, i] - g0) / h - k`` for a sample-major batch ``x`` (S, I) and
    ``functions = [0, 1, ..., NB - 1]`` (both numpy or both torch); ``cardinal(u)``
    reshaped to (S, I * NB) is ``phi`` transposed."""
    inv_h = layer.intervals / (layer.hi - layer.lo)
    g0 = layer.lo - 3.0 / inv_h
    return (x[:, :, None] - g0) * inv_h - functions


def reference(
    layer: KanKernels, x: np.ndarray, c: np.ndarray, y_bar: np.ndarray
) -> dict[str, np.ndarray]:
    """The layer in float64 numpy, in the kernels' layouts.

    Args:
        x: inputs, input-major (I, S). c: coefficients (R, O). y_bar: the cotangent of y,
            (S * O,) or (S, O).

    Returns:
        Contiguous arrays ``phi`` (R, S), ``y`` (S * O,), ``c_bar`` (R, O), ``phi_bar`` (R, S) and
        ``x_bar`` (I, S): the layer's values and the gradients of ``sum(y * y_bar)``.
    """
    x64, c64 = np.asarray(x, np.float64), np.asarray(c, np.float64)
    g = np.asarray(y_bar, np.float64).reshape(layer.samples, layer.outputs)
    u = basis_arguments(layer, x64.T, np.arange(layer.functions))  # (S, I, NB)
    phi = np.ascontiguousarray(cardinal(u, np.where).reshape(layer.samples, layer.rows).T)
    phi_bar = c64 @ g.T
    slope = cardinal_slope(u, np.where) * (layer.intervals / (layer.hi - layer.lo))
    per_function = phi_bar.T.reshape(layer.samples, layer.inputs, layer.functions)
    return {
        "phi": phi,
        "y": (phi.T @ c64).reshape(-1),
        "c_bar": phi @ g,
        "phi_bar": phi_bar,
        "x_bar": np.ascontiguousarray((slope * per_function).sum(axis=2).T),
    }
