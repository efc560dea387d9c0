# ruff: noqa: F821, F841, UP037, SIM108
# Kernels assign to their output planes (F841), name table axes with string slices (F821,
# UP037: pyflakes reads Table["row":R] as forward references) and test if statements (SIM108).
"""Kernels of the eagle.torch tests (host and device), each with the same math in torch.

``REFERENCES`` maps a kernel to a function of the same keyword tensors that
computes its outputs with torch operations, for comparing values and gradients.
The kernels themselves need no torch (the stream tests use them without it), so
torch is imported only where it is there; the references need it when called.
"""

from __future__ import annotations

import contextlib

with contextlib.suppress(ImportError):
    import torch

import hawk
from hawk import math as hm
from tests._diff_kernels import square_in_place  # an output read before it is written
from tests._route_kernels import B, R, U, contract  # extents differ: a swapped product fails

N = 6


@hawk.kernel
def scale_add(x: hawk.Scalar, z: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = 0.5 * x + z


@hawk.kernel
def first_only(x: hawk.Scalar, z: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = x  # z has a gradient plane, and nothing depends on it


@hawk.kernel
def affine(x: hawk.Scalar, a: hawk.Param, b: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + b


@hawk.kernel
def branchy(c: hawk.Table, x: hawk.Scalar, s: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for i in range(4):
        term = c.at(i) * x
        if term > 0.0:
            acc = acc + term * s
        else:
            acc = acc - 0.5 * term * term
    y = hm.tanh(acc)


@hawk.kernel
def gather(
    t: hawk.Table["i":N], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], z: hawk.Mutable[hawk.Scalar]
):
    lane = hm.sample_index()
    y = t.at(i=(lane * 5) % N) * x
    z = t.at(i=lane % N) + x * x


@hawk.kernel
def binned(x: hawk.Scalar, w: hawk.Param, counts: hawk.Mutable[hawk.Table["bin":N]]):
    counts.add(bin=hm.sample_index() % N, value=w * x)


@hawk.kernel
def axpb(x: hawk.Scalar, a: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + y  # reads y, and its adjoint does not need y's value


@hawk.kernel
def tally(x: hawk.Scalar, w: hawk.Param, counts: hawk.Mutable[hawk.Table["bin":N]]):
    counts.add(bin=(hm.sample_index() * 5) % N, value=w * x * x)  # adds into its initial value


@hawk.kernel
def sine_square(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = hm.sin(x) * hm.sin(x)  # a repeated value: its forward mode is an adjoint's adjoint


@hawk.kernel
def wraps(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    # int(x) * 2**64 is 0 modulo 2**64: y is 0 where ints wrap, an overflow where they are
    # checked (for int(x) != 0), forward and backward
    y = x * float(int(x) * 4611686018427387904 * 4)


@hawk.kernel
def cubic(x: hawk.Scalar, c: hawk.Table["k":2], y: hawk.Mutable[hawk.Scalar]):
    y = c.at(k=0) * x * x * x + c.at(k=1) * hm.sin(x)  # second derivatives in x and c


@hawk.kernel
def ramp(a: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    y = a * float(hm.sample_index())


@hawk.kernel
def over(x: hawk.Scalar, a: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    y = x / a  # a Param of -0.0 gives -inf, of 0.0 +inf


@hawk.kernel
def twice(self: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = 2.0 * self  # a plane named as a method's first argument


def _lanes(x: torch.Tensor) -> torch.Tensor:
    return torch.arange(x.numel(), device=x.device)


REFERENCES = {
    scale_add: lambda x, z: 0.5 * x + z,
    affine: lambda x, a, b: a * x + b,
    branchy: lambda c, x, s: torch.tanh(
        sum(torch.where(c[i] * x > 0, c[i] * x * s, -0.5 * (c[i] * x) ** 2) for i in range(4))
    ),
    gather: lambda t, x: (t[(_lanes(x) * 5) % N] * x, t[_lanes(x) % N] + x * x),
    contract: lambda w, f: (f.reshape(R, B).T @ w.reshape(R, U)).reshape(-1),
    square_in_place: lambda x, y: y * y * x,
    binned: lambda x, w: torch.zeros(N, dtype=x.dtype, device=x.device).index_add(
        0, _lanes(x) % N, w * x
    ),
    axpb: lambda x, a, y: a * x + y,
    tally: lambda x, w, counts: counts.index_add(0, (_lanes(x) * 5) % N, w * x * x),
    cubic: lambda x, c: c[0] * x**3 + c[1] * torch.sin(x),
    sine_square: lambda x: torch.sin(x) * torch.sin(x),
}


@hawk.kernel
def stored_and_summed(
    a: hawk.Param,
    x: hawk.Scalar,
    w: hawk.Table["k":1],
    y: hawk.Mutable[hawk.Scalar],
    t: hawk.Mutable[hawk.Table["k":1]],
):
    y = a * x * w.at(k=0)  # stored by the kernel
    t.add(k=0, value=a * x * w.at(k=0))  # summed over lanes, then rounded


@hawk.kernel
def passed_through(x: hawk.Scalar, t: hawk.Mutable[hawk.Table["k":1]]):
    t.add(k=0, value=x)  # its initial value's gradient is its cotangent


def inputs(kernel: hawk.Kernel, dtype: torch.dtype, device: str, lanes: int = 9) -> dict:
    """Fresh random inputs of ``kernel`` (never zeros), requiring grad."""
    shapes = {
        scale_add: {"x": (lanes,), "z": (lanes,)},
        affine: {"x": (lanes,), "a": (), "b": ()},
        branchy: {"c": (4,), "x": (lanes,), "s": ()},
        gather: {"t": (N,), "x": (lanes,)},
        contract: {"w": (R, U), "f": (R, B)},
        square_in_place: {"x": (lanes,), "y": (lanes,)},
        binned: {"x": (lanes,), "w": ()},
        axpb: {"x": (lanes,), "a": (), "y": (lanes,)},
        tally: {"x": (lanes,), "w": (), "counts": (N,)},
        cubic: {"x": (lanes,), "c": (2,)},
        sine_square: {"x": (lanes,)},
    }[kernel]
    return {
        name: (torch.randn(shape, dtype=dtype, device=device) + 0.1).requires_grad_()
        for name, shape in shapes.items()
    }


@hawk.kernel
def root_scaled(x: hawk.Scalar, z: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = x * x * hm.sqrt(z)  # dy/dz is +inf where z is 0; y and dy/dx are finite there


@hawk.kernel
def root_and_square(
    x: hawk.Scalar, z: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], w: hawk.Mutable[hawk.Scalar]
):
    y = x * hm.sqrt(z)  # dy/dz is +inf where z is 0
    w = x * x


@hawk.kernel
def rooted_tally(
    t: hawk.Table["i":N], y: hawk.Mutable[hawk.Scalar], h: hawk.Mutable[hawk.Table["bin":N]]
):
    v = t.at(i=hm.sample_index() % N)  # no Scalar input: y is the only lane plane
    y = hm.sqrt(v)
    h.add(bin=hm.sample_index() % N, value=3.0 * v)
