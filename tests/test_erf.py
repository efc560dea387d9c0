# ruff: noqa: F841 - kernels assign to their output planes
"""``hawk.math.erf`` and ``hawk.math.erfc``: their host form's accuracy in float64 and
float32 against Python's ``math.erf``/``math.erfc``, their derivative through
``hawk.diff.vjp``, and their CUDA form compiled by NVRTC. ``test_erf_gpu.py`` compares
the device with the host."""

from __future__ import annotations

import math

import numpy as np
import pytest

import eagle.plan
import hawk
import hawk.diff
from eagle.cuda import compile_cuda
from hawk import math as hm
from hawk.emit import cuda, host

#: where the host form changes its approximation, and the points either side of each
EDGES = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 26.0, 28.0)


def _around_edges() -> np.ndarray:
    edges = np.array(EDGES)
    points = np.concatenate([edges, np.nextafter(edges, 0.0), np.nextafter(edges, np.inf)])
    return np.concatenate([points, -points, [0.0, -0.0, 1e-300, 5e-324, 1e-8, -1e-8]])


@hawk.kernel
def erf_and_erfc(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], z: hawk.Mutable[hawk.Scalar]):
    y = hm.erf(x)
    z = hm.erfc(x)


@hawk.kernel
def mixed(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = hm.erf(x * 0.5) * 3.0 - hm.erfc(x) * x


def test_erf_is_within_2e16_of_math_erf_over_minus_6_to_6() -> None:
    x = np.concatenate([np.linspace(-6.0, 6.0, 1_200_001), _around_edges()])
    x = x[np.abs(x) <= 6.0]
    expected = np.array([math.erf(value) for value in x])
    got = hm.erf(x)
    assert got.dtype == np.float64
    worst = np.abs(got - expected).max()
    assert worst <= 2e-16, f"erf is {worst:.3g} from math.erf"
    assert np.array_equal(np.signbit(hm.erf(np.array([0.0, -0.0]))), [False, True])


def test_erfc_is_within_1e13_relative_of_math_erfc_up_to_26_and_below_0() -> None:
    x = np.concatenate([np.linspace(-30.0, 26.0, 1_120_001), _around_edges()])
    x = x[x <= 26.0]
    expected = np.array([math.erfc(value) for value in x])
    got = hm.erfc(x)
    worst = np.abs(got / expected - 1.0).max()
    assert worst <= 1e-13, f"erfc is {worst:.3g} from math.erfc, relatively"
    negative = got[x < 0.0]
    assert np.all((negative > 1.0) & (negative <= 2.0))  # sensible below 0: 1 < erfc <= 2


def test_special_values() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 6.0, -6.0, 28.0, 1e300, -1e300])
    np.testing.assert_array_equal(hm.erf(x), [np.nan, 1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0])
    np.testing.assert_array_equal(hm.erfc(x), [np.nan, 0.0, 2.0, hm.erfc(6.0), 2.0, 0, 0, 2])
    assert hm.erfc(6.0) == pytest.approx(math.erfc(6.0), rel=1e-15)


@pytest.mark.parametrize("name", ["erf", "erfc"])
def test_float32_is_within_2_ulp_of_the_rounded_float64_value(name: str) -> None:
    function, reference = getattr(hm, name), getattr(math, name)
    x = np.concatenate([np.linspace(-6.0, 9.0, 300_001), _around_edges()]).astype(np.float32)
    x = x[np.abs(x) <= 9.0]  # erfc(9) = 4e-37, a normal float32
    expected = np.array([reference(float(value)) for value in x]).astype(np.float32)
    ulp = np.spacing(np.abs(expected)).astype(np.float64)
    for got in (function(x), _host_kernel(name, x)):
        assert got.dtype == np.float32
        worst = (np.abs(got.astype(np.float64) - expected.astype(np.float64)) / ulp).max()
        assert worst <= 2.0, f"float32 {name} is {worst:.3g} ulp from the rounded value"


def _host_kernel(name: str, x: np.ndarray) -> np.ndarray:
    """``name`` of ``x`` computed by the numpy program of a float32 kernel."""
    planes = {"x": x, "y": np.full_like(x, np.nan), "z": np.full_like(x, np.nan)}
    eagle.plan.auto(erf_and_erfc).run(**planes)
    return planes["y" if name == "erf" else "z"]


def test_numbers_and_arrays_keep_their_kind() -> None:
    assert isinstance(hm.erf(0.5), np.float64) and hm.erf(0.5) == math.erf(0.5)
    assert isinstance(hm.erfc(np.float32(0.5)), np.float32)
    assert hm.erf(1) == math.erf(1.0)  # an int computes in float64
    values = [[0.25, 1.5], [-2.0, 30.0]]
    grid = hm.erfc(values)
    assert grid.shape == (2, 2) and grid.dtype == np.float64
    np.testing.assert_allclose(grid, [[math.erfc(v) for v in row] for row in values], rtol=1e-15)
    assert hm.erf(np.zeros(0)).shape == (0,)
    with pytest.raises(TypeError, match="takes 1 argument"):
        hm.erf(1.0, 2.0)


def test_the_host_program_calls_hawks_own_function() -> None:
    program = host.emit(erf_and_erfc.ir, {"x": "float64", "y": "float64", "z": "float64"})
    assert "_hawk_erf(l_x)" in program.source and "_hawk_erfc(l_x)" in program.source


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_cuda_form_compiles_for_sm_90(dtype: str) -> None:
    suffix = "f" if dtype == "float32" else ""
    text = cuda.emit(erf_and_erfc.ir, dict.fromkeys(("x", "y", "z"), dtype)).source
    assert f"erf{suffix}(l_x)" in text and f"erfc{suffix}(l_x)" in text
    for kernel in (erf_and_erfc, mixed, hawk.diff.vjp(mixed)):  # the adjoint reads erfc
        source = cuda.emit(kernel.ir, {p.name: dtype for p in kernel.planes})
        compile_cuda(source.source, name=source.name, arch="sm_90")


def test_the_derivative_through_vjp_matches_finite_differences(rng: np.random.Generator) -> None:
    x = rng.uniform(-3.0, 3.0, 2001)
    adjoint = eagle.plan.auto(hawk.diff.vjp(mixed))
    y_bar = rng.standard_normal(x.size)
    x_bar = np.zeros_like(x)
    adjoint.run(x=x, y_bar=y_bar, x_bar=x_bar)

    def primal(values: np.ndarray) -> np.ndarray:
        return hm.erf(values * 0.5) * 3.0 - hm.erfc(values) * values

    step = 1e-5
    expected = (primal(x + step) - primal(x - step)) / (2 * step) * y_bar
    np.testing.assert_allclose(x_bar, expected, rtol=1e-7, atol=1e-9)
    gauss = 2.0 / math.sqrt(math.pi)
    exact = (1.5 * gauss * np.exp(-x * x / 4) + gauss * np.exp(-x * x) * x - hm.erfc(x)) * y_bar
    np.testing.assert_allclose(x_bar, exact, rtol=1e-13, atol=1e-15)
