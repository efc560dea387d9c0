"""Launcher.rebind on a device: the routed seed kernel's forward and reverse in one graph,
pointed at three sets of planes in turn and equal to fresh captures bit for bit, then
patched without capturing once a capture has shown where their pointers lie; refused
rebinds that leave replays correct; a thousand rebinds that do not grow device memory; a
graph of hawk kernels alone, rebound through its kernel nodes' parameters; and a captured
Param number that later runs and a rebind leave as captured."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import eagle.diff
import eagle.plan
from eagle import arrays, cuda
from eagle.cuda import _rebind
from eagle.cuda._runtime import cudart
from hawk.emit import policy
from tests import _route_kernels as k
from tests._util import rel_error

pytestmark = pytest.mark.gpu

MiB = 1 << 20
R, U, B = 96, 48, 80  # y[s*U + u] = sum_r w[r, u] f[r, s]
EPS32 = float(np.finfo(np.float32).eps)


@pytest.fixture
def stream():
    return cuda.Stream(non_blocking=True)


@pytest.fixture(scope="module")
def routed():
    with policy.using(contraction="gemm"):
        plan = eagle.plan.auto(k.make_contract(R, U, B))
    assert plan.route("device") == "gemm"
    return plan


def _planes(rng) -> tuple[dict[str, np.ndarray], dict[str, arrays.Array]]:
    """Fresh inputs, and device planes: the inputs, and poisoned outputs."""
    host = {
        "w": rng.standard_normal((R, U)).astype(np.float32),
        "f": rng.standard_normal((R, B)).astype(np.float32),
        "y_bar": rng.standard_normal(B * U).astype(np.float32),
    }
    device = {name: arrays.asarray(value, device="cuda:0") for name, value in host.items()}
    for name, shape in (("y", (B * U,)), ("w_bar", (R, U)), ("f_bar", (R, B))):
        device[name] = arrays.full(shape, np.nan, "float32", "cuda:0")
    return host, device


def _reference(host: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    w, f = host["w"].astype(np.float64), host["f"].astype(np.float64)
    cot = host["y_bar"].astype(np.float64).reshape(B, U)
    return {"y": (f.T @ w).reshape(-1), "w_bar": f @ cot, "f_bar": w @ cot.T}


def _capture(plan, planes, stream) -> cuda.Launcher:
    """One graph: zero the gradients, the forward product, the adjoint's two products."""
    with stream:
        forward = plan.bind(w=planes["w"], f=planes["f"], y=planes["y"])
        backward = eagle.diff.reverse(plan).bind(
            **{name: planes[name] for name in ("w", "f", "y_bar", "w_bar", "f_bar")}
        )
    with cuda.StreamCapturer(stream) as cap:
        planes["w_bar"].fill(0.0, stream)
        planes["f_bar"].fill(0.0, stream)
        forward.launch(stream)
        backward.launch(stream)
    return cuda.Graph.from_captured(cap.captured).launcher().stream(stream)


def _replay(launcher, planes, stream) -> dict[str, np.ndarray]:
    for name in ("y", "w_bar", "f_bar"):
        planes[name].fill(np.nan, stream)
    launcher.launch()
    launcher.synchronize()
    return {name: planes[name].numpy() for name in ("y", "w_bar", "f_bar")}


def _check(got: dict[str, np.ndarray], host: dict[str, np.ndarray]) -> None:
    for name, ref in _reference(host).items():
        assert rel_error(got[name], ref) < 8 * R * EPS32, name


def test_forward_and_reverse_rebound_three_times_equal_fresh_captures(rng, routed, stream):
    first_host, first = _planes(rng)
    launcher = _capture(routed, first, stream)
    _check(_replay(launcher, first, stream), first_host)
    for _ in range(3):
        host, planes = _planes(rng)
        launcher.rebind(**planes)
        got = _replay(launcher, planes, stream)
        _check(got, host)
        fresh_planes = {**planes}
        for name in ("y", "w_bar", "f_bar"):
            fresh_planes[name] = arrays.full(planes[name].shape, np.nan, "float32", "cuda:0")
        fresh = _replay(_capture(routed, fresh_planes, stream), fresh_planes, stream)
        for name in fresh:
            assert np.array_equal(got[name], fresh[name]), name
    first["y"].fill(np.nan, stream)  # the first planes are no longer written
    launcher.launch()
    launcher.synchronize()
    assert np.isnan(first["y"].numpy()).all()


def test_a_product_rebound_again_is_patched_without_capturing_and_equals_fresh_captures(
    rng, routed, stream, monkeypatch
):
    """The first rebind captures the product again, and shows where its pointers lie;
    later rebinds to planes aligned alike patch the node's arguments instead. Each replay
    equals a fresh capture bit for bit; a plane aligned otherwise is captured again."""
    captures = []
    real = _rebind.StreamCapturer

    def counted(stream_ptr):
        captures.append(stream_ptr)
        return real(stream_ptr)

    def forward(planes):
        with stream:
            bound = routed.bind(w=planes["w"], f=planes["f"], y=planes["y"])
        with cuda.StreamCapturer(stream) as cap:
            bound.launch(stream)
        return cuda.Graph.from_captured(cap.captured).launcher().stream(stream)

    def replay(launcher, planes):
        planes["y"].fill(np.nan, stream)
        launcher.launch()
        launcher.synchronize()
        return planes["y"].numpy()

    monkeypatch.setattr(_rebind, "StreamCapturer", counted)
    _, first = _planes(rng)
    launcher = forward(first)
    previous = first
    for turn in range(5):
        host, planes = _planes(rng)
        launcher.rebind(w=planes["w"], f=planes["f"], y=planes["y"])
        assert len(captures) == 1, turn  # the first rebind alone captured
        got = replay(launcher, planes)
        assert rel_error(got, _reference(host)["y"]) < 8 * R * EPS32
        fresh = {**planes, "y": arrays.full(planes["y"].shape, np.nan, "float32", "cuda:0")}
        assert np.array_equal(got, replay(forward(fresh), fresh))
        previous["y"].fill(np.nan, stream)  # the plane replaced is no longer written
        launcher.launch()
        launcher.synchronize()
        assert np.isnan(previous["y"].numpy()).all()
        previous = planes
    host, planes = _planes(rng)
    wide = arrays.full((B * U + 16,), np.nan, "float32", "cuda:0")
    planes["y"] = wide[16:]  # 64 bytes past an aligned start: cuBLAS may pick another kernel
    launcher.rebind(w=planes["w"], f=planes["f"], y=planes["y"])
    assert len(captures) == 2
    assert rel_error(replay(launcher, planes), _reference(host)["y"]) < 8 * R * EPS32


def test_rebinding_by_the_arrays_replaced_and_the_graph_keeping_the_new_ones(rng, routed, stream):
    _, old = _planes(rng)
    launcher = _capture(routed, old, stream)
    host, new = _planes(rng)
    launcher.rebind({old[name]: new[name] for name in new})
    outputs = {name: new[name] for name in ("y", "w_bar", "f_bar")}
    del new
    gc.collect()  # the inputs are held by the graph alone now
    _check(_replay(launcher, outputs, stream), host)


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: arrays.full((R, U + 1), 1.0, "float32", "cuda:0"), ValueError),
        (lambda: arrays.full((R, U), 1.0, "float64", "cuda:0"), TypeError),
        (lambda: arrays.asarray(np.ones((R, U), np.float32)), ValueError),  # on the host
    ],
    ids=["shape", "dtype", "device"],
)
def test_a_refused_rebind_leaves_replays_correct(rng, routed, stream, make, error):
    _, first = _planes(rng)
    launcher = _capture(routed, first, stream)
    host, planes = _planes(rng)
    launcher.rebind(**planes)
    _, other = _planes(rng)
    with pytest.raises(error, match="plane 'w'|host array"):
        launcher.rebind(w=make(), f=other["f"], y=other["y"])
    _check(_replay(launcher, planes, stream), host)
    launcher.rebind(w=other["w"])  # the names still mean the planes before the refusal
    _check(_replay(launcher, planes, stream), {**host, "w": other["w"].numpy()})


@pytest.mark.device_memory
def test_a_thousand_rebinds_do_not_grow_device_memory(rng, routed, stream):
    sets = [_planes(rng) for _ in range(3)]
    launcher = _capture(routed, sets[0][1], stream)
    for _, planes in sets:  # warm: every set once
        launcher.rebind(**planes)
    gc.collect()
    free_before, _ = cudart.cudaMemGetInfo()
    used_before = cuda.default_pool().used_bytes()
    for turn in range(1000):
        launcher.rebind(**sets[turn % 3][1])
        if turn % 100 == 0:
            launcher.launch()
    launcher.synchronize()
    gc.collect()
    free_after, _ = cudart.cudaMemGetInfo()
    assert free_before - free_after <= 4 * MiB, (free_before, free_after)
    assert cuda.default_pool().used_bytes() <= used_before
    host, planes = sets[999 % 3]
    _check(_replay(launcher, planes, stream), host)


def test_a_captured_plan_and_adjoint_rebind_by_plane_name(rng, routed, stream):
    host, planes = _planes(rng)
    with stream:
        forward = routed.bind(w=planes["w"], f=planes["f"], y=planes["y"])
    launcher = forward.capture(stream)
    host2, planes2 = _planes(rng)
    launcher.rebind(f=planes2["f"], y=planes2["y"])
    launcher.launch()
    launcher.synchronize()
    expected = _reference({**host, "f": host2["f"]})["y"]
    assert rel_error(planes2["y"].numpy(), expected) < 8 * R * EPS32
    assert np.isnan(planes["y"].numpy()).all()  # the bound plan keeps its planes
    grads = {name: planes[name] for name in ("w", "f", "y_bar", "w_bar")}
    backward = eagle.diff.reverse(routed).bind(**grads)
    launcher = backward.capture(stream)
    planes2["w_bar"].fill(0.0, stream)
    launcher.rebind(y_bar=planes2["y_bar"], w_bar=planes2["w_bar"])
    launcher.launch()
    launcher.synchronize()
    expected = _reference({**host, "y_bar": host2["y_bar"]})["w_bar"]
    assert rel_error(planes2["w_bar"].numpy(), expected) < 8 * B * EPS32


def test_a_hawk_only_graph_rebinds_through_kernel_node_parameters(rng, stream, monkeypatch):
    plan = eagle.plan.auto(k.make_contract(R, U, B), contraction="loop")
    assert plan.route("device") == "loop"
    host, planes = _planes(rng)
    with stream:
        bound = plan.bind(w=planes["w"], f=planes["f"], y=planes["y"])
    with cuda.StreamCapturer(stream) as cap:
        planes["y"].fill(0.0, stream)
        bound.launch(stream)
    graph = cuda.Graph.from_captured(cap.captured)
    assert sorted(graph.node_types()) == ["kernel", "memset"]
    launcher = graph.launcher().stream(stream)

    def no_capture(*args, **kwargs):
        raise AssertionError("a hawk kernel is rebound without capturing again")

    monkeypatch.setattr(_rebind, "StreamCapturer", no_capture)
    for _ in range(3):
        host, planes = _planes(rng)
        launcher.rebind(w=planes["w"], f=planes["f"], y=planes["y"])
        planes["y"].fill(np.nan, stream)
        launcher.launch()
        launcher.synchronize()
        got = planes["y"].numpy()
        assert rel_error(got, _reference(host)["y"]) < 8 * R * EPS32
        with stream:
            plan.bind(w=planes["w"], f=planes["f"], y=planes["y"]).launch(stream)
        stream.synchronize()
        assert np.array_equal(got, planes["y"].numpy())  # the loop's own bits


def test_a_captured_run_keeps_its_number_through_later_runs_and_a_rebind(rng, stream):
    from tests._hawk_kernels import saxpy

    n = 5000
    plan = eagle.plan.auto(saxpy)

    def planes() -> tuple[np.ndarray, np.ndarray, arrays.Array, arrays.Array]:
        x, y = rng.standard_normal(n), rng.standard_normal(n)
        return x, y, arrays.asarray(x, device="cuda:0"), arrays.asarray(y, device="cuda:0")

    x, y, x_d, y_d = planes()
    with stream:
        plan.run(a=0.0, x=x_d, y=y_d)  # the binding the capture and later runs reuse
        with cuda.StreamCapturer(stream) as cap:
            plan.run(a=2.0, x=x_d, y=y_d)  # the graph keeps 2.0
        plan.run(a=-7.0, x=x_d, y=y_d)  # packs -7.0 into the binding's arguments
    graph = cuda.Graph.from_captured(cap.captured)
    assert graph.node_types() == ["kernel"]  # the number is an argument: no memset
    launcher = graph.launcher().stream(stream)
    stream.synchronize()
    assert rel_error(y_d.numpy(), y - 7.0 * x) < 1e-14
    launcher.launch()
    launcher.synchronize()
    assert rel_error(y_d.numpy(), y - 5.0 * x) < 1e-14  # the replay adds 2.0 * x, not -7.0 * x
    new_x, new_y, new_x_d, new_y_d = planes()
    launcher.rebind(x=new_x_d, y=new_y_d)  # copies the node's arguments: 2.0 as captured
    launcher.launch()
    launcher.synchronize()
    assert rel_error(new_y_d.numpy(), new_y + 2.0 * new_x) < 1e-14
    graph.destroy()
