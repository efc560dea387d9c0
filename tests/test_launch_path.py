"""A device plan's launch path, with the driver replaced: plan.run reuses its binding,
writes a Param given as a number into it before each launch (on the stream the launch
takes), and launches a binding without numbers as it is."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import eagle._bound
import eagle.plan
from eagle import arrays
from eagle.cuda import _fill, _records, module
from tests._hawk_kernels import saxpy


class _Kernel:
    """Stands for a loaded kernel: records each launch's grid, arguments and stream."""

    def __init__(self, events: list[tuple]) -> None:
        self.events = events

    def launch(self, grid: Any, block: Any, args: Any, stream: Any) -> None:
        self.events.append(("launch", grid, args.keep, stream))


class _Record:
    ptr, device_index = 0x7000, 0

    def check(self) -> None:
        pass


def _device(n: int, ptr: int, dtype: str = "float32") -> arrays.Array:
    size = np.dtype(dtype).itemsize
    return arrays.Array(ptr=ptr, shape=(n,), dtype=np.dtype(dtype), strides=(size,), device_index=0)


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Launches and Param writes, in order; the stream work on these arrays goes to is 0x11."""
    made: list[tuple] = []
    kernel = _Kernel(made)
    monkeypatch.setattr(module, "load_kernel", lambda source, name, device=0: kernel)
    monkeypatch.setattr(_records, "record_for", lambda key, device, translate: _Record())
    monkeypatch.setattr(arrays, "full", lambda shape, value, dtype, device: _device(1, 0x9000))
    monkeypatch.setattr(eagle._bound, "launch_stream", lambda planes, device: 0x11)
    monkeypatch.setattr(
        _fill,
        "memset",
        lambda ptr, scalar, count, stream: made.append(("write", ptr, scalar, stream)),
    )
    return made


def test_a_number_param_is_written_before_each_launch_on_its_stream(events: list[tuple]) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = _device(1000, 0x10000), _device(1000, 0x20000)
    plan.run(a=2.0, x=x, y=y)
    plan.run(a=3, x=x, y=y)  # the binding is reused; its number is the new one
    assert len(plan._bindings) == 1
    writes = [event for event in events if event[0] == "write"]
    assert writes == [("write", 0x9000, 2.0, 0x11), ("write", 0x9000, 3.0, 0x11)]
    assert all(type(event[2]) is np.float32 for event in writes)  # the kernel's dtype
    assert [event[0] for event in events] == ["write", "launch"] * 2
    assert all(event[3] == 0x11 for event in events)


def test_a_binding_without_numbers_launches_as_it_is(events: list[tuple]) -> None:
    plan = eagle.plan.auto(saxpy)
    a, x, y = _device(1, 0x30000), _device(1000, 0x10000), _device(1000, 0x20000)
    for _ in range(3):
        plan.run(a=a, x=x, y=y)
    assert [event[0] for event in events] == ["launch"] * 3
    assert all(event[2][:3] == (a, x, y) and event[3] == 0x11 for event in events)
