"""The last call's prepared product, found again by comparing its key (each operand's
pointer, shape, strides, dtype and device, and the params), never by the objects' identity:
an operand changed in place since is checked again; a prepared call made stale by warm()
or by a new handle for the stream is not used."""

from __future__ import annotations

import numpy as np
import pytest

from eagle.gemm import (
    CublasCaptureHandle,
    GemmCaptureUnavailable,
    GemmMappingUnavailable,
    MatmulUnavailable,
    matmul_step,
    release_handles,
    sgemm_params_for_arrays,
)
from tests.test_gemm_capture import FakeDevice, device  # noqa: F401 - the fixture


def _operands(device: FakeDevice, rng: np.random.Generator) -> dict:  # noqa: F811
    a = rng.standard_normal((5, 4)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    return {"a": device.array(a), "b": device.array(b),
            "out": device.array(np.zeros((5, 3), np.float32))}  # fmt: skip


def test_an_operand_changed_in_place_is_checked_again(device, rng) -> None:  # noqa: F811
    operands = _operands(device, rng)
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params = sgemm_params_for_arrays(*operands.values())
    handle.sgemm(params, operands)
    handle.sgemm(params, operands)
    out = operands["out"]
    out.shape, out.strides = (3, 5), (20, 4)  # the same object, another layout
    with pytest.raises(GemmMappingUnavailable, match=r"operand .out. has shape \(3, 5\)"):
        handle.sgemm(params, operands)


def test_a_call_made_before_warm_is_not_the_one_used_after_it(device, rng) -> None:  # noqa: F811
    operands = _operands(device, rng)
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params = sgemm_params_for_arrays(*operands.values())
    handle.sgemm(params, operands)  # prepared while the product was not warm
    handle.warm(params, operands)
    device.capturing = True
    handle.sgemm(params, operands)  # inside a capture: the warmed product's call


def test_the_gemm_entry_point_does_not_take_the_sgemm_call(device, rng) -> None:  # noqa: F811
    operands = _operands(device, rng)
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params = sgemm_params_for_arrays(*operands.values())
    handle.sgemm(params, operands)
    with pytest.raises(TypeError, match="params must be GemmParams"):
        handle.gemm(params, operands)  # type: ignore[arg-type]


def test_a_device_step_checks_a_changed_buffer_and_follows_a_new_handle(
    device,  # noqa: F811
    rng,
) -> None:
    bufs = _operands(device, rng)
    step = matmul_step("out", a="a", b="b", out="out")
    step.run(bufs, "device")
    release_handles()  # the stream's handle goes; the next run makes another
    step.run(bufs, "device")
    log = [entry[0] for entry in device.cublas.log]
    assert log.count("create") == 2 and log.count("gemm") == 2
    handles = [used[1] for used in device.used]
    assert handles[0] is not handles[1] and handles[1].alive
    expected = bufs["a"].values.astype(np.float64) @ bufs["b"].values
    np.testing.assert_allclose(bufs["out"].values, expected, rtol=1e-5, atol=1e-5)
    bufs["out"].shape, bufs["out"].strides = (3, 5), (20, 4)
    with pytest.raises(MatmulUnavailable, match="matmul step 'out'"):
        step.run(bufs, "device")
    bufs["a"] = bufs["b"]  # another buffer under the same name: its own product
    with pytest.raises(MatmulUnavailable, match="matmul step 'out'"):
        step.run(bufs, "device")
    with pytest.raises(GemmCaptureUnavailable, match="destroyed"):
        handles[0].sgemm(sgemm_params_for_arrays(*_operands(device, rng).values()), {})


def test_a_repeated_device_step_is_checked_once(device, rng, monkeypatch) -> None:  # noqa: F811
    from eagle.gemm.matmul import _DeviceMatmul

    bufs = _operands(device, rng)
    step = matmul_step("out", a="a", b="b", out="out")
    checked = []
    original = _DeviceMatmul._checked
    monkeypatch.setattr(
        _DeviceMatmul, "_checked", lambda *args: checked.append(1) or original(*args)
    )
    for _ in range(3):
        step.run(bufs, "device")
    assert len(checked) == 1
    assert [entry[0] for entry in device.cublas.log].count("gemm") == 3
