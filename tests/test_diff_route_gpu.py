"""The routed adjoint on a device: the gradient products against the loop adjoint and a
float64 reference, accumulation, a table read by two launches, a forward and its
reverse captured together in one graph, and the gradient products on branches of a
capture (alone and after a launch whose gradient they read)."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.diff
import eagle.plan
from eagle import arrays, cuda
from eagle.cuda import _graph_nodes as graph_nodes
from hawk.emit import policy
from tests import _route_kernels as k

pytestmark = pytest.mark.gpu

EPS32 = float(np.finfo(np.float32).eps)

SHAPES = [(64, 32, 128), (33, 17, 45), (257, 96, 33), (515, 40, 300)]


def _device(values: np.ndarray) -> arrays.Array:
    return arrays.asarray(np.ascontiguousarray(values, dtype=np.float32), device="cuda:0")


def _plans(kernel):
    with policy.using(contraction="gemm"):
        routed = eagle.plan.auto(kernel)
    return routed, eagle.plan.auto(kernel)


def _inputs(rng, r, u, b):
    w = rng.standard_normal((r, u)).astype(np.float32)
    f = rng.standard_normal((r, b)).astype(np.float32)
    y_bar = rng.standard_normal(b * u).astype(np.float32)
    return w, f, y_bar


def _reference(w, f, y_bar, b, u):
    cot = y_bar.astype(np.float64).reshape(b, u)
    w_bar = f.astype(np.float64) @ cot  # dL/dw[r, u] = sum_s f[r, s] y_bar[s, u]
    f_bar = w.astype(np.float64) @ cot.T  # dL/df[r, s] = sum_u w[r, u] y_bar[s, u]
    return w_bar, f_bar


def _bound(reference: np.ndarray, k_extent: int, scale: float) -> float:
    """A few ulp of a K-term float32 sum of terms up to ``scale``, per element."""
    return 4 * k_extent * EPS32 * scale + 4 * EPS32 * float(np.abs(reference).max())


@pytest.mark.parametrize(("r", "u", "b"), SHAPES, ids=str)
def test_routed_adjoint_matches_the_loop_adjoint_and_the_reference(rng, r, u, b):
    kernel = k.make_contract(r, u, b)
    routed, loop = _plans(kernel)
    w, f, y_bar = _inputs(rng, r, u, b)
    start_w = rng.standard_normal((r, u)).astype(np.float32)
    start_f = rng.standard_normal((r, b)).astype(np.float32)
    ref_w, ref_f = _reference(w, f, y_bar, b, u)
    ref_w += start_w
    ref_f += start_f

    results = {}
    for name, plan in (("gemm", routed), ("loop", loop)):
        adjoint = eagle.diff.reverse(plan)
        w_bar, f_bar = _device(start_w), _device(start_f)
        bound = adjoint.bind(
            w=_device(w), f=_device(f), y_bar=_device(y_bar), w_bar=w_bar, f_bar=f_bar
        )
        assert [step.route for step in bound.steps] == [name]
        bound.launch()
        results[name] = (w_bar.numpy(), f_bar.numpy())

    scale_w = float(np.abs(f).max() * np.abs(y_bar).max())
    scale_f = float(np.abs(w).max() * np.abs(y_bar).max())
    for (got_w, got_f), label in ((results["gemm"], "gemm"), (results["loop"], "loop")):
        assert np.abs(got_w - ref_w).max() <= _bound(ref_w, b, scale_w), label
        assert np.abs(got_f - ref_f).max() <= _bound(ref_f, u, scale_f), label
    routed_w, routed_f = results["gemm"]
    loop_w, loop_f = results["loop"]
    assert np.abs(routed_w - loop_w).max() <= 2 * _bound(ref_w, b, scale_w)
    assert np.abs(routed_f - loop_f).max() <= 2 * _bound(ref_f, u, scale_f)


def test_two_runs_add_and_only_the_passed_gradient_is_computed(rng):
    r, u, b = 96, 48, 80
    routed, _ = _plans(k.make_contract(r, u, b))
    adjoint = eagle.diff.reverse(routed)
    w, f, y_bar = _inputs(rng, r, u, b)
    ref_w, _ = _reference(w, f, y_bar, b, u)
    w_bar = arrays.zeros((r, u), "float32", "cuda:0")
    planes = {"w": _device(w), "f": _device(f), "y_bar": _device(y_bar), "w_bar": w_bar}
    adjoint.run(**planes)
    adjoint.run(**planes)
    cuda.current_stream().synchronize()
    got = w_bar.numpy()
    assert np.linalg.norm(got - 2 * ref_w) / np.linalg.norm(2 * ref_w) < 8 * b * EPS32


def test_a_table_read_by_two_launches_gets_the_sum(rng):
    r, u, b = 64, 32, 128
    routed, _ = _plans(k.make_contract(r, u, b))
    sequence = eagle.diff.reverse([routed, routed])
    assert sequence.route("device") == ("gemm", "gemm")
    w = rng.standard_normal((r, u)).astype(np.float32)
    f1, f2 = (rng.standard_normal((r, b)).astype(np.float32) for _ in range(2))
    c1, c2 = (rng.standard_normal(b * u).astype(np.float32) for _ in range(2))
    w_d = _device(w)
    w_bar = arrays.zeros((r, u), "float32", "cuda:0")
    sequence.run(
        {"w": w_d, "f": _device(f1), "y_bar": _device(c1), "w_bar": w_bar},
        {"w": w_d, "f": _device(f2), "y_bar": _device(c2), "w_bar": w_bar},
    )
    ref = _reference(w, f1, c1, b, u)[0] + _reference(w, f2, c2, b, u)[0]
    got = w_bar.numpy()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 8 * b * EPS32


def test_forward_and_reverse_of_a_routed_plan_in_one_graph(rng):
    r, u, b = 128, 64, 96
    routed, _ = _plans(k.make_contract(r, u, b))
    adjoint = eagle.diff.reverse(routed)
    w, f, y_bar = _inputs(rng, r, u, b)
    w_d, f_d, c_d = _device(w), _device(f), _device(y_bar)
    y = arrays.full((b * u,), np.nan, "float32", "cuda:0")
    w_bar = arrays.zeros((r, u), "float32", "cuda:0")
    f_bar = arrays.zeros((r, b), "float32", "cuda:0")
    stream = cuda.Stream(non_blocking=True)
    with stream:
        forward = routed.bind(w=w_d, f=f_d, y=y)
        backward = adjoint.bind(w=w_d, f=f_d, y_bar=c_d, w_bar=w_bar, f_bar=f_bar)
    assert forward.route == "gemm" and [s.route for s in backward.steps] == ["gemm"]
    with cuda.StreamCapturer(stream.ptr()) as cap:
        forward.launch(stream)
        backward.launch(stream)
    kinds = cap.captured.node_types()
    assert "memalloc" not in kinds and len(kinds) >= 3
    launcher = cuda.Graph.from_captured(cap.captured).launcher().stream(stream)
    replays = 3
    for _ in range(replays):
        launcher.launch()
    launcher.synchronize()
    ref_y = (f.astype(np.float64).T @ w.astype(np.float64)).reshape(-1)
    ref_w, ref_f = _reference(w, f, y_bar, b, u)
    assert np.linalg.norm(y.numpy() - ref_y) / np.linalg.norm(ref_y) < 4 * r * EPS32
    got_w, got_f = w_bar.numpy(), f_bar.numpy()
    assert np.linalg.norm(got_w - replays * ref_w) / np.linalg.norm(replays * ref_w) < 8 * b * EPS32
    assert np.linalg.norm(got_f - replays * ref_f) / np.linalg.norm(replays * ref_f) < 8 * u * EPS32


def test_two_routed_adjoint_runs_give_the_same_bits(rng):
    r, u, b = 200, 72, 150
    routed, _ = _plans(k.make_contract(r, u, b))
    adjoint = eagle.diff.reverse(routed)
    w, f, y_bar = _inputs(rng, r, u, b)
    outs = []
    for _ in range(2):
        f_bar = arrays.zeros((r, b), "float32", "cuda:0")
        adjoint.run(w=_device(w), f=_device(f), y_bar=_device(y_bar), f_bar=f_bar)
        outs.append(f_bar.numpy())
    assert np.array_equal(outs[0], outs[1])


def _parallel_pairs(captured: cuda.CapturedGraph) -> int:
    """How many pairs of the captured graph's kernel nodes are on parallel branches."""
    found, before_of = graph_nodes.edges(captured._handle)
    reach: dict[int, set[int]] = {}

    def before(key: int) -> set[int]:
        if key not in reach:
            reach[key] = set()
            for dep in before_of[key]:
                reach[key] |= {int(dep)} | before(int(dep))
        return reach[key]

    kernels = [key for key, node in found.items() if graph_nodes.kind(node) == "kernel"]
    return sum(
        a not in before(b) and b not in before(a)
        for i, a in enumerate(kernels)
        for b in kernels[i + 1 :]
    )


def _side_by_side(captured: cuda.CapturedGraph) -> bool:
    """Whether two kernel nodes of the captured graph are on parallel branches (neither
    reaches the other)."""
    return _parallel_pairs(captured) > 0


@pytest.mark.parametrize("accumulate", [False, True])
def test_a_captured_adjoint_runs_its_two_products_on_branches(rng, accumulate):
    r, u, b = 256, 96, 160
    routed, _ = _plans(k.make_contract(r, u, b))
    w, f, y_bar = _inputs(rng, r, u, b)
    w_bar = arrays.full((r, u), np.nan, "float32", "cuda:0")  # poisoned: written, not read
    f_bar = arrays.full((r, b), np.nan, "float32", "cuda:0")
    if accumulate:
        w_bar.fill(0.0)
        f_bar.fill(0.0)
    planes = {"w": _device(w), "f": _device(f), "y_bar": _device(y_bar)}
    stream = cuda.Stream(non_blocking=True)
    with stream:
        backward = eagle.diff.reverse(routed, accumulate=accumulate).bind(
            **planes, w_bar=w_bar, f_bar=f_bar
        )
    with cuda.StreamCapturer(stream.ptr()) as cap:
        backward.launch(stream)
    assert _side_by_side(cap.captured)  # the two products run on branches
    launcher = cuda.Graph.from_captured(cap.captured).launcher().stream(stream)
    replays = 1 if not accumulate else 2
    for _ in range(replays):
        launcher.launch()
    launcher.synchronize()
    ref_w, ref_f = _reference(w, f, y_bar, b, u)
    got_w, got_f = w_bar.numpy(), f_bar.numpy()
    assert np.linalg.norm(got_w - replays * ref_w) / np.linalg.norm(replays * ref_w) < 8 * b * EPS32
    assert np.linalg.norm(got_f - replays * ref_f) / np.linalg.norm(replays * ref_f) < 8 * u * EPS32
    if not accumulate:  # an eager launch, on one stream, writes the same bits
        w_bar.fill(np.nan, stream)
        f_bar.fill(np.nan, stream)
        backward.launch(stream)
        stream.synchronize()
        assert np.array_equal(w_bar.numpy(), got_w) and np.array_equal(f_bar.numpy(), got_f)


def test_a_sequence_keeps_a_forked_product_beside_the_next_launch(rng):
    """eagle.plan.sequence([adjoint, kernel]): the product on a branch runs beside the
    later kernel (which touches none of its planes), where the two launched one after the
    other join the branch before the kernel; both give the float64 results."""
    r, u, b, n = 256, 96, 160, 4099
    routed, _ = _plans(k.make_contract(r, u, b))
    w, f, y_bar = _inputs(rng, r, u, b)
    x = rng.standard_normal(n).astype(np.float32)
    w_bar = arrays.full((r, u), np.nan, "float32", "cuda:0")
    f_bar = arrays.full((r, b), np.nan, "float32", "cuda:0")
    z = arrays.full((n,), np.nan, "float32", "cuda:0")
    stream = cuda.Stream(non_blocking=True)
    with stream:
        adjoint = eagle.diff.reverse(routed, accumulate=False).bind(
            w=_device(w), f=_device(f), y_bar=_device(y_bar), w_bar=w_bar, f_bar=f_bar
        )
        kernel = eagle.plan.auto(k.square).bind(x=_device(x), y=z)
        both = eagle.plan.sequence([adjoint, kernel])
    with cuda.StreamCapturer(stream.ptr()) as apart:
        adjoint.launch(stream)
        kernel.launch(stream)
    with cuda.StreamCapturer(stream.ptr()) as together:
        both.launch(stream)
    assert _parallel_pairs(together.captured) > _parallel_pairs(apart.captured)
    launcher = cuda.Graph.from_captured(together.captured).launcher().stream(stream)
    launcher.launch()
    launcher.synchronize()
    ref_w, ref_f = _reference(w, f, y_bar, b, u)
    ref_z = x.astype(np.float64) ** 2 + 1.0
    assert np.linalg.norm(w_bar.numpy() - ref_w) / np.linalg.norm(ref_w) < 8 * b * EPS32
    assert np.linalg.norm(f_bar.numpy() - ref_f) / np.linalg.norm(ref_f) < 8 * u * EPS32
    assert np.linalg.norm(z.numpy() - ref_z) / np.linalg.norm(ref_z) < 4 * EPS32


def test_a_product_forked_in_a_sequence_joins_before_the_launch_that_reads_it(rng):
    """reverse([contract, square]) with square's ``x`` the contraction's output: square's
    adjoint runs first and writes the contraction's cotangent, which both of its gradient
    products read; their branches join back before the launch ends."""
    r, u, b = 128, 64, 96
    routed, _ = _plans(k.make_contract(r, u, b))
    w, f, _ = _inputs(rng, r, u, b)
    y = (f.astype(np.float64).T @ w.astype(np.float64)).reshape(-1).astype(np.float32)
    z_bar = rng.standard_normal(b * u).astype(np.float32)
    y_bar_ref = 2.0 * y.astype(np.float64) * z_bar  # d(y*y + 1)/dy
    y_bar = arrays.full((b * u,), np.nan, "float32", "cuda:0")
    w_bar = arrays.full((r, u), np.nan, "float32", "cuda:0")
    f_bar = arrays.full((r, b), np.nan, "float32", "cuda:0")
    stream = cuda.Stream(non_blocking=True)
    with stream:
        backward = eagle.diff.reverse([routed, eagle.plan.auto(k.square)], accumulate=False).bind(
            {"w": _device(w), "f": _device(f), "y_bar": y_bar, "w_bar": w_bar, "f_bar": f_bar},
            {"x": _device(y), "y_bar": _device(z_bar), "x_bar": y_bar},
        )
    with cuda.StreamCapturer(stream.ptr()) as cap:
        backward.launch(stream)
    assert _side_by_side(cap.captured)  # after square's adjoint, the products side by side
    launcher = cuda.Graph.from_captured(cap.captured).launcher().stream(stream)
    launcher.launch()
    launcher.synchronize()
    cot = y_bar_ref.reshape(b, u)
    ref_w, ref_f = f.astype(np.float64) @ cot, w.astype(np.float64) @ cot.T
    assert np.linalg.norm(y_bar.numpy() - y_bar_ref) / np.linalg.norm(y_bar_ref) < 4 * EPS32
    assert np.linalg.norm(w_bar.numpy() - ref_w) / np.linalg.norm(ref_w) < 8 * b * EPS32
    assert np.linalg.norm(f_bar.numpy() - ref_f) / np.linalg.norm(ref_f) < 8 * u * EPS32
