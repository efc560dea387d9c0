"""A device plan's launch path, with the driver replaced: plan.run reuses its binding on
any stream, packs a Param given as a number into the launch's arguments (passed by value:
no memset, no allocation), and launches a binding without numbers as it is."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

import eagle.plan
import eagle.plan._bound
from eagle import arrays
from eagle.arrays import _fill
from eagle.cuda import _records, _runtime, module
from tests._hawk_kernels import saxpy
from tests._util import FakeCalls


class _Kernel:
    """Stands for a loaded kernel: records each launch's grid, arrays, stream and the
    bytes of each argument as the launch took them (the driver copies them then)."""

    def __init__(self, source: str, events: list[tuple]) -> None:
        self.source, self.events = source, events

    def launch(self, grid: Any, block: Any, args: Any, stream: Any, shared_mem: int = 0) -> None:
        assert shared_mem == 0  # no table of these kernels is privatised
        taken = [ctypes.string_at(pointer, 8) for pointer in args._pointers]
        self.events.append(("launch", grid, args.keep, stream, taken))


class _Record:
    ptr, device_index = 0x7000, 0

    def check(self) -> None:
        pass


def _device(n: int, ptr: int, dtype: str = "float32") -> arrays.Array:
    size = np.dtype(dtype).itemsize
    return arrays.Array(ptr=ptr, shape=(n,), dtype=np.dtype(dtype), strides=(size,), device_index=0)


@pytest.fixture
def stream() -> list[int]:
    """The stream work on these arrays goes to (change it to move the next run)."""
    return [0x11]


@pytest.fixture
def loaded() -> dict[str, _Kernel]:
    """The kernels loaded (by their source), in the order they were loaded."""
    return {}


@pytest.fixture
def events(
    monkeypatch: pytest.MonkeyPatch, stream: list[int], loaded: dict[str, _Kernel]
) -> list[tuple]:
    """Launches, and any allocation or memset or other driver call, in order."""
    made: list[tuple] = []
    kernels = loaded

    def load(source: str, name: str, device: int = 0) -> _Kernel:
        return kernels.setdefault(source, _Kernel(source, made))

    def called(what: str) -> Any:
        return lambda *args, **kwargs: made.append((what, *args))

    monkeypatch.setattr(module, "load_kernel", load)
    monkeypatch.setattr(_records, "record_for", lambda key, device, translate: _Record())
    monkeypatch.setattr(eagle.plan._bound, "launch_stream", lambda planes, device: stream[0])
    monkeypatch.setattr(arrays, "full", called("allocate"))
    monkeypatch.setattr(_fill, "cudadrv", FakeCalls(called("memset")))
    monkeypatch.setattr(_runtime, "cudadrv", FakeCalls(called("driver")))
    monkeypatch.setattr(_runtime, "driver", called("driver"))
    return made


def _ptrs(packed: tuple) -> list[int]:
    return [array.ptr for array in packed]


def _number(event: tuple, dtype: str) -> float:
    """The number a launch took as its first argument (saxpy's ``a``, by value)."""
    return float(np.frombuffer(event[4][0][: np.dtype(dtype).itemsize], dtype)[0])


def test_a_number_param_is_packed_by_value_into_each_launch(
    events: list[tuple], loaded: dict[str, _Kernel]
) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = _device(1000, 0x10000), _device(1000, 0x20000)
    plan.run(a=2.0, x=x, y=y)
    plan.run(a=3, x=x, y=y)  # the binding is reused; its number is the new one
    plan.run(a=0.1, x=x, y=y)
    assert len(plan._bindings) == 1
    assert [event[0] for event in events] == ["launch"] * 3  # no memset, no allocation
    assert [_number(event, "float32") for event in events] == [2.0, 3.0, float(np.float32(0.1))]
    # run binds address views of the planes (they keep no memory alive)
    assert all(_ptrs(event[2][:2]) == [x.ptr, y.ptr] and event[3] == 0x11 for event in events)
    (kernel,) = loaded.values()
    assert "const float v_a" in kernel.source and "p_a" not in kernel.source  # a by value


def test_a_float64_number_is_packed_whole(events: list[tuple], loaded: dict[str, _Kernel]) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = _device(1000, 0x10000, "float64"), _device(1000, 0x20000, "float64")
    plan.run(a=1.0, x=x, y=y)
    plan.run(a=0.1, x=x, y=y)
    assert [_number(event, "float64") for event in events] == [1.0, 0.1]
    assert "const double v_a" in next(iter(loaded.values())).source


def test_runs_on_two_streams_with_different_numbers_each_keep_their_own(
    events: list[tuple], stream: list[int]
) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = _device(1000, 0x10000), _device(1000, 0x20000)
    for where, number in ((0x11, 1.0), (0x22, -5.0), (0x11, 3.0), (0x22, 4.0)):
        stream[0] = where
        plan.run(a=number, x=x, y=y)
    assert len(plan._bindings) == 1  # one binding, whatever the stream
    taken = [(event[3], _number(event, "float32")) for event in events]
    assert taken == [(0x11, 1.0), (0x22, -5.0), (0x11, 3.0), (0x22, 4.0)]
    assert [event[0] for event in events] == ["launch"] * 4


def test_a_reused_binding_refuses_a_number_too_large_before_packing(
    events: list[tuple],
) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = _device(1000, 0x10000), _device(1000, 0x20000)
    plan.run(a=1.0, x=x, y=y)
    with pytest.raises(OverflowError, match="Param 'a' is 1e\\+39, too large for float32"):
        plan.run(a=1e39, x=x, y=y)
    assert len(events) == 1  # nothing launched
    for number in (float("inf"), -np.float32(3.4e38)):  # values like any other
        plan.run(a=number, x=x, y=y)
    assert [_number(event, "float32") for event in events] == [
        1.0,
        np.inf,
        float(-np.float32(3.4e38)),
    ]


def test_a_bound_number_is_fixed_at_bind(events: list[tuple]) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = _device(1000, 0x10000), _device(1000, 0x20000)
    bound = plan.bind(a=1.5, x=x, y=y)
    plan.run(a=2.5, x=x, y=y)  # a binding of the plan's own, not this one
    bound.launch()
    bound.launch(0x33)
    assert [(event[3], _number(event, "float32")) for event in events] == [
        (0x11, 2.5),
        (0x11, 1.5),
        (0x33, 1.5),
    ]


def test_a_param_given_as_an_array_is_a_pointer_and_launches_as_it_is(
    events: list[tuple], loaded: dict[str, _Kernel]
) -> None:
    plan = eagle.plan.auto(saxpy)
    a, x, y = _device(1, 0x30000), _device(1000, 0x10000), _device(1000, 0x20000)
    for _ in range(3):
        plan.run(a=a, x=x, y=y)
    plan.run(a=2.0, x=x, y=y)  # the same dtypes, a by value: another kernel
    assert [event[0] for event in events] == ["launch"] * 4
    assert all(_ptrs(event[2][:3]) == [a.ptr, x.ptr, y.ptr] for event in events[:3])
    assert all(event[3] == 0x11 for event in events[:3])
    assert events[0][4][0] == (0x30000).to_bytes(8, "little")  # a's address
    pointer, by_value = (kernel.source for kernel in loaded.values())
    assert "const float* __restrict__ p_a" in pointer and "const float v_a" in by_value
    assert plan.source("device") == pointer  # the source shown is the pointer form


def test_new_plans_of_one_kernel_and_options_share_the_run_binding(
    events: list[tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    check = eagle.plan._autoplan.check_planes
    monkeypatch.setattr(
        eagle.plan._autoplan, "check_planes", lambda k, p: checked.append(k.name) or check(k, p)
    )
    x, y = _device(1000, 0x10000), _device(1000, 0x20000)
    for number in (1.0, 2.0, 3.0):
        eagle.plan.auto(saxpy).run(a=number, x=x, y=y)  # a new plan each time
    assert checked == ["saxpy"]  # bound once, then shared by address
    assert [_number(event, "float32") for event in events] == [1.0, 2.0, 3.0]
    eagle.plan.auto(saxpy, math="tf32").run(a=1.0, x=x, y=y)  # other options: its own
    eagle.plan.auto(saxpy).run(a=1.0, x=x, y=_device(1000, 0x30000))  # other planes
    assert checked == ["saxpy"] * 3


def test_a_run_binding_keeps_no_plane_alive_but_one_run_in_a_capture_does(
    events: list[tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc
    import weakref

    class Memory:  # what keeps a plane's memory alive
        pass

    owner = Memory()
    x = arrays.Array(ptr=0x10000, shape=(1000,), dtype=np.dtype("float32"), strides=(4,),
                     device_index=0, owner=owner)  # fmt: skip
    plan = eagle.plan.auto(saxpy)
    plan.run(a=1.0, x=x, y=_device(1000, 0x20000))
    watched = weakref.ref(owner)
    del owner, x
    gc.collect()
    assert watched() is None  # the plan and the shared binding hold addresses only

    owner = Memory()
    x = arrays.Array(ptr=0x10000, shape=(1000,), dtype=np.dtype("float32"), strides=(4,),
                     device_index=0, owner=owner)  # fmt: skip
    monkeypatch.setattr(eagle.plan._autoplan, "any_capture_active", lambda: True)
    plan.run(a=2.0, x=x, y=_device(1000, 0x20000))  # bound to the arrays themselves
    assert events[-1][2][0] is x
    assert [_number(event, "float32") for event in events] == [1.0, 2.0]
