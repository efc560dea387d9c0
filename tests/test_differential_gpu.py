"""Differential test on the device: random hawk kernels, the device program against the host.

The kernels come from :func:`tests._kernel_grammar.kernels`, the generator whose host
programs ``tests/test_differential.py`` checks against a per-lane Python run. Each kernel
runs through ``eagle.plan.auto(k).run`` twice, on numpy planes (host) and on device copies
of the same values (device), in float64 and in float32; the outputs start from the same
values on both sides (kernels may read them first), so an output the device never writes
shows up as a difference.

Each kernel compiles once per dtype with NVRTC (about half a second), so the GPU suite runs
60 examples per dtype; ``EAGLE_GPU_DIFF_EXAMPLES=300`` runs more (300 per dtype passed on an
H200, in about five minutes).

Compared: ``|device - host| <= rtol * |host| + atol`` in every *stable* lane, NaN and inf
in the same lanes; an accumulator (``Mutable[Table]``, added into with atomics or
warp-summed adds on the device) element by element within ``rtol * (|start| + the sum of
|value| added into it) + atol``, where no unstable lane added into it.

* float64: ``rtol = atol = 1e-12``. Both sides compute in double; the device fuses
  multiply-adds and has its own math library (a few ulp per call), which should move
  values bounded by 64 (the generator keeps them so) by around 1e-14.
* float32: ``rtol = atol = 1e-4``. Each side rounds every operation to float32
  (2**-24 = 6e-8 relative) with its own math library, and the rounding grows with the
  expression depth, loop trips and cancellation. Measured on the host, the float32 program
  against the float64 program on the same float32-rounded inputs, stable lanes only: over
  the first 2,000 generated kernels (19,934 lanes) the largest difference was 7.0e-7 x
  max(|value|, 1), and over 4,500 more random kernels 2.1e-6. Device and host float32
  each sit that close to float64, so 1e-4 leaves a margin of about 25x;
  ``test_float32_host_within_tolerance_of_float64`` keeps checking that bound in the host
  suite.

Mixed storage: the kernels whose planes drew float32, float16, bfloat16 (and float64 now
and then) run once more in those dtypes, device against host, held to the tolerance of
their compute dtype above, widened per plane to one unit in the last place of its storage
dtype (the device may fuse a multiply-add and round the store to the neighbouring 16-bit
value). A table element is held to ``(adds + 1)`` such units of its magnitude.

A lane is stable (:func:`tests._kernel_grammar.stable_lanes`) when its float64 outputs move
by less than the tolerance when every input and every rounded math result is perturbed by a
relative 1e-13 (float64) or 1e-5 (float32). Two correct programs that round differently can
land on the two sides of a discontinuity (``int()``, ``//``, ``%``, a comparison, a function
saturating to exactly 1.0 in float32); such a lane (measured: 0.2% to 0.9% of them; at
most 5%, asserted by ``test_most_lanes_are_stable``) is left out rather than the tolerance
widened.
"""

from __future__ import annotations

import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from eagle import arrays
from hawk.emit import compute_dtype
from tests._kernel_grammar import (
    GeneratedKernel,
    KernelLoader,
    disagreements,
    evaluate_per_lane,
    kernels,
    stable_lanes,
)

pytestmark = pytest.mark.gpu

#: dtype -> (rtol, atol, the relative perturbation of the stability check)
TOLERANCES = {
    np.dtype(np.float64): (1e-12, 1e-12, 1e-13),
    np.dtype(np.float32): (1e-4, 1e-4, 1e-5),
}


@pytest.fixture(scope="module")
def loader(tmp_path_factory: pytest.TempPathFactory) -> KernelLoader:
    return KernelLoader(Path(tmp_path_factory.mktemp("generated_kernels_gpu")))


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@settings(
    max_examples=int(os.environ.get("EAGLE_GPU_DIFF_EXAMPLES", "60")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(generated=kernels())
def test_device_matches_host(loader: KernelLoader, dtype: type, generated: GeneratedKernel) -> None:
    rtol, atol, delta = TOLERANCES[np.dtype(dtype)]
    plan = loader.plan(generated.source)
    planes = generated.make_planes(dtype)
    host = {name: values.copy() for name, values in planes.items()}
    plan.run(**host)
    device = {name: arrays.asarray(values, device="cuda:0") for name, values in planes.items()}
    plan.run(**device)
    module = loader.load(generated.source)
    reference = evaluate_per_lane(module, generated, planes)
    stable = stable_lanes(module, generated, planes, delta, rtol, atol, reference=reference)
    for name in generated.accumulators:
        got = device[name].numpy().reshape(-1)
        want = host[name].reshape(-1)
        bad = disagreements(got, want, rtol, atol, reference.magnitudes[name])
        bad = bad[reference.comparable(name, stable)[bad]]
        assert bad.size == 0, (
            f"{name} ({np.dtype(dtype)}) differs at {bad.tolist()}: device {got[bad]}, "
            f"host {want[bad]}\n{generated.source}"
        )
    for name in generated.outputs:
        got = device[name].numpy()
        bad = disagreements(got, host[name], rtol, atol)
        bad = bad[stable[bad]]
        assert bad.size == 0, (
            f"{name} ({np.dtype(dtype)}) differs in lanes {bad.tolist()}: device {got[bad]}, "
            f"host {host[name][bad]}\n{generated.source}"
        )


@settings(
    max_examples=int(os.environ.get("EAGLE_GPU_DIFF_EXAMPLES", "60")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(generated=kernels())
def test_device_matches_host_in_mixed_storage(
    loader: KernelLoader, generated: GeneratedKernel
) -> None:
    if not generated.mixed:
        return  # the float64 and float32 runs above cover it
    planes = generated.make_planes()
    real = compute_dtype({name: values.dtype for name, values in planes.items()})
    rtol, atol, delta = TOLERANCES[real]
    plan = loader.plan(generated.source)
    host = {name: values.copy() for name, values in planes.items()}
    plan.run(**host)
    device = {name: arrays.asarray(values, device="cuda:0") for name, values in planes.items()}
    plan.run(**device)
    module = loader.load(generated.source)
    wide = {name: values.astype(np.float64) for name, values in planes.items()}
    reference = evaluate_per_lane(module, generated, wide)
    stable = stable_lanes(module, generated, wide, delta, rtol, atol, reference=reference)
    for name in generated.accumulators:
        got = device[name].numpy().astype(np.float64).reshape(-1)
        want = host[name].astype(np.float64).reshape(-1)
        eps = max(rtol, _eps(planes[name].dtype))
        counts = reference.adds[name].sum(axis=0) + 1
        bad = disagreements(got, want, eps, eps, reference.magnitudes[name] * counts)
        bad = bad[reference.comparable(name, stable)[bad]]
        assert bad.size == 0, (
            f"{name} ({planes[name].dtype}) differs at {bad.tolist()}: device {got[bad]}, "
            f"host {want[bad]}\n{generated.source}"
        )
    for name in generated.outputs:
        got = device[name].numpy().astype(np.float64)
        want = host[name].astype(np.float64)
        widened = max(rtol, _eps(planes[name].dtype))
        bad = disagreements(got, want, widened, max(atol, widened))
        bad = bad[stable[bad]]
        assert bad.size == 0, (
            f"{name} ({planes[name].dtype}) differs in lanes {bad.tolist()}: device "
            f"{got[bad]}, host {want[bad]}\n{generated.source}"
        )


def _eps(dtype: np.dtype) -> float:
    """One unit in the last place, relative, of ``dtype``."""
    return float(ml_dtypes.finfo(dtype).eps)
