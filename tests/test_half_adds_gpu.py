"""Adds into bfloat16 and float16 tables on the device follow the host's rule through
every address form: a launch's sum in the compute type, rounded into each element once.
Integer sums are exact in float32, so device and host agree bit for bit; other sums
differ only in float32's summation order, so by one unit in the 16-bit last place at
most. Captured replays and rebinds round once per launch too."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import eagle.plan
from eagle import arrays, cuda
from tests import _half_add_kernels as k
from tests.test_half_adds import FORMS, HALF, _planes

pytestmark = pytest.mark.gpu


def _on_device(planes: dict[str, np.ndarray]) -> dict[str, arrays.Array]:
    return {name: arrays.asarray(value, device="cuda:0") for name, value in planes.items()}


def _ulps(a: np.ndarray, b: np.ndarray) -> int:
    """The most units in the last place between two 16-bit arrays of finite values."""
    wide = [np.asarray(v).view(np.uint16).astype(np.int64) for v in (a, b)]
    signed = [np.where(w & 0x8000, 0x8000 - w, w) for w in wide]
    return int(np.max(np.abs(signed[0] - signed[1])))


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("kernel", FORMS, ids=lambda kernel: kernel.name)
def test_device_matches_host_bit_for_bit_on_integer_sums(kernel, dtype, rng) -> None:
    lanes = 100_000 if dtype == HALF[0] else 40_000
    x = rng.integers(-3, 4, lanes).astype(np.float32)
    start = rng.integers(-8, 8, 4).astype(dtype)
    host = _planes(kernel, x, start.copy())
    eagle.plan.auto(kernel).run(**host)
    device = _on_device(_planes(kernel, x, start.copy()))
    eagle.plan.auto(kernel).run(**device)
    np.testing.assert_array_equal(device["c"].numpy().view(np.uint16), host["c"].view(np.uint16))


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("kernel", FORMS, ids=lambda kernel: kernel.name)
def test_device_is_within_one_ulp_of_host_on_any_sums(kernel, dtype, rng) -> None:
    x = rng.standard_normal(30_000).astype(np.float32)
    start = rng.standard_normal(4).astype(dtype)
    host = _planes(kernel, x, start.copy())
    eagle.plan.auto(kernel).run(**host)
    device = _on_device(_planes(kernel, x, start.copy()))
    eagle.plan.auto(kernel).run(**device)
    assert _ulps(device["c"].numpy(), host["c"]) <= 1


def test_a_captured_graph_rounds_once_per_replay_and_rebinds(rng) -> None:
    stream = cuda.Stream(non_blocking=True)
    x = arrays.asarray(np.ones(100_000, np.float32), device="cuda:0")
    tables = [arrays.asarray(np.zeros(4, ml_dtypes.bfloat16), device="cuda:0") for _ in "ab"]
    with stream:
        bound = eagle.plan.auto(k.by_lane).bind(x=x, c=tables[0])
    with cuda.StreamCapturer(stream) as cap:
        bound.launch(stream)
    launcher = cuda.Graph.from_captured(cap.captured).launcher().stream(stream)
    host = np.zeros(4, ml_dtypes.bfloat16)
    for _ in range(3):
        launcher.launch()
        eagle.plan.auto(k.by_lane).run(x=np.ones(100_000, np.float32), c=host)
    launcher.synchronize()
    np.testing.assert_array_equal(tables[0].numpy(), host)  # 25000 each time, rounded
    launcher.rebind(c=tables[1])
    launcher.launch()
    launcher.synchronize()
    np.testing.assert_array_equal(tables[1].numpy(), np.full(4, 25000.0, ml_dtypes.bfloat16))
    np.testing.assert_array_equal(tables[0].numpy(), host)


def test_a_bfloat16_store_or_add_from_float64_rounds_as_on_the_host():
    bf16 = np.dtype(ml_dtypes.bfloat16)
    # just above a bfloat16 tie (see the host test); a float64 plane: float64 compute
    a = arrays.asarray(np.array([1.0 + 2.0**-8 + 2.0**-40]), device="cuda:0")
    x = np.ones(4096, bf16)
    y = arrays.asarray(np.zeros(4096, bf16), device="cuda:0")
    eagle.plan.auto(k.wide_store).run(a=a, x=arrays.asarray(x, device="cuda:0"), y=y)
    assert y.numpy().astype(np.float32).tolist() == [1.0] * 4096
    c = arrays.asarray(np.zeros(2, bf16), device="cuda:0")
    eagle.plan.auto(k.wide_add).run(a=a, x=arrays.asarray(x[:1], device="cuda:0"), c=c)
    assert c.numpy().astype(np.float32).tolist() == [1.0, 0.0]
