# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["i":N], which pyflakes reads as forward references (F821, UP037).
"""Kernels and helpers of the reverse-mode tests (host and device).

:data:`ALL` is every kernel of :mod:`tests._hawk_kernels` plus four that
cover what those do not: a loop with a step of 3 and a nonlinear carry, an
empty loop, a read guarded by a conditional expression, and an output read
before it is written (whose old value the adjoint needs), and uniform values (a
loop carried on every lane alike, an int carry used as an address, and an if
on a param).
"""

from __future__ import annotations

import numpy as np

import hawk
import hawk.diff
from hawk import math as hm
from tests._hawk_kernels import CASES, Case


@hawk.kernel
def strided(w: hawk.Table, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    p = 1.0
    for k in range(1, 10, 3):
        p = p * hm.sin(x + w.at(k))
        if p < 0.0:
            p = -p * 0.5
    q = x
    for _k in range(3, 3):
        q = q * x
    y = p / (1.0 + x * x) + q if x > -1.0 else hm.exp(x) - p * w.at(0)


def _strided_make(rng, dtype):
    return {
        "w": rng.standard_normal(10).astype(dtype),
        "x": rng.uniform(-2, 2, 300).astype(dtype),
        "y": np.full(300, np.nan, dtype),
    }


def _strided_ref(p):
    w, x = p["w"].astype(np.float64), p["x"].astype(np.float64)
    acc = np.ones_like(x)
    for k in range(1, 10, 3):
        acc = acc * np.sin(x + w[k])
        acc = np.where(acc < 0, -acc * 0.5, acc)
    return {"y": np.where(x > -1.0, acc / (1.0 + x * x) + x, np.exp(x) - acc * w[0])}


@hawk.kernel
def square_in_place(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = y * y * x


def _square_make(rng, dtype):
    return {
        "x": rng.standard_normal(200).astype(dtype),
        "y": rng.standard_normal(200).astype(dtype),
    }


def _square_ref(p):
    return {"y": p["y"].astype(np.float64) ** 2 * p["x"]}


NG = 17


@hawk.kernel
def guarded(t: hawk.Table["i":NG], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    i = hm.sample_index()
    y = t.at(i=i) * x if i < NG else hm.minimum(x, 0.5) * 2.0


def _guarded_make(rng, dtype):
    return {
        "t": rng.standard_normal(NG).astype(dtype),
        "x": rng.standard_normal(40).astype(dtype),
        "y": np.full(40, np.nan, dtype),
    }


def _guarded_ref(p):
    x = p["x"].astype(np.float64)
    padded = np.concatenate([p["t"].astype(np.float64), np.zeros(x.size - NG)])
    return {"y": np.where(np.arange(x.size) < NG, padded * x, np.minimum(x, 0.5) * 2.0)}


@hawk.kernel
def uniform(a: hawk.Param, t: hawk.Table, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    c = 1.0
    j = 0
    for _k in range(4):
        c = c * a + t.at(j)
        j = j + 2
    if a > 0.5:  # noqa: SIM108 - an if statement (not an expression) on a param
        s = c * c
    else:
        s = -c
    y = s * x + hm.exp(a)


def _uniform_make(rng, dtype):
    return {
        "a": np.array([rng.uniform(0.6, 1.2)], dtype),
        "t": rng.standard_normal(8).astype(dtype),
        "x": rng.standard_normal(100).astype(dtype),
        "y": np.full(100, np.nan, dtype),
    }


def _uniform_ref(p):
    a, t = float(p["a"][0]), p["t"].astype(np.float64)
    c = 1.0
    for k in range(4):
        c = c * a + t[2 * k]
    s = c * c if a > 0.5 else -c
    return {"y": s * p["x"].astype(np.float64) + np.exp(a)}


EXTRA = [
    Case("strided", strided, _strided_make, _strided_ref),
    Case("square_in_place", square_in_place, _square_make, _square_ref, read_first=("y",)),
    Case("guarded", guarded, _guarded_make, _guarded_ref),
    Case("uniform", uniform, _uniform_make, _uniform_ref),
]
ALL = CASES + EXTRA


# two launches of a chain whose gradient planes may share part of their memory
@hawk.kernel
def read_eight(t: hawk.Table["k":8], y: hawk.Mutable[hawk.Scalar]):
    y = t.at(k=hm.sample_index() % 8) * 3.0


@hawk.kernel
def read_four(t: hawk.Table["k":4], y: hawk.Mutable[hawk.Scalar]):
    y = t.at(k=hm.sample_index() % 4) * 2.0


def random_cotangents(
    kernel: hawk.Kernel, planes, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """A random cotangent for each output of ``kernel``, shaped and typed like its plane."""
    return {
        out: rng.standard_normal(planes[out].shape).astype(planes[out].dtype)
        for out in hawk.diff.cotangent_planes(kernel)
    }


def adjoint_planes(
    kernel: hawk.Kernel, planes, cotangents, wrt, rng: np.random.Generator
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The planes of the adjoint of ``kernel`` for ``wrt`` (its gradient planes start
    at random values, never zeros) and a copy of those starting values."""
    adjoint = hawk.diff.vjp(kernel, wrt)
    given: dict[str, np.ndarray] = {}
    for plane in adjoint.planes:
        if plane.name in planes:
            given[plane.name] = planes[plane.name].copy()
    for out, cotangent in hawk.diff.cotangent_planes(kernel).items():
        given[cotangent] = cotangents[out].copy()
    start = {}
    for name, gradient in adjoint.gradients.items():
        start[gradient] = rng.standard_normal(planes[name].shape).astype(planes[name].dtype)
        given[gradient] = start[gradient].copy()
    return given, start


# powers whose partials are zero where the power does not change (x ** 0 in x, 0 ** a in a)
@hawk.kernel
def power_zero(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = x**0.0 + x


@hawk.kernel
def power_param(x: hawk.Scalar, a: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    y = x**a


@hawk.kernel
def lanes_only(y: hawk.Mutable[hawk.Scalar]):
    y = float(hm.sample_index())  # nothing to differentiate with respect to
