"""plan.run reuses a binding for the same planes: keyed on each plane's address, shape,
strides, dtype and device and on the stream, never on the objects' identity; a Param
given as a number goes into the reused binding at each run."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk.diff
from eagle import arrays
from eagle.plan import _autoplan, _bound, _route
from eagle.plan._planes import layout_key
from tests import _route_kernels as k
from tests._hawk_kernels import saxpy
from tests._route_kernels import B, R, U
from tests.test_route import _FakeDeviceArray, fake_cublas, forget_bindings  # noqa: F401


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every plane check a plan makes, by kernel name (a reused binding makes none)."""
    made: list[str] = []
    check = eagle.plan._autoplan.check_planes

    def counting(kernel, planes):
        made.append(kernel.name)
        return check(kernel, planes)

    monkeypatch.setattr(eagle.plan._autoplan, "check_planes", counting)
    return made


def test_host_keys_are_the_layout_not_the_object() -> None:
    a = np.zeros(6)
    key = layout_key(a)
    assert key == layout_key(a.view()) == layout_key(a[:]) == layout_key(arrays.asarray(a))
    read_only = a.view()
    read_only.flags.writeable = False
    others = [np.zeros(6), a[1:], a[::2], a.reshape(2, 3), a.view(np.int64), read_only]
    assert len({key, *(layout_key(other) for other in others)}) == 1 + len(others)


def test_device_keys_are_device_address_shape_strides_and_dtype() -> None:
    key = layout_key(_FakeDeviceArray((4, 6), 0x1000))
    assert key == layout_key(_FakeDeviceArray((4, 6), 0x1000))  # another object, same plane
    others = [
        _FakeDeviceArray((4, 6), 0x2000),
        _FakeDeviceArray((24,), 0x1000),
        _FakeDeviceArray((6, 4), 0x1000),
        _FakeDeviceArray((4, 6), 0x1000, np.float64),
        _FakeDeviceArray((4, 6), 0x1000)[:, ::2],
        arrays.Array(
            ptr=0x1000, shape=(4, 6), dtype=np.dtype(np.float32), strides=(24, 4), device_index=1
        ),
    ]
    assert len({key, *(layout_key(other) for other in others)}) == 1 + len(others)


def test_numbers_share_one_key_and_other_values_have_none() -> None:
    assert layout_key(2.0) == layout_key(3) == layout_key(np.float32(0.5)) == ("number",)
    for value in (True, [1.0, 2.0], "2", None, np.zeros(3).tolist()):
        assert layout_key(value) is None


def test_repeated_runs_reuse_the_binding_and_take_new_numbers(checks: list[str]) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = np.arange(5.0), np.zeros(5)
    for a in (1.0, 2.0, 3):
        plan.run(a=a, x=x, y=y)
    np.testing.assert_array_equal(y, 6.0 * x)
    plan.run(a=1.0, x=x.view(), y=y[:])  # other objects over the same planes
    np.testing.assert_array_equal(y, 7.0 * x)
    assert checks == ["saxpy"]
    with pytest.raises(OverflowError, match="Param 'a' is an int of"):
        plan.run(a=10**400, x=x, y=y)
    np.testing.assert_array_equal(y, 7.0 * x)


def test_other_planes_of_the_same_shape_are_bound_once(checks: list[str]) -> None:
    plan = eagle.plan.auto(saxpy)
    x = np.arange(5.0)
    outputs = [np.zeros(5) for _ in range(eagle.plan._autoplan._REUSED_BINDINGS + 1)]
    for _ in range(2):
        for position, y in enumerate(outputs):
            plan.run(a=float(position), x=x, y=y)
    for position, y in enumerate(outputs):
        np.testing.assert_array_equal(y, 2.0 * position * x)
    assert len(plan._bindings) == eagle.plan._autoplan._REUSED_BINDINGS
    # one more output than it keeps, each run evicting the binding the next needs: found
    # again among the bindings the plans of the kernel share (over addresses), not checked
    assert len(checks) == len(outputs)


class _DLPackOnly:
    """A producer that speaks DLPack alone: its capsule is taken at each bind, so no key."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def __dlpack__(self, **kwargs):
        return self.values.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.values.__dlpack_device__()


def test_planes_that_cannot_be_keyed_are_checked_every_run(checks: list[str]) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = np.arange(3.0), np.zeros(3)
    plan.run(a=np.ones(1), x=x, y=_DLPackOnly(y))
    plan.run(a=np.ones(1), x=x, y=_DLPackOnly(y))
    assert checks == ["saxpy", "saxpy"] and not plan._bindings
    np.testing.assert_array_equal(y, 2.0 * x)
    with pytest.raises(TypeError, match="plane 'x' is a list"):
        plan.run(a=1.0, x=[1.0, 2.0, 3.0], y=y)


def test_a_routed_run_reuses_its_product_per_stream_and_planes(
    fake_cublas,  # noqa: F811
    checks: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handles, _ = fake_cublas
    current = [0x11]
    for module in (_autoplan, _bound, _route):
        monkeypatch.setattr(module, "launch_stream", lambda values, device: current[0])
    forget_bindings(k.contract)  # (no layout kept by an earlier test)
    plan = eagle.plan.auto(k.contract, contraction="gemm")
    planes = {
        "w": _FakeDeviceArray((R, U), 0x10000),
        "f": _FakeDeviceArray((R, B), 0x20000),
        "y": _FakeDeviceArray((B * U,), 0x30000),
    }
    plan.run(**planes)
    plan.run(**{name: _FakeDeviceArray(a.shape, a.ptr) for name, a in planes.items()})
    assert checks == ["contract"]
    assert [ops["out"] for _, ops in handles[0x11].calls] == [0x30000, 0x30000]

    plan.run(**{**planes, "y": _FakeDeviceArray((B * U,), 0x38000)})  # moved: aligned alike
    assert checks == ["contract"] and handles[0x11].calls[-1][1]["out"] == 0x38000
    plan.run(**{**planes, "y": _FakeDeviceArray((B * U,), 0x38004)})  # aligned otherwise
    assert checks == ["contract"] * 2 and handles[0x11].calls[-1][1]["out"] == 0x38004

    current[0] = 0x22  # another stream: the same binding, with the stream's own handle
    plan.run(**planes)
    assert checks == ["contract"] * 2
    assert [ops["out"] for _, ops in handles[0x22].calls] == [0x30000]


def test_threads_sharing_a_binding_each_run_with_their_own_param() -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = np.ones(200_000), np.zeros(200_000)
    plan.run(a=0.0, x=x, y=y)  # the binding the threads share
    values = [float(a) for a in range(1, 9)]
    with ThreadPoolExecutor(len(values)) as pool:
        list(pool.map(lambda a: [plan.run(a=a, x=x, y=y) for _ in range(25)], values))
    np.testing.assert_array_equal(y, 25 * sum(values))  # integers: exact in any order


def test_an_adjoint_run_reuses_its_loop_binding(checks: list[str]) -> None:
    adjoint = eagle.diff.reverse(eagle.plan.auto(saxpy))
    x, y_bar = np.arange(4.0), np.ones(4)
    x_bar = np.zeros(4)
    for a in (1.0, 2.0, 3.0):
        adjoint.run(a=a, x=x, y_bar=y_bar, x_bar=x_bar)
    np.testing.assert_array_equal(x_bar, 6.0 * y_bar)
    assert checks == ["saxpy_vjp"]  # bound once, then reused with new numbers


def _read_only(array: arrays.Array) -> arrays.Array:
    return arrays.Array(ptr=array.ptr, shape=array.shape, dtype=array.dtype,
                        strides=array.strides, device_index=0, readonly=True)  # fmt: skip


def test_a_layout_checked_once_still_has_each_new_address_checked() -> None:
    plan = eagle.plan.auto(k.contract, contraction="gemm", host_route="loop")
    good = {
        "w": _FakeDeviceArray((R, U), 0x10000),
        "f": _FakeDeviceArray((R, B), 0x20000),
        "y": _FakeDeviceArray((B * U,), 0x30000),
    }
    from eagle.plan._planes import check_planes

    check_planes(plan.kernel.ir, good)  # the layouts are known from now on
    for bad, message in (
        (_FakeDeviceArray((B * U,), 0x30002), "plane 'y' is misaligned"),
        (_FakeDeviceArray((B * U,), 0), "plane 'y' is at address 0"),
        (_FakeDeviceArray((B * U,), 0x20000), "planes 'f' and 'y' share memory"),
        (_read_only(_FakeDeviceArray((B * U,), 0x40000)), "plane 'y' is read-only"),
    ):
        with pytest.raises(ValueError, match=message):
            check_planes(plan.kernel.ir, {**good, "y": bad})


def test_adjoints_made_again_in_a_loop_work_nothing_out_again(monkeypatch) -> None:
    """``eagle.diff.reverse(plan).run(...)`` in a loop: the adjoint kernel, its gradient
    planes and its routes come from what adjoints of the kernel share (no plane in it)."""
    made: list[str] = []
    vjp = hawk.diff.vjp

    def counting(kernel, *args, **kwargs):
        made.append(kernel.name)
        return vjp(kernel, *args, **kwargs)

    monkeypatch.setattr(hawk.diff, "vjp", counting)
    x, y_bar = np.linspace(0.0, 1.0, 9), np.linspace(1.0, 2.0, 9)
    for _ in range(3):
        x_bar = np.zeros(9)
        eagle.diff.reverse(eagle.plan.auto(k.square)).run(x=x, y_bar=y_bar, x_bar=x_bar)
        np.testing.assert_allclose(x_bar, 2 * x * y_bar)
    assert made.count("square") <= 1  # made once (none: an earlier test made it)
    routed = eagle.diff.reverse(eagle.plan.auto(k.contract, contraction="gemm"))
    looped = eagle.diff.reverse(eagle.plan.auto(k.contract))
    assert routed._shared is not looped._shared  # one per policy
    planes = routed._shared.__dict__.values()
    assert not any(isinstance(value, np.ndarray | arrays.Array) for value in planes)
