"""A device plan's launch path, with the driver replaced: plan.run reuses its binding,
writes a Param given as a number into it before each launch (on the stream the launch
takes), and launches a binding without numbers as it is."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import eagle._bound
import eagle.plan
from eagle import arrays
from eagle.cuda import _fill, _records, module
from eagle.cuda._runtime import CudaError
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

    def memset(ptr: int, word: int, count: int, stream: int) -> tuple[int]:
        assert count == 1  # one 32-bit word, stream-ordered
        made.append(("write", ptr, word, stream))
        return (0,)

    monkeypatch.setattr(_fill, "driver", lambda: SimpleNamespace(cuMemsetD32Async=memset))
    return made


def _words(number: float, dtype: str) -> list[int]:
    """The 32-bit words of ``number`` in ``dtype``, in memory order."""
    return np.array([number], dtype).view(np.uint32).tolist()


def test_a_number_param_is_written_before_each_launch_on_its_stream(events: list[tuple]) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = _device(1000, 0x10000), _device(1000, 0x20000)
    plan.run(a=2.0, x=x, y=y)
    plan.run(a=3, x=x, y=y)  # the binding is reused; its number is the new one
    assert len(plan._bindings) == 1
    writes = [event for event in events if event[0] == "write"]
    (two,), (three,) = _words(2.0, "float32"), _words(3.0, "float32")  # the kernel's dtype
    assert writes == [("write", 0x9000, two, 0x11), ("write", 0x9000, three, 0x11)]
    assert [event[0] for event in events] == ["write", "launch"] * 2
    assert all(event[3] == 0x11 for event in events)


def test_a_float64_number_is_written_as_its_two_words(events: list[tuple]) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = _device(1000, 0x10000, "float64"), _device(1000, 0x20000, "float64")
    plan.run(a=1.0, x=x, y=y)
    plan.run(a=0.1, x=x, y=y)
    low, high = _words(0.1, "float64")
    assert events[-3:-1] == [("write", 0x9000, low, 0x11), ("write", 0x9004, high, 0x11)]
    assert events[-1][0] == "launch"


def test_a_reused_binding_refuses_a_number_too_large_before_writing(
    events: list[tuple],
) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = _device(1000, 0x10000), _device(1000, 0x20000)
    plan.run(a=1.0, x=x, y=y)
    made = len(events)
    with pytest.raises(OverflowError, match="Param 'a' is 1e\\+39, too large for float32"):
        plan.run(a=1e39, x=x, y=y)
    for number in (float("inf"), -np.float32(3.4e38)):  # values like any other
        plan.run(a=number, x=x, y=y)
    assert len(events) == made + 4 and events[made][2] == _words(np.inf, "float32")[0]


def test_a_binding_without_numbers_launches_as_it_is(events: list[tuple]) -> None:
    plan = eagle.plan.auto(saxpy)
    a, x, y = _device(1, 0x30000), _device(1000, 0x10000), _device(1000, 0x20000)
    for _ in range(3):
        plan.run(a=a, x=x, y=y)
    assert [event[0] for event in events] == ["launch"] * 3
    assert all(event[2][:3] == (a, x, y) and event[3] == 0x11 for event in events)


def test_a_refused_write_of_a_number_raises_the_drivers_status(
    events: list[tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = _device(1000, 0x10000), _device(1000, 0x20000)
    refused = SimpleNamespace(cuMemsetD32Async=lambda ptr, word, count, stream: (1,))
    monkeypatch.setattr(_fill, "driver", lambda: refused)
    with pytest.raises(CudaError, match="cuMemsetD32Async failed with 1"):
        plan.run(a=2.0, x=x, y=y)
    assert not events  # nothing launched
