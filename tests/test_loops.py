"""Host tests of device-side loops: argument checks, the condition kernel's compile,
and the order of the CUDA calls that record a body (with the calls replaced by a
recorder, so they run without a GPU)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from eagle import arrays, cuda
from eagle.cuda import _capture_state, _stream_capture, graph, loops
from tests._util import fake_calls


class _DeviceArray:
    """Stands for a device eagle Array (only what the loop checks and a launch reads)."""

    def __init__(self, shape=(1,), dtype="int32", device_index=0) -> None:
        self.shape = shape
        self.size = int(np.prod(shape))
        self.dtype = np.dtype(dtype)
        self.is_host = False
        self.device_index = device_index
        self.ptr = 0x1000


class _Kernel:
    """Stands for eagle's loaded condition kernel: records its launches, and what a
    real launch keeps alive, and becomes the stream's capture dependency."""

    def __init__(self, calls: list, state: dict) -> None:
        self.calls = calls
        self.state = state

    def launch(self, grid, block, args, stream):
        self.calls.append(("launch", [int(a) if isinstance(a, np.generic) else a for a in args]))
        self.state["deps"] = [77]  # the kernel node just captured
        cuda.record_use(stream, self, *[a for a in args if hasattr(a, "ptr")])


@pytest.fixture
def fake_cuda(monkeypatch):
    """Replace the CUDA calls of capture, graphs and loops with a recorder."""
    calls: list = []
    rt = loops.runtime()
    active = rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive
    state = {"deps": [11]}

    def fake_call(name, *args):
        calls.append((name, args))
        if name == "cudaStreamGetCaptureInfo":
            deps = state["deps"]
            return active, 1, "outer", deps, [rt.cudaGraphEdgeData() for _ in deps], len(deps)
        if name == "cudaStreamBeginCaptureToGraph":
            state["deps"] = [int(node) for node in args[2] or []]
        if name == "cudaThreadExchangeStreamCaptureMode":
            return "previous mode"
        return {
            "cudaStreamEndCapture": "graph-handle",
            "cudaGraphInstantiate": "exec-handle",
            "cudaStreamGetDevice": 0,
            "cudaGraphConditionalHandleCreate": rt.cudaGraphConditionalHandle(42),
        }.get(name)

    def fake_add_node(graph_handle, deps, edges, handle, while_):
        calls.append(("add_node", ([int(d) for d in deps], "while" if while_ else "if")))
        return rt.cudaGraphNode_t(99), "body"

    fake_calls(monkeypatch, fake_call, graph, _stream_capture, _capture_state, loops)
    monkeypatch.setattr(loops, "_add_node", fake_add_node)
    monkeypatch.setattr(loops, "_kernels", {0: _Kernel(calls, state)})
    return calls


def _names(calls: list) -> list[str]:
    return [name for name, _ in calls]


# -- argument checks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "error", "match"),
    [
        ("flag", TypeError, "flag must be a one-element device eagle Array"),
        (np.zeros(1, np.int32), TypeError, "flag must be a one-element device"),
        (arrays.zeros((1,), "int32"), ValueError, "flag is a host array"),
        (
            _DeviceArray(shape=(2,)),
            ValueError,
            r"flag must hold exactly one element, not shape \(2,\)",
        ),
        (_DeviceArray(dtype="int64"), TypeError, "flag must be int32, float32, float64, not int64"),
    ],
)
def test_a_bad_flag_is_refused_by_name(fake_cuda, flag, error, match):
    capturer = cuda.StreamCapturer(5)
    capturer.begin()
    for block in (capturer.while_loop(flag), capturer.if_(flag)):
        with pytest.raises(error, match=match), block:
            pass
    # nothing touched the capture
    assert _names(fake_cuda) == ["cudaStreamGetDevice", "cudaStreamBeginCapture"]
    capturer.end()


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (0, ValueError, "max_iterations must be between 1 and 2\\*\\*32 - 1, not 0"),
        (2**32, ValueError, "max_iterations must be between"),
        (2.5, TypeError, "max_iterations must be a positive int or None, not float"),
        (True, TypeError, "max_iterations must be a positive int or None, not bool"),
    ],
)
def test_a_bad_max_iterations_is_refused_by_name(fake_cuda, value, error, match):
    capturer = cuda.StreamCapturer(5)
    capturer.begin()
    with (
        pytest.raises(error, match=match),
        capturer.while_loop(_DeviceArray(), max_iterations=value),
    ):
        pass
    capturer.end()


def test_a_loop_outside_an_open_capture_is_refused(fake_cuda):
    capturer = cuda.StreamCapturer(5)
    loop, branch = capturer.while_loop(_DeviceArray()), capturer.if_(_DeviceArray())
    with pytest.raises(cuda.LifetimeError, match="while needs an open capture"), loop:
        pass
    with pytest.raises(cuda.LifetimeError, match="if needs an open capture"), branch:
        pass
    assert fake_cuda == []


def test_a_flag_on_another_device_than_the_stream_is_refused(fake_cuda):
    with (
        cuda.StreamCapturer(5) as capturer,
        pytest.raises(ValueError, match="flag is on cuda:1, but the captured stream is on cuda:0"),
        capturer.while_loop(_DeviceArray(device_index=1)),
    ):
        pass


# -- the condition kernel -------------------------------------------------------------------


def test_the_condition_kernel_compiles_for_sm_90(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    image = cuda.compile_cuda(loops._source(), name=loops._KERNEL, arch="sm_90")
    assert image[:4] == b"\x7fELF"
    assert loops._KERNEL.encode() in image and b"cudaGraphSetConditional" in image


# -- recording a body ------------------------------------------------------------------------


def test_a_while_body_is_recorded_on_the_same_stream_into_the_node(fake_cuda):
    flag, used = _DeviceArray(), object()
    with cuda.StreamCapturer(5) as capturer, capturer.while_loop(flag):
        fake_cuda.append(("body", ()))
        cuda.record_use(5, used)
        assert graph.any_capture_active()
    assert _names(fake_cuda) == [
        "cudaStreamGetDevice",
        "cudaStreamBeginCapture",
        "cudaStreamGetCaptureInfo",
        "cudaGraphConditionalHandleCreate",
        "cudaStreamGetCaptureInfo",
        "add_node",
        "cudaStreamEndCapture",  # the outer capture pauses
        "cudaStreamBeginCaptureToGraph",  # the same stream, into the body
        "body",
        "launch",  # eagle's condition kernel, the body's last node
        "cudaStreamEndCapture",
        "cudaStreamBeginCaptureToGraph",  # the outer capture resumes after the node
        "cudaStreamEndCapture",
    ]
    calls = dict(fake_cuda)
    assert calls["add_node"] == ([11], "while")
    assert calls["cudaGraphConditionalHandleCreate"][1:] == (1, 1)  # first pass runs
    body_begin, outer_resume = [a for n, a in fake_cuda if n == "cudaStreamBeginCaptureToGraph"]
    assert body_begin[:2] == (5, "body") and body_begin[4] == 0
    assert outer_resume[1] == "outer" and [int(n) for n in outer_resume[2]] == [99]
    assert calls["launch"] == [42, flag, 0, 0, 0]  # handle, flag, int32, no guard, slot
    assert used in capturer.captured._kept and flag in capturer.captured._kept


def test_an_if_sets_its_condition_before_the_node(fake_cuda):
    flag = _DeviceArray(dtype="float64")
    with cuda.StreamCapturer(5) as capturer, capturer.if_(flag):
        fake_cuda.append(("body", ()))
    names = _names(fake_cuda)
    assert names.index("launch") < names.index("add_node") < names.index("body")
    calls = dict(fake_cuda)
    assert calls["add_node"] == ([77], "if")  # after the kernel that sets the condition
    assert calls["cudaGraphConditionalHandleCreate"][1] == 0
    assert calls["launch"][2] == 2  # reads a float64 flag


def test_a_failing_body_removes_the_node_and_resumes_where_it_was(fake_cuda):
    capturer = cuda.StreamCapturer(5)
    capturer.begin()
    with pytest.raises(KeyError), capturer.while_loop(_DeviceArray()):
        raise KeyError("body failed")
    names = _names(fake_cuda)
    assert "launch" not in names  # no condition kernel after a failed body
    assert names[-3:] == [
        "cudaStreamEndCapture",
        "cudaGraphDestroyNode",
        "cudaStreamBeginCaptureToGraph",
    ]
    assert [int(n) for n in fake_cuda[-1][1][2]] == [11]  # the dependencies from before
    assert capturer._open and graph.any_capture_active()
    capturer.end().discard()
    assert not graph.any_capture_active()


def test_a_failing_if_body_also_removes_the_kernel_that_set_its_condition(fake_cuda):
    capturer = cuda.StreamCapturer(5)
    capturer.begin()
    with pytest.raises(KeyError), capturer.if_(_DeviceArray()):
        raise KeyError("body failed")
    capturer.end()
    destroyed = [int(a[0]) for n, a in fake_cuda if n == "cudaGraphDestroyNode"]
    assert destroyed == [99, 77]


def test_the_first_loop_on_a_device_loads_the_kernel_outside_the_capture(fake_cuda, monkeypatch):
    monkeypatch.setattr(loops, "_kernels", {})
    loaded = []

    def fake_load(source, name, device):
        fake_cuda.append(("load", (name, device)))
        kernel = _Kernel(fake_cuda, {})
        loaded.append(kernel)
        return kernel

    monkeypatch.setattr(loops, "load_kernel", fake_load)
    with cuda.StreamCapturer(5) as capturer, capturer.while_loop(_DeviceArray()):
        pass
    names = _names(fake_cuda)
    start = names.index("load") - 3
    assert names[start : start + 6] == [
        "cudaStreamGetCaptureInfo",
        "cudaStreamEndCapture",
        "cudaThreadExchangeStreamCaptureMode",
        "load",
        "cudaThreadExchangeStreamCaptureMode",
        "cudaStreamBeginCaptureToGraph",
    ]
    assert loops._kernels == {0: loaded[0]}
    with cuda.StreamCapturer(6) as capturer, capturer.while_loop(_DeviceArray()):
        pass
    assert _names(fake_cuda).count("load") == 1


def test_a_guarded_loop_holds_a_pass_counter_until_its_graph_goes(fake_cuda):
    free_before = len(loops._free_slots.get(0, range(loops.MAX_GUARDED_LOOPS)))
    with cuda.StreamCapturer(5) as capturer, capturer.while_loop(_DeviceArray(), max_iterations=7):
        pass
    launch = dict(fake_cuda)["launch"]
    assert launch[3] == 7
    counters = [k for k in capturer.captured._kept if isinstance(k, loops._PassCounter)]
    assert [c.slot for c in counters] == [launch[4]]
    assert len(loops._free_slots[0]) == free_before - 1
    built = cuda.Graph.from_captured(capturer.captured)
    del counters
    built.destroy()
    gc.collect()
    assert len(loops._free_slots[0]) == free_before


def test_a_nested_while_sets_its_condition_before_its_node(fake_cuda):
    outer, inner = _DeviceArray(), _DeviceArray(dtype="float32")
    with cuda.StreamCapturer(5) as capturer, capturer.while_loop(outer):
        fake_cuda.append(("outer body", ()))
        with capturer.while_loop(inner, max_iterations=3):
            fake_cuda.append(("body", ()))
    names = _names(fake_cuda)
    launches = [args for name, args in fake_cuda if name == "launch"]
    nodes = [args for name, args in fake_cuda if name == "add_node"]
    assert nodes == [([11], "while"), ([77], "while")]  # the inner one after the prelude
    assert names.index("launch") < names.index("add_node", names.index("add_node") + 1)
    prelude, inner_end, outer_end = launches
    assert prelude[2:] == [loops._ALWAYS, 0, 0]  # "go", and no pass counted
    assert inner_end[1] is inner and inner_end[2:4] == [1, 3]
    assert outer_end[1] is outer and outer_end[2:4] == [0, 0]
    assert loops._depth == {}
