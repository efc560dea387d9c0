"""Host tests of plans: matmul steps, specs, LoweredPlan validation and binding,
assembly steps, and binding a plan's products for capture."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from eagle import arrays
from eagle.gemm import (
    CapturedGemmCall,
    GemmCaptureUnavailable,
    GemmMappingUnavailable,
    LoweredPlan,
    MatmulSpec,
    MatmulUnavailable,
    PlanStep,
    PlanUnavailable,
    WorkspaceSpec,
    assembly_step,
    captured_gemm_calls,
    check_plan_capturable,
    matmul_step,
    sgemm_params_for_arrays,
)
from tests._util import rel_error
from tests.test_gemm_capture import FLAGS


def _operands(rng, m, n, k, flags, dtype):
    transpose_a, transpose_b, transpose_out = flags
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    product = (a.T if transpose_a else a).astype(np.float64) @ (b.T if transpose_b else b)
    return a, b, product.T if transpose_out else product


def _step(flags, name="out"):
    transpose_a, transpose_b, transpose_out = flags
    return matmul_step(
        name, a="a", b="b", out="out",
        transpose_a=transpose_a, transpose_b=transpose_b, transpose_out=transpose_out,
    )  # fmt: skip


def FakeDeviceArray(shape, dtype="float32", ptr=0x10000, strides=None, device_index=0):
    """A device eagle Array over an address that is never touched: the plan code reads only
    its layout."""
    kind = np.dtype(dtype)
    return arrays.Array(
        ptr=ptr,
        shape=tuple(shape),
        dtype=kind,
        strides=strides or tuple(np.empty(shape, kind).strides),
        device_index=device_index,
    )


# --- matmul_step on the host ------------------------------------------------------------------


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_host_matmul_all_flag_triples(rng, flags, dtype):
    a, b, reference = _operands(rng, 7, 5, 6, flags, dtype)
    out = np.full(reference.shape, np.nan, dtype)
    _step(flags).run({"a": a, "b": b, "out": out}, "host")
    tolerance = 10 * np.finfo(dtype).eps
    assert rel_error(out, reference) < tolerance


@pytest.mark.parametrize("flags", FLAGS)
def test_host_matmul_writes_into_host_arrays_and_views_in_place(rng, flags):
    a, b, reference = _operands(rng, 4, 6, 3, flags, np.float64)
    base = np.full((reference.shape[0] + 3, reference.shape[1] + 5), np.nan)
    view = base[1 : 1 + reference.shape[0], 2 : 2 + reference.shape[1]]
    out = arrays.asarray(view)
    _step(flags).run({"a": arrays.asarray(a), "b": b, "out": out}, "host")
    assert rel_error(view, reference) < 1e-14
    assert np.isnan(base[0]).all() and np.isnan(base[:, :2]).all()


@pytest.mark.parametrize("flags", FLAGS)
def test_a_k_0_host_product_is_zeros(rng, flags):
    a, b, reference = _operands(rng, 3, 5, 0, flags, np.float32)
    out = np.full(reference.shape, np.nan, np.float32)
    _step(flags).run({"a": a, "b": b, "out": out}, "host")
    np.testing.assert_array_equal(out, np.zeros(reference.shape))


def test_a_read_only_out_on_the_host_is_refused_by_name(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    out = np.zeros((3, 5))
    out.flags.writeable = False
    with pytest.raises(MatmulUnavailable, match="matmul step 'c': out 'c' is read-only") as info:
        matmul_step("c", a="a", b="b", out="c").run({"a": a, "b": b, "c": out}, "host")
    assert isinstance(info.value, ValueError)
    assert not out.any()


@pytest.mark.parametrize("strides", [(0, 8), (8, 8), (16, 8)])
def test_an_out_whose_elements_share_memory_is_refused_on_the_host(rng, strides):
    """A writable broadcast or overlapping view (torch's expand, numpy's as_strided) would
    take every row's product in turn: refused by name, as the device's layout refuses it,
    and nothing is written."""
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    base = np.full(64, np.nan)
    out = np.lib.stride_tricks.as_strided(base, shape=(3, 5), strides=strides)
    with pytest.raises(MatmulUnavailable, match="out 'c' is written, and its elements share"):
        matmul_step("c", a="a", b="b", out="c").run({"a": a, "b": b, "c": out}, "host")
    assert np.isnan(base).all()
    spaced = np.full((3, 10), np.nan)[:, ::2]  # strided, but no two elements meet
    matmul_step("c", a="a", b="b", out="c").run({"a": a, "b": b, "c": spaced}, "host")
    np.testing.assert_allclose(spaced, a @ b, rtol=1e-13)


@pytest.mark.parametrize("overlap", ["same", "shifted"])
def test_an_out_sharing_memory_with_an_operand_is_refused_on_the_host_as_on_the_device(
    rng, overlap
):
    """numpy would compute it, but cuBLAS refuses it: the host refuses it too, by name,
    and writes nothing."""
    block = rng.standard_normal((4, 5))
    a = block[:, :4]
    out = a if overlap == "same" else block[:, 1:5]
    b = rng.standard_normal((4, 4))
    before = block.copy()
    with pytest.raises(MatmulUnavailable, match="matmul step 'c' .*'out' shares memory with"):
        matmul_step("c", a="a", b="b", out="c").run({"a": a, "b": b, "c": out}, "host")
    np.testing.assert_array_equal(block, before)


def test_the_seed_host_example_runs_as_written():
    a = np.random.default_rng(0).standard_normal((3, 4))
    b = np.random.default_rng(1).standard_normal((4, 5))
    bufs = {"a": arrays.asarray(a), "b": arrays.asarray(b), "c": arrays.zeros((3, 5), "float64")}
    matmul_step("c", a="a", b="b", out="c").run(bufs, "host")
    c = np.asarray(bufs["c"])
    np.testing.assert_allclose(c, a @ b, rtol=1e-14)


def test_matmul_step_publishes_its_spec():
    step = matmul_step("c", a="x", b="y", out="c", transpose_b=True, transpose_out=True)
    assert (step.name, step.kind, step.reads, step.writes) == ("c", "matmul", ("x", "y"), ("c",))
    assert step.matmul == MatmulSpec("x", "y", "c", False, True, True)
    assert matmul_step("w", a="w", b="w2", out="o").reads == ("w", "w2")
    assert matmul_step("g", a="w", b="w", out="g", transpose_a=True).reads == ("w",)


def test_step_equality_ignores_callables_and_spec():
    first = matmul_step("c", a="a", b="b", out="c")
    second = matmul_step("c", a="a", b="b", out="c", transpose_a=True)
    assert first == second and hash(first) == hash(second)
    assert first != matmul_step("d", a="a", b="b", out="c")


def test_matmul_step_refuses_writing_over_an_operand():
    with pytest.raises(PlanUnavailable, match="out 'a' is also an operand"):
        matmul_step("c", a="a", b="b", out="a")


@pytest.mark.parametrize(
    ("bufs", "backend", "error", "message"),
    [
        ({"a": np.ones((2, 3)), "b": np.ones((3, 4))}, "host", MatmulUnavailable,
         r"buffer 'out' is not bound \(bound: \['a', 'b'\]\)"),
        ({"a": np.ones((2, 3)), "b": np.ones((3, 4), np.float32), "out": np.ones((2, 4))},
         "host", MatmulUnavailable, "a='a' is float64, b='b' is float32, out='out' is float64"),
        ({"a": np.ones((2, 3), int), "b": np.ones((3, 4), int), "out": np.ones((2, 4), int)},
         "host", MatmulUnavailable, "a product takes bfloat16, float16, float32 or float64"),
        ({"a": np.ones((2, 3)), "b": np.ones((3, 4)), "out": np.ones((4, 2))}, "host",
         MatmulUnavailable, r"out 'out' has shape \(4, 2\); it must have shape \(2, 4\)"),
        ({"a": np.ones((2, 3)), "b": np.ones((5, 4)), "out": np.ones((2, 4))}, "host",
         MatmulUnavailable, "contracted extent 5 disagrees"),
        ({"a": FakeDeviceArray((2, 3)), "b": np.ones((3, 4)), "out": np.ones((2, 4))}, "host",
         MatmulUnavailable, "buffer 'a' is on cuda:0; the host backend takes host arrays"),
        ({"a": [[1.0] * 3] * 2, "b": np.ones((3, 4)), "out": np.ones((2, 4))}, "host",
         MatmulUnavailable, "buffer 'a' is a list"),
        ({"a": np.ones((2, 3)), "b": np.ones((3, 4)), "out": np.ones((2, 4))}, "device",
         MatmulUnavailable, "buffer 'a' is on the host; the device backend takes device"),
        ({"a": FakeDeviceArray((2, 3)), "b": FakeDeviceArray((3, 4), device_index=1),
          "out": FakeDeviceArray((2, 4))}, "device", MatmulUnavailable,
         "b='b' on cuda:1, out='out' on cuda:0; put them on one device"),
        ({"a": FakeDeviceArray((2, 3)), "b": FakeDeviceArray((3, 4), "float64"),
          "out": FakeDeviceArray((2, 4))}, "device", MatmulUnavailable, "b='b' is float64"),
        ({"a": FakeDeviceArray((2, 3), strides=(4, 8)), "b": FakeDeviceArray((3, 4)),
          "out": FakeDeviceArray((2, 4))}, "device", MatmulUnavailable,
         "operand 'a' is not unit-stride along its last axis"),
        ({"a": np.ones((2, 3)), "b": np.ones((3, 4)), "out": np.ones((2, 4))}, "gpu",
         ValueError, "backend must be 'host' or 'device', not 'gpu'"),
    ],
)  # fmt: skip
def test_matmul_step_refusals_name_the_buffer(bufs, backend, error, message):
    with pytest.raises(error, match=message):
        matmul_step("c", a="a", b="b", out="out").run(bufs, backend)


# --- specs and steps ----------------------------------------------------------------------------


def test_workspace_spec_normalises_shape_and_dtype():
    spec = WorkspaceSpec("w", [3, np.int64(4)], np.float32)
    assert spec == WorkspaceSpec("w", (3, 4), "float32")
    assert (spec.shape, spec.dtype) == ((3, 4), "float32")


@pytest.mark.parametrize(
    ("shape", "dtype", "message"),
    [
        ((3, -1), "float32", r"shape \(3, -1\) must hold non-negative ints"),
        ((3, 2.5), "float32", r"shape \(3, 2.5\) must hold non-negative ints"),
        ((3, 4), "not-a-dtype", "dtype a numpy dtype name"),
        ((3, 4), None, "give a dtype"),
        ((True, 4), "float32", r"shape \(True, 4\) must hold non-negative ints"),
    ],
)
def test_workspace_spec_refusals(shape, dtype, message):
    with pytest.raises(PlanUnavailable, match=message):
        WorkspaceSpec("w", shape, dtype)


def _noop(bufs):
    return None


def _generated_step(**kwargs) -> PlanStep:
    """A generated step reading ``a`` and writing ``c``, with ``kwargs`` changed."""
    fields = {"kind": "generated", "reads": ("a",), "writes": ("c",), "host_fn": _noop}
    fields.update(kwargs)
    return PlanStep(
        fields.get("name", "s"), fields["kind"], fields["reads"], fields["writes"], _noop,
        fields["host_fn"], matmul=fields.get("matmul"),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "loop"}, "kind must be one of"),
        ({"kind": "matmul"}, "a 'matmul' step carries a MatmulSpec"),
        ({"kind": "generated", "matmul": MatmulSpec("a", "b", "c")},
         "a 'matmul' step carries a MatmulSpec"),
    ],
)  # fmt: skip
def test_plan_step_refusals(kwargs, message):
    with pytest.raises(PlanUnavailable, match=message):
        _generated_step(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reads": "ab"}, "reads must be a sequence of buffer names"),
        ({"reads": 3}, "reads must be a sequence of buffer names, not 3"),
        ({"writes": ("c", 3)}, "writes must be a sequence of buffer names"),
        ({"host_fn": "run"}, "host_fn must be callable .* not str"),
        ({"name": None}, "a step's name is a str, not NoneType"),
    ],
)  # fmt: skip
def test_plan_step_arguments_of_the_wrong_type_are_type_errors(kwargs, message):
    with pytest.raises(TypeError, match=message):
        _generated_step(**kwargs)


def test_assembly_step_runs_the_side_it_is_asked_for():
    seen = []
    step = assembly_step(
        "fill",
        reads=[],
        writes=["ones"],
        host_fn=lambda bufs: seen.append(("host", sorted(bufs))),
        device_fn=lambda bufs: seen.append(("device", sorted(bufs))),
    )
    assert (step.kind, step.reads, step.writes, step.matmul) == ("assembly", (), ("ones",), None)
    step.run({"ones": None}, "host")
    step.run({"ones": None}, "device")
    assert seen == [("host", ["ones"]), ("device", ["ones"])]


# --- LoweredPlan ------------------------------------------------------------------------------


def _spec(name, shape, dtype="float64"):
    return WorkspaceSpec(name, shape, dtype)


def _chain_plan(dtype="float64"):
    """t = a @ b (a workspace), then out = t @ c, then out_t = out.T by an assembly step."""

    def transpose(bufs):
        np.copyto(bufs["out_t"], np.asarray(bufs["out"]).T)

    return LoweredPlan(
        steps=(
            matmul_step("t", a="a", b="b", out="t"),
            matmul_step("out", a="t", b="c", out="out"),
            assembly_step("out_t", reads=["out"], writes=["out_t"], host_fn=transpose,
                          device_fn=transpose),
        ),
        mechanism="gemm",
        determinism="run_to_run",
        inputs=(_spec("a", (3, 4), dtype), _spec("b", (4, 5), dtype), _spec("c", (5, 2), dtype)),
        outputs=(_spec("out", (3, 2), dtype), _spec("out_t", (2, 3), dtype)),
        workspaces=(_spec("t", (3, 5), dtype),),
    )  # fmt: skip


def test_plan_runs_its_steps_in_order_into_the_callers_buffers(rng):
    plan = _chain_plan()
    assert plan.kinds == ("matmul", "matmul", "assembly")
    assert list(plan.required) == ["a", "b", "c", "out", "out_t", "t"]
    assert plan.required["t"] == WorkspaceSpec("t", (3, 5), "float64")
    a, b, c = (rng.standard_normal(spec.shape) for spec in plan.inputs)
    out, out_t, t = np.full((3, 2), np.nan), np.full((2, 3), np.nan), np.full((3, 5), np.nan)
    buffers = {"a": a, "b": b, "c": c, "out": out, "out_t": arrays.asarray(out_t), "t": t}
    plan("host", {**buffers, "unused": object()})
    assert rel_error(out, a @ b @ c) < 1e-14
    assert rel_error(out_t, (a @ b @ c).T) < 1e-14
    assert rel_error(t, a @ b) < 1e-14


def test_a_host_call_that_raises_leaves_every_buffer_as_it_was(rng):
    """Steps of your own may raise after the products wrote: their writes are undone."""

    def fails(bufs):
        np.asarray(bufs["out_t"])[0, 0] = 1.0
        raise RuntimeError("an assembly step failed")

    plan = _chain_plan()
    plan = LoweredPlan(
        (*plan.steps[:2], assembly_step("out_t", reads=["out"], writes=["out_t"],
                                        host_fn=fails, device_fn=fails)),
        plan.mechanism, plan.determinism, plan.inputs, plan.outputs, plan.workspaces,
    )  # fmt: skip
    a, b, c = (rng.standard_normal(spec.shape) for spec in plan.inputs)
    out, out_t, t = np.full((3, 2), -7.0), np.full((2, 3), -7.0), np.full((3, 5), -7.0)
    with pytest.raises(RuntimeError, match="an assembly step failed"):
        plan("host", {"a": a, "b": b, "c": c, "out": out, "out_t": arrays.asarray(out_t), "t": t})
    for written in (out, out_t, t):
        assert (written == -7.0).all()


def test_a_plan_of_matmul_steps_is_copied_and_pickled_and_its_copies_run(rng):
    """A matmul step's device function keeps a cache of checked products (with a lock);
    a copy starts with none, like a step made afresh."""
    steps = (matmul_step("t", a="a", b="b", out="t"), matmul_step("y", a="t", b="c", out="y"))
    plan = LoweredPlan(
        steps, "gemm", "run_to_run",
        (_spec("a", (3, 4), "float64"), _spec("b", (4, 5), "float64"),
         _spec("c", (5, 2), "float64")),
        (_spec("y", (3, 2), "float64"),), (_spec("t", (3, 5), "float64"),),
    )  # fmt: skip
    a, b, c = (rng.standard_normal(spec.shape) for spec in plan.inputs)
    for copied in (copy.deepcopy(plan), pickle.loads(pickle.dumps(plan))):
        assert copied == plan and copied.steps[0].matmul == steps[0].matmul
        y, t = np.full((3, 2), np.nan), np.full((3, 5), np.nan)
        copied("host", {"a": a, "b": b, "c": c, "y": y, "t": t})
        assert rel_error(y, a @ b @ c) < 1e-14


def test_subplan_keeps_the_steps_and_buffers_its_outputs_need(rng):
    plan = _chain_plan()
    first = plan.subplan(["out"])
    assert [step.name for step in first.steps] == ["t", "out"]
    assert list(first.required) == ["a", "b", "c", "out", "t"]
    assert (first.mechanism, first.determinism) == (plan.mechanism, plan.determinism)
    assert [step.name for step in plan.subplan(["out_t"]).steps] == ["t", "out", "out_t"]
    assert [spec.name for spec in plan.subplan(["out_t"]).outputs] == ["out", "out_t"]
    assert plan.subplan([]).steps == ()
    a, b, c = (rng.standard_normal(spec.shape) for spec in plan.inputs)
    out = np.full((3, 2), np.nan)
    first("host", {"a": a, "b": b, "c": c, "out": out, "t": np.empty((3, 5))})
    assert rel_error(out, a @ b @ c) < 1e-14
    with pytest.raises(PlanUnavailable, match=r"\['t'\] are not outputs of this plan; its outputs"):
        plan.subplan(["t"])
    with pytest.raises(TypeError, match=r"outputs must be a collection of names, e.g. \['out'\]"):
        plan.subplan("out")


def test_plan_sees_a_contiguous_lane_plane_in_its_declared_shape(rng):
    plan = LoweredPlan(
        (matmul_step("y", a="w", b="f", out="y", transpose_a=True),),
        "gemm", "run_to_run",
        (_spec("w", (4, 3)), _spec("f", (4, 5))), (_spec("y", (3, 5)),),
    )  # fmt: skip
    w, f = rng.standard_normal((4, 3)), rng.standard_normal((4, 5))
    y = np.full(15, np.nan)
    plan("host", {"w": w, "f": f, "y": y})
    assert rel_error(y, (w.T @ f).reshape(-1)) < 1e-14
    with pytest.raises(MatmulUnavailable, match=r"buffer 'y' has shape \(15,\); the plan declares"):
        plan("host", {"w": w, "f": f, "y": np.zeros(30)[::2]})


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda b: b.pop("c"), MatmulUnavailable,
         r"buffer 'c' is not bound; the plan needs \['a', 'b', 'c', 'out', 'out_t', 't'\]"),
        (lambda b: b.update(a=b["a"].astype(np.float32)), MatmulUnavailable,
         "buffer 'a' is float32; the plan declares it float64"),
        (lambda b: b.update(t=np.zeros((5, 3))), MatmulUnavailable,
         r"buffer 't' has shape \(5, 3\); the plan declares \(3, 5\)"),
        (lambda b: b.update(t=np.zeros((5, 4))), MatmulUnavailable,
         r"buffer 't' has shape \(5, 4\); the plan declares \(3, 5\)"),
        (lambda b: b.update(b=FakeDeviceArray((4, 5), "float64")), MatmulUnavailable,
         "buffer 'b' is on cuda:0; the host backend takes host arrays"),
    ],
)  # fmt: skip
def test_plan_checks_each_buffer_against_its_spec(rng, change, error, message):
    plan = _chain_plan()
    buffers = {spec.name: rng.standard_normal(spec.shape) for spec in plan.required.values()}
    change(buffers)
    with pytest.raises(error, match=message):
        plan("host", buffers)


def test_plan_on_the_device_refuses_host_buffers_and_mixed_devices():
    plan = _chain_plan("float32")
    with pytest.raises(MatmulUnavailable, match="buffer 'a' is on the host; the device backend"):
        plan(
            "device",
            {spec.name: np.zeros(spec.shape, np.float32) for spec in plan.required.values()},
        )
    buffers = {spec.name: FakeDeviceArray(spec.shape) for spec in plan.required.values()}
    buffers["c"] = FakeDeviceArray((5, 2), device_index=1)
    with pytest.raises(MatmulUnavailable, match=r"'c' on cuda:1\); put them on one device"):
        plan("device", buffers)
    with pytest.raises(ValueError, match="backend must be 'host' or 'device'"):
        plan("cpu", buffers)


def _plan(steps, inputs, outputs, workspaces=()):
    return LoweredPlan(steps, "gemm", "run_to_run", inputs, outputs, workspaces)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: _plan([matmul_step("o", a="a", b="x", out="o")],
                       [_spec("a", (2, 2))], [_spec("o", (2, 2))]),
         "step 'o' reads 'x', which the plan does not declare"),
        (lambda: _plan([matmul_step("o", a="a", b="t", out="o")],
                       [_spec("a", (2, 2))], [_spec("o", (2, 2))], [_spec("t", (2, 2))]),
         "step 'o' reads 't' before a step writes it"),
        (lambda: _plan([matmul_step("o", a="a", b="b", out="b2"),
                        matmul_step("o2", a="a", b="b2", out="b")],
                       [_spec("a", (2, 2)), _spec("b", (2, 2))], [_spec("b2", (2, 2))]),
         "step 'o2' writes 'b', which is an input; declare it as an output or a workspace"),
        (lambda: _plan([matmul_step("o", a="a", b="b", out="z")],
                       [_spec("a", (2, 2)), _spec("b", (2, 2))], [_spec("o", (2, 2))]),
         "step 'o' writes 'z', which is not declared"),
        (lambda: _plan([], [_spec("a", (2, 2))], [_spec("o", (2, 2))]),
         "output 'o' is never written"),
        (lambda: _plan([], [_spec("a", (2, 2))], [_spec("a", (2, 2))]),
         "buffer 'a' is declared twice"),
        (lambda: _plan([matmul_step("o", a="a", b="b", out="o"),
                        matmul_step("o", a="a", b="b", out="o2")],
                       [_spec("a", (2, 2)), _spec("b", (2, 2))],
                       [_spec("o", (2, 2)), _spec("o2", (2, 2))]),
         "two steps are named 'o'"),
        (lambda: _plan([matmul_step("o", a="a", b="b", out="o")],
                       [_spec("a", (2, 3)), _spec("b", (3, 4))], [_spec("o", (2, 3))]),
         r"out 'o' is declared \(2, 3\); it must be \(2, 4\)"),
        (lambda: _plan([matmul_step("o", a="a", b="b", out="o")],
                       [_spec("a", (2, 3)), _spec("b", (2, 4))], [_spec("o", (2, 4))]),
         "contracted extent 2 disagrees"),
        (lambda: _plan([matmul_step("o", a="a", b="b", out="o")],
                       [_spec("a", (2, 3)), _spec("b", (3, 4), "float32")], [_spec("o", (2, 4))]),
         "are declared float64, float32, float64"),
    ],
)  # fmt: skip
def test_plan_validation_refusals(build, message):
    with pytest.raises(PlanUnavailable, match=message):
        build()


def test_plan_parts_of_the_wrong_type_are_type_errors():
    step = matmul_step("o", a="a", b="b", out="o")
    with pytest.raises(TypeError, match=r"steps must be a sequence \(of PlanStep\), not None"):
        _plan(None, [], [])
    with pytest.raises(TypeError, match=r"outputs must be a sequence \(of WorkspaceSpec\)"):
        _plan([step], [_spec("a", (2, 3)), _spec("b", (3, 4))], _spec("o", (2, 4)))
    with pytest.raises(TypeError, match=r"a buffer's name is a str, not 3"):
        WorkspaceSpec(3, (3,), "float32")
    with pytest.raises(TypeError, match=r"step 's': reads must be a sequence of buffer names, not"):
        assembly_step("s", reads="out", writes=["c"], host_fn=_noop, device_fn=_noop)
    made = assembly_step(
        "s", reads=(n for n in ["a"]), writes=iter(["c"]), host_fn=_noop, device_fn=_noop
    )
    assert (made.reads, made.writes) == (("a",), ("c",))  # (iterators read once)
    with pytest.raises(TypeError, match="buffers are declared with WorkspaceSpec"):
        _plan([step], [_spec("a", (2, 3)), ("b", (3, 4))], [_spec("o", (2, 4))])
    with pytest.raises(TypeError, match="plan steps are PlanStep"):
        _plan(["o"], [_spec("a", (2, 3))], [])
    with pytest.raises(TypeError, match=r"matmul step 'o': a must be the name of a buffer"):
        matmul_step("o", a=1, b="b", out="o")
    with pytest.raises(TypeError, match=r"out must be the name of a buffer \(a str\), not None"):
        matmul_step("o", a="a", b="b", out=None)
    with pytest.raises(TypeError, match=r"b_scale must be the name of a buffer"):
        matmul_step("o", a="a", b="b", out="o", b_scale=np.ones(1))
    with pytest.raises(TypeError, match=r"a str\), not an object of type ndarray; the buffers"):
        matmul_step("o", a=np.ones((300, 4)), b="b", out="o")  # not printed whole
    step = matmul_step("o", a="a", b="b", out="o")
    with pytest.raises(ValueError, match=r"'host' or 'device', not an object of type dict$"):
        step.run("host", {"a": np.ones((300, 4)), "b": np.ones((4, 5))})  # arguments swapped


def test_refusals_of_values_are_value_errors():
    assert issubclass(PlanUnavailable, ValueError) and issubclass(MatmulUnavailable, ValueError)
    assert issubclass(GemmMappingUnavailable, GemmCaptureUnavailable)
    assert issubclass(GemmMappingUnavailable, ValueError)
    assert not issubclass(GemmCaptureUnavailable, ValueError)  # no cuBLAS is not a bad value
    with pytest.raises(ValueError, match="never written"):
        _plan([], [_spec("a", (2, 2))], [_spec("o", (2, 2))])


# --- binding a plan's products for capture --------------------------------------------------


def _capture_plan(dtype="float32"):
    return LoweredPlan(
        (matmul_step("y", a="w", b="f", out="y", transpose_a=True),
         matmul_step("z", a="y", b="g", out="z", transpose_b=True, transpose_out=True)),
        "gemm", "run_to_run",
        (_spec("w", (4, 3), dtype), _spec("f", (4, 5), dtype), _spec("g", (2, 5), dtype)),
        (_spec("y", (3, 5), dtype), _spec("z", (2, 3), dtype)),
    )  # fmt: skip


def test_captured_gemm_calls_bind_the_callers_own_buffers():
    plan = _capture_plan()
    buffers = {spec.name: FakeDeviceArray(spec.shape, ptr=0x1000 * (i + 1))
               for i, spec in enumerate(plan.required.values())}  # fmt: skip
    buffers["y"] = FakeDeviceArray((15,), ptr=0xABC00)
    calls = captured_gemm_calls(plan, buffers, operand_class="gemm")
    assert [call.name for call in calls] == ["y", "z"]
    assert all(isinstance(call, CapturedGemmCall) for call in calls)
    first, second = calls
    assert first.operands["a"] is buffers["w"] and first.operands["b"] is buffers["f"]
    lane_plane = first.operands["out"]
    assert (lane_plane.shape, lane_plane.strides, lane_plane.ptr) == ((3, 5), (20, 4), 0xABC00)
    assert second.operands["a"] is lane_plane
    assert first.params == sgemm_params_for_arrays(
        buffers["w"], buffers["f"], lane_plane, transpose_a=True
    )
    assert second.params.transposes == (False, True, True)


@pytest.mark.parametrize(
    ("plan", "buffers", "kwargs", "error", "message"),
    [
        ("capture", "device", {"operand_class": "gemv"}, GemmCaptureUnavailable,
         "the 'gemv' class is not captured"),
        ("capture", "device", {"operand_class": "gemmish"}, ValueError,
         "operand_class must be 'gemm' or 'gemv'"),
        ("chain32", "device", {"operand_class": "gemm"}, GemmCaptureUnavailable,
         "step 'out_t' is a 'assembly' step, not a matmul"),
        ("capture64", "device", {"operand_class": "gemm"}, GemmMappingUnavailable,
         "buffer 'w' is float64; Sgemm calls .* are float32 only: lower with "
         "dtype='float32', or capture the plan with captured_calls"),
        ("capture", "unbound", {"operand_class": "gemm"}, GemmCaptureUnavailable,
         "buffer 'g' is not bound"),
        ("capture", "host", {"operand_class": "gemm"}, GemmCaptureUnavailable,
         "buffer 'w' is on the host; the device backend takes device arrays"),
        ("capture", "float64", {"operand_class": "gemm"}, GemmCaptureUnavailable,
         "buffer 'f' is float64; the plan declares it float32"),
    ],
)  # fmt: skip
def test_captured_gemm_calls_refusals(plan, buffers, kwargs, error, message):
    plan = {
        "capture": _capture_plan(),
        "chain32": _chain_plan("float32"),
        "capture64": _capture_plan("float64"),
    }[plan]
    bound = {spec.name: FakeDeviceArray(spec.shape, spec.dtype) for spec in plan.required.values()}
    if buffers == "unbound":
        del bound["g"]
    elif buffers == "host":
        bound = {spec.name: np.zeros(spec.shape, spec.dtype) for spec in plan.required.values()}
    elif buffers == "float64":
        bound["f"] = FakeDeviceArray(bound["f"].shape, "float64")
    with pytest.raises(error, match=message):
        captured_gemm_calls(plan, bound, **kwargs)


def test_check_plan_capturable_refuses_the_gemv_mechanism():
    plan = LoweredPlan(
        (matmul_step("y", a="w", b="ones", out="y"),),
        "gemv", "run_to_run",
        (_spec("w", (3, 4), "float32"), _spec("ones", (4, 1), "float32")),
        (_spec("y", (3, 1), "float32"),),
    )  # fmt: skip
    with pytest.raises(GemmCaptureUnavailable, match="a 'gemv' plan"):
        check_plan_capturable(plan)
    assert check_plan_capturable(_capture_plan()) is None


def test_arguments_of_the_wrong_type_are_type_errors_naming_them(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    step = matmul_step("c", a="a", b="b", out="c")
    with pytest.raises(TypeError, match=r"bufs must be a mapping of buffer name -> array .*list"):
        step.run([a, b, np.zeros((3, 5))], "host")
    plan = _chain_plan()
    with pytest.raises(TypeError, match=r"buffers must be a mapping .*not tuple"):
        plan("host", (a, b))
    with pytest.raises(TypeError, match=r"buffers must be a mapping .*not list"):
        captured_gemm_calls(_capture_plan(), [], operand_class="gemm")
    with pytest.raises(TypeError, match=r"plan must be a LoweredPlan .*not str"):
        captured_gemm_calls("plan", {}, operand_class="gemm")
    with pytest.raises(TypeError, match=r"plan must be a LoweredPlan .*not list"):
        check_plan_capturable([step])


def test_a_torch_tensor_eagle_cannot_read_is_refused_naming_its_buffer():
    torch = pytest.importorskip("torch")
    step = matmul_step("c", a="a", b="b", out="c")
    sparse = torch.ones(3, 4, dtype=torch.float64).to_sparse()
    with pytest.raises(MatmulUnavailable, match=r"^matmul step 'c': buffer 'a': a torch\.sparse"):
        step.run({"a": sparse, "b": np.ones((4, 5)), "c": np.empty((3, 5))}, "host")
