"""The KAN layer's kernels (benchmarks/_kan.py) on the host, against float64 numpy.

The reference itself is checked by finite differences; the kernels compile for sm_90;
docs/kan.md's kernels are these kernels.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk.diff
from eagle.cuda import compile_cuda
from hawk.contraction import recognize
from hawk.emit import cuda, policy
from tests.test_docs import DOCS, examples

ROOT = Path(__file__).resolve().parents[1]


def _load_kan() -> ModuleType:
    """benchmarks/_kan.py as the module ``kan_layer`` (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("kan_layer", ROOT / "benchmarks" / "_kan.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


kan = sys.modules.get("kan_layer") or _load_kan()

# (samples, inputs, outputs, intervals): a sample count that is not a power of two
SHAPES = [(37, 3, 4, 8), (20, 2, 5, 5)]


def _data(rng: np.random.Generator, layer: Any, spread: float = 1.2) -> dict[str, np.ndarray]:
    """Inputs partly outside the grid (``spread`` > 1), where the basis has its tails."""
    middle, half = (layer.lo + layer.hi) / 2, (layer.hi - layer.lo) / 2 * spread
    return {
        "x": rng.uniform(middle - half, middle + half, (layer.inputs, layer.samples)),
        "c": rng.standard_normal((layer.rows, layer.outputs)),
        "y_bar": rng.standard_normal(layer.samples * layer.outputs),
    }


def _rel(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_forward_launches_match_the_reference(rng, shape, dtype):
    layer = kan.kan_kernels(*shape, lo=-0.5, hi=2.0)
    data = {k: v.astype(dtype) for k, v in _data(rng, layer).items()}
    ref = kan.reference(layer, data["x"], data["c"], data["y_bar"])
    phi = np.full(layer.rows * layer.samples, np.nan, dtype)
    eagle.plan.auto(layer.basis).run(x=data["x"], phi=phi)
    y = np.full(layer.samples * layer.outputs, np.nan, dtype)
    eagle.plan.auto(layer.contract).run(c=data["c"], phi=phi, y=y)
    tolerance = 1e-13 if dtype == "float64" else 1e-5
    assert _rel(phi, ref["phi"].reshape(-1)) < tolerance
    assert _rel(y, ref["y"]) < tolerance


def test_the_basis_is_a_partition_of_unity_with_four_functions_per_input(rng):
    layer = kan.kan_kernels(200, 3, 2, 8)
    x = rng.uniform(layer.lo, layer.hi, (layer.inputs, layer.samples))
    phi = np.full(layer.rows * layer.samples, np.nan)
    eagle.plan.auto(layer.basis).run(x=x, phi=phi)
    per_input = phi.reshape(layer.inputs, layer.functions, layer.samples)
    assert np.allclose(per_input.sum(axis=1), 1.0)
    assert (per_input >= 0).all()
    assert (np.count_nonzero(per_input, axis=1) <= 4).all()


def test_the_contraction_is_recognised_and_routes_on_the_device():
    layer = kan.kan_kernels(*SHAPES[0])
    assert recognize(layer.contract).operand_class == "gemm"
    with policy.using(contraction="gemm"):
        plan = eagle.plan.auto(layer.contract)
    assert plan.route("device") == "gemm" and plan.reasons == ()
    assert eagle.diff.reverse(plan).route("device") == "gemm"
    for kernel in (layer.basis, layer.basis_adjoint):
        assert recognize(kernel) is None


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_gradients_match_the_reference_and_add(rng, shape):
    layer = kan.kan_kernels(*shape)
    data = _data(rng, layer)
    ref = kan.reference(layer, data["x"], data["c"], data["y_bar"])
    phi = ref["phi"].reshape(-1).copy()
    start = {
        "c_bar": rng.standard_normal((layer.rows, layer.outputs)),
        "phi_bar": rng.standard_normal((layer.rows, layer.samples)),
        "x_bar": rng.standard_normal((layer.inputs, layer.samples)),
    }
    with policy.using(contraction="gemm"):
        contract = eagle.plan.auto(layer.contract)
    c_bar, phi_bar = start["c_bar"].copy(), start["phi_bar"].copy()
    eagle.diff.reverse(contract).run(
        c=data["c"], phi=phi, y_bar=data["y_bar"], c_bar=c_bar, phi_bar=phi_bar
    )
    assert _rel(c_bar, start["c_bar"] + ref["c_bar"]) < 1e-13
    assert _rel(phi_bar, start["phi_bar"] + ref["phi_bar"]) < 1e-13

    by_hand = start["x_bar"].copy()
    eagle.plan.auto(layer.basis_adjoint).run(
        x=data["x"], phi_bar=ref["phi_bar"], x_bar=by_hand.reshape(-1)
    )
    by_vjp = start["x_bar"].copy()
    eagle.diff.reverse(eagle.plan.auto(layer.basis)).run(
        x=data["x"], phi_bar=ref["phi_bar"].reshape(-1), x_bar=by_vjp
    )
    assert _rel(by_hand, start["x_bar"] + ref["x_bar"]) < 1e-13
    assert _rel(by_vjp, start["x_bar"] + ref["x_bar"]) < 1e-13


def test_reversing_both_launches_at_once_gives_both_gradients(rng):
    layer = kan.kan_kernels(*SHAPES[0])
    data = _data(rng, layer)
    ref = kan.reference(layer, data["x"], data["c"], data["y_bar"])
    with policy.using(contraction="gemm"):
        contract = eagle.plan.auto(layer.contract)
    sequence = eagle.diff.reverse([eagle.plan.auto(layer.basis), contract])
    assert sequence.route("device") == ("gemm", "loop")
    x_bar = np.zeros((layer.inputs, layer.samples))
    c_bar = np.zeros((layer.rows, layer.outputs))
    phi_bar = np.zeros((layer.rows, layer.samples))
    sequence.run(
        {"x": data["x"], "phi_bar": phi_bar.reshape(-1), "x_bar": x_bar},
        {"c": data["c"], "phi": ref["phi"], "y_bar": data["y_bar"], "c_bar": c_bar,
         "phi_bar": phi_bar},
    )  # fmt: skip
    assert _rel(x_bar, ref["x_bar"]) < 1e-13
    assert _rel(c_bar, ref["c_bar"]) < 1e-13


def test_the_reference_gradients_are_the_derivatives(rng):
    layer = kan.kan_kernels(*SHAPES[1])
    data = _data(rng, layer)
    ref = kan.reference(layer, data["x"], data["c"], data["y_bar"])

    def loss(x: np.ndarray, c: np.ndarray) -> float:
        return float(kan.reference(layer, x, c, data["y_bar"])["y"] @ data["y_bar"])

    step = 1e-6
    for _ in range(5):
        i, s = rng.integers(layer.inputs), rng.integers(layer.samples)
        up, down = data["x"].copy(), data["x"].copy()
        up[i, s] += step
        down[i, s] -= step
        slope = (loss(up, data["c"]) - loss(down, data["c"])) / (2 * step)
        assert slope == pytest.approx(ref["x_bar"][i, s], rel=1e-6, abs=1e-7)
        r, o = rng.integers(layer.rows), rng.integers(layer.outputs)
        bump = np.zeros_like(data["c"])
        bump[r, o] = step
        slope = (loss(data["x"], data["c"] + bump) - loss(data["x"], data["c"] - bump)) / (2 * step)
        assert slope == pytest.approx(ref["c_bar"][r, o], rel=1e-6, abs=1e-7)


def test_the_kernels_and_the_generated_adjoint_compile_for_sm90():
    layer = kan.kan_kernels(16384, 64, 64, 8)
    for kernel in (layer.basis, layer.contract, layer.basis_adjoint, hawk.diff.vjp(layer.basis)):
        emitted = cuda.emit(kernel.ir, {p.name: "float32" for p in kernel.planes})
        assert len(compile_cuda(emitted.source, name=emitted.name, arch="sm_90")) > 0


def test_the_docs_page_runs_these_kernels():
    namespace: dict[str, Any] = {"__name__": "docs_kan"}
    for example in examples(DOCS / "kan.md"):
        if not example.gpu:
            example.run(namespace)
    extents = (namespace[name] for name in ("S", "NI", "NO", "G", "LO", "HI", "CH"))
    layer = kan.kan_kernels(*extents)
    for name in ("basis", "contract", "basis_adjoint", *LOCAL_KERNELS):
        assert str(namespace[name].ir) == str(getattr(layer, name).ir), name


# -- the local kernels ---------------------------------------------------------------------

LOCAL_KERNELS = ("local", "local_x_bar", "local_c_bar", "local_c_bar_sum")
# (samples, inputs, outputs, intervals, chunk): chunk limits that do and do not divide S
LOCAL_SHAPES = [(37, 3, 4, 8, 8), (20, 2, 5, 5, 4), (64, 4, 3, 16, 64)]


def _local(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> tuple[Any, ...]:
    *extents, chunk = shape
    layer = kan.kan_kernels(*extents, lo=-0.5, hi=2.0, chunk=chunk)
    data = {k: v.astype(dtype) for k, v in _data(rng, layer, spread=1.5).items()}
    ref = kan.reference(layer, data["x"], data["c"], data["y_bar"])
    return layer, data, ref


def _by_function(layer: Any, c: np.ndarray) -> np.ndarray:
    """``c`` (R, O) as the local kernels read it, (I, NB, O): the same memory."""
    return c.reshape(layer.inputs, layer.functions, layer.outputs)


def _local_by_hand(layer: Any, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The local forward, x_bar and c_bar kernels on poisoned planes."""
    dtype = data["x"].dtype
    c, y_bar = _by_function(layer, data["c"]), data["y_bar"].reshape(layer.samples, -1)
    y = np.full(layer.samples * layer.outputs, np.nan, dtype)
    eagle.plan.auto(layer.local).run(x=data["x"], c=c, y=y)
    x_bar = np.full(layer.inputs * layer.samples, np.nan, dtype)
    eagle.plan.auto(layer.local_x_bar).run(x=data["x"], c=c, y_bar=y_bar, x_bar=x_bar)
    chunks = -(-layer.samples // layer.chunk)
    quarter = -(-layer.outputs // 4)
    sums = {f"p{m}": np.full(chunks * layer.rows * quarter, np.nan, dtype) for m in range(4)}
    eagle.plan.auto(layer.local_c_bar).run(x=data["x"], y_bar=y_bar, **sums)
    c_bar = np.full(layer.rows * layer.outputs, np.nan, dtype)
    eagle.plan.auto(layer.local_c_bar_sum).run(**sums, c_bar=c_bar)
    return {"y": y, "x_bar": x_bar, "c_bar": c_bar}


@pytest.mark.parametrize("shape", LOCAL_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_local_kernels_match_the_reference(rng, shape, dtype):
    layer, data, ref = _local(rng, shape, dtype)
    got = _local_by_hand(layer, data)
    tolerance = 1e-13 if dtype == "float64" else 1e-5
    for name in ("y", "x_bar", "c_bar"):
        assert _rel(got[name], ref[name].reshape(-1)) < tolerance, name


@pytest.mark.parametrize("shape", LOCAL_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_reverse_of_the_local_forward_matches_the_reference(rng, shape, dtype):
    """Derived through the floor address: written from NaN, or added to a start."""
    layer, data, ref = _local(rng, shape, dtype)
    plan = eagle.plan.auto(layer.local)
    common = {"x": data["x"], "c": _by_function(layer, data["c"]), "y_bar": data["y_bar"]}
    x_bar, c_bar = np.full_like(data["x"], np.nan), np.full_like(data["c"], np.nan)
    eagle.diff.reverse(plan, accumulate=False).run(
        **common, x_bar=x_bar, c_bar=_by_function(layer, c_bar)
    )
    tolerance = 1e-13 if dtype == "float64" else 1e-5
    assert _rel(x_bar, ref["x_bar"]) < tolerance
    assert _rel(c_bar, ref["c_bar"]) < tolerance
    start = rng.standard_normal(data["x"].shape).astype(dtype)
    added = start.copy()
    eagle.diff.reverse(plan).run(**common, x_bar=added)
    assert _rel(added, start + ref["x_bar"]) < tolerance


def test_the_local_kernels_check_little_as_they_run_and_compile_for_sm90():
    layer = kan.kan_kernels(16384, 64, 64, 8)
    kernels = (layer.local, layer.local_x_bar, layer.local_c_bar, layer.local_c_bar_sum)
    for kernel in (*kernels, hawk.diff.vjp(layer.local)):
        emitted = cuda.emit(kernel.ir, {p.name: "float32" for p in kernel.planes}, narrow=True)
        checked = {(site.plane, site.axis) for site in emitted.checks if site.kind == "index"}
        made = {(site.kind, site.axis) for site in emitted.checks if site.kind != "index"}
        assert made <= {("int", "floor")}, made  # only a floor of NaN or inf fails
        if kernel is layer.local_c_bar_sum:  # its reads are on the sides of an if: the
            assert checked == {(f"p{m}", "row") for m in range(4)}  # lane's row is checked
        else:
            assert checked == set(), kernel.name  # every index proved, or checked at launch
        assert len(compile_cuda(emitted.source, name=emitted.name, arch="sm_90")) > 0


def test_the_local_kernels_run_through_eagle_torch(rng):
    torch = pytest.importorskip("torch")
    import eagle.torch

    layer, data, ref = _local(rng, LOCAL_SHAPES[0], "float64")
    x = torch.tensor(data["x"], requires_grad=True)
    c = torch.tensor(_by_function(layer, data["c"]), requires_grad=True)
    y = eagle.torch.function(layer.local)(lanes=layer.samples * layer.outputs, x=x, c=c)
    y.backward(torch.tensor(data["y_bar"]))
    assert _rel(y.detach().numpy(), ref["y"]) < 1e-13
    assert _rel(x.grad.numpy(), ref["x_bar"]) < 1e-13
    assert _rel(c.grad.numpy().reshape(layer.rows, -1), ref["c_bar"]) < 1e-13
    y_bar = torch.tensor(data["y_bar"].reshape(layer.samples, -1))
    lanes = layer.inputs * layer.samples
    x_bar = eagle.torch.function(layer.local_x_bar)(
        lanes=lanes, x=x.detach(), c=c.detach(), y_bar=y_bar
    )
    assert _rel(x_bar.numpy(), ref["x_bar"].reshape(-1)) < 1e-13
