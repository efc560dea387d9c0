"""``hawk.math.erf`` and ``hawk.math.erfc`` on the device (CUDA's ``erf``/``erff``,
``erfc``/``erfcf``) against the host's own forms, forward and through the adjoint (run
with ``nox -s gpu``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import eagle.plan
import hawk.diff
from eagle import arrays
from tests._util import rel_error
from tests.test_erf import erf_and_erfc, mixed

pytestmark = pytest.mark.gpu

#: the most ulps either side may be from the exact value: CUDA documents at most 2 (erf)
#: and 4 or 5 (erfc); hawk's float64 host forms measured at most 2 and 4
ULP = 6.0
#: where the values are normal numbers in each precision, so ulps mean the same
RANGE = {"float32": (-6.0, 9.0), "float64": (-8.0, 26.0)}


def _ulps(got: np.ndarray, expected: np.ndarray) -> float:
    spacing = np.spacing(np.abs(expected).astype(got.dtype)).astype(np.float64)
    return float((np.abs(got.astype(np.float64) - expected) / spacing).max())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_device_agrees_with_host(dtype: str, rng: np.random.Generator) -> None:
    lo, hi = RANGE[dtype]
    x = rng.uniform(lo, hi, 100_003).astype(dtype)
    on_host = {"x": x, "y": np.full_like(x, np.nan), "z": np.full_like(x, np.nan)}
    on_device = {name: arrays.asarray(value, device="cuda:0") for name, value in on_host.items()}
    plan = eagle.plan.auto(erf_and_erfc)
    plan.run(**on_host)
    plan.run(**on_device)
    exact = {
        "y": np.array([math.erf(float(v)) for v in x]),
        "z": np.array([math.erfc(float(v)) for v in x]),
    }
    for name in ("y", "z"):
        device_values = on_device[name].numpy()
        assert device_values.dtype == np.dtype(dtype)
        assert rel_error(device_values, on_host[name]) < (1e-6 if dtype == "float32" else 1e-14)
        assert _ulps(device_values, exact[name]) <= ULP, name
        assert _ulps(on_host[name], exact[name]) <= ULP, name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_device_adjoint_agrees_with_host(dtype: str, rng: np.random.Generator) -> None:
    x = rng.uniform(-3.0, 3.0, 65_537).astype(dtype)
    y_bar = rng.standard_normal(x.size).astype(dtype)
    planes = {"x": x, "y_bar": y_bar, "x_bar": rng.standard_normal(x.size).astype(dtype)}
    on_host = {name: value.copy() for name, value in planes.items()}
    on_device = {name: arrays.asarray(value, device="cuda:0") for name, value in planes.items()}
    adjoint = eagle.plan.auto(hawk.diff.vjp(mixed))
    adjoint.run(**on_host)
    adjoint.run(**on_device)
    tolerance = 1e-5 if dtype == "float32" else 1e-13
    assert rel_error(on_device["x_bar"].numpy(), on_host["x_bar"]) < tolerance
