"""The GEMM route of eagle.plan on the host: route/reasons per kernel and policy, and that
the routed product (its views, operand mapping and cuBLAS parameters) is the kernel's."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eagle.plan
from eagle import arrays
from eagle.cuda import compile_cuda
from eagle.gemm import (
    GemmCaptureUnavailable,
    captured_gemm_calls,
    lower_dense_gemm,
    sgemm_params_for_arrays,
)
from eagle.gemm import handles as gemm_handles
from eagle.plan import _autoplan, _bound, _route
from hawk.contraction import lane_layout
from hawk.emit import cuda, policy
from tests import _route_kernels as k
from tests._route_kernels import B, R, U
from tests.test_gemm_capture import FakeDevice

# kernel, the device's route under contraction="gemm", what its reason says
ROUTES = [
    (k.contract, "gemm", None),
    (k.contract_other_order, "gemm", None),
    (k.contract_direct, "gemm", None),
    (k.transformed, "loop", "the term is transformed"),
    (k.two_outputs, "loop", "writes 2 outputs ['y', 'z']"),
    (k.gathered, "loop", "is read from data"),
    (k.literal_stride, "loop", "builds a stride from a bare literal"),
    (k.three_operands, "loop", "the term multiplies 3 table reads"),
    (k.interleaved_lanes, "loop", "the lanes are not the product's elements in row-major order"),
    (k.row_sum, "loop", "the fold reads one table, 'w'"),
    (k.gram, "loop", "both factors read table 'w'"),
    (k.not_affine, "loop", "is not affine in the loop variable r"),
    (k.reversed_walk, "loop", "walked -1 elements along 'row'"),
    (k.partial_range, "loop", "not a full unit-step range: range(1, 12, 1)"),
    (k.offset_start, "loop", "starts from 1.0, not 0.0"),
    (k.max_fold, "loop", "recognize finds no contraction"),
    (k.scaled_output, "loop", "recognize finds no contraction"),
    (k.no_fold, "loop", "recognize finds no contraction"),
]


def _plan(kernel, contraction="gemm"):
    with policy.using(contraction=contraction):
        return eagle.plan.auto(kernel)


@pytest.mark.parametrize(("kernel", "route", "says"), ROUTES, ids=[row[0].name for row in ROUTES])
def test_route_and_reasons_under_both_policies(kernel, route, says):
    routed, looped = _plan(kernel, "gemm"), _plan(kernel, "loop")
    assert routed.route("host") == looped.route("host") == "loop"
    assert looped.route("device") == "loop"
    assert "contraction='loop'" in looped.reasons[0]
    assert routed.route("device") == route
    if says is None:
        assert routed.reasons == ()
    else:
        (reason,) = routed.reasons
        assert says in reason
    assert routed.route("device", "float64") == route


def test_the_route_takes_float32_and_float64_planes():
    plan = _plan(k.contract)
    assert plan.route("device") == plan.route("device", np.float32) == "gemm"
    assert plan.route("device", np.dtype("float32")) == "gemm"
    assert plan.route("device", "float64") == "gemm"
    for dtype in ("int32", "fp32", None):
        expected = (
            rf"dtype must be one of float16, bfloat16, float32, float64, float8_e4m3fn, "
            rf"float8_e5m2 .*not {dtype!r}"
        )
        with pytest.raises(ValueError, match=expected):
            plan.route("device", dtype)
    with pytest.raises(ValueError, match=r"side must be 'host' or 'device', not 'gpu'"):
        plan.route("gpu")


def test_dtype_and_lane_reasons_name_what_is_wrong():
    layout = lane_layout(k.contract)
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert _route.bind_reasons({"w": f32, "f": f32, "y": f32}, B * U, layout) == ()
    (reason,) = _route.bind_reasons({"w": f32, "f": f32, "y": f64}, B * U, layout)
    assert "'y' is float64" in reason and "planes of one dtype" in reason
    (reason,) = _route.bind_reasons({"w": f32, "f": f32, "y": f32}, B * U - 1, layout)
    assert f"hold {B * U - 1} lanes but the product has {B} x {U} = {B * U}" in reason


def test_the_host_runs_the_kernel_itself_under_either_policy(rng):
    planes = k.planes(k.contract, rng)
    routed, looped = dict(planes), {name: value.copy() for name, value in planes.items()}
    bound = _plan(k.contract).bind(**routed)
    assert bound.route == "loop"
    assert bound.reasons[0].startswith("the host runs the kernel's own loop; build the plan")
    bound.launch()
    _plan(k.contract, "loop").run(**looped)
    np.testing.assert_array_equal(routed["y"], looped["y"])
    np.testing.assert_allclose(routed["y"], k.reference(planes), rtol=1e-12, atol=1e-12)


def _routed_product(plan, planes):
    """The routed forward product run on the host over the planes' views."""
    operands = _route.gemm_operands(plan, plan.record, planes)
    lower_dense_gemm(plan.record, direction="forward")("host", operands.views)
    return operands


@pytest.mark.parametrize(
    "kernel", [k.contract, k.contract_other_order, k.contract_direct], ids=lambda v: v.name
)
def test_the_routed_product_is_the_kernel(kernel, rng):
    plan = _plan(kernel)
    by_kernel = k.planes(kernel, rng)
    by_product = {name: value.copy() for name, value in by_kernel.items()}
    plan.run(**by_kernel)
    _routed_product(plan, by_product)
    np.testing.assert_allclose(by_product["y"], by_kernel["y"], rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    extents=st.tuples(*(st.integers(1, 7) for _ in range(3))),
    layout=st.tuples(*(st.booleans() for _ in range(4))),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_layout_routes_to_its_own_product(extents, layout, seed):
    r, u, b = extents
    w_reduce_first, f_reduce_first, sample_major, w_first = layout
    kernel = k.make_contract(
        r, u, b,
        w_reduce_first=w_reduce_first, f_reduce_first=f_reduce_first,
        sample_major=sample_major, w_first=w_first,
    )  # fmt: skip
    plan = _plan(kernel)
    assert plan.route("device") == "gemm", plan.reasons
    rng = np.random.default_rng(seed)
    w, f = rng.standard_normal((r, u)), rng.standard_normal((r, b))
    planes = {
        "w": np.ascontiguousarray(w if w_reduce_first else w.T),
        "f": np.ascontiguousarray(f if f_reduce_first else f.T),
        "y": np.full(b * u, np.nan),
    }
    copies = {name: value.copy() for name, value in planes.items()}
    plan.run(**planes)
    _routed_product(plan, copies)
    on_device = {
        name: _FakeDeviceArray(value.shape, 0x100000 * (i + 1))
        for i, (name, value) in enumerate(planes.items())
    }
    views = _route.gemm_operands(plan, plan.record, on_device).views
    lowered = lower_dense_gemm(plan.record, direction="forward", dtype="float32")
    assert captured_gemm_calls(lowered, views, operand_class="gemm")  # cuBLAS can address it
    np.testing.assert_allclose(copies["y"], planes["y"], rtol=1e-12, atol=1e-12)
    expected = k.reference({"w": w, "f": f}, sample_major=sample_major)
    np.testing.assert_allclose(planes["y"], expected, rtol=1e-12, atol=1e-12)


def test_gemm_operands_give_views_and_roles_for_the_adjoint(rng):
    plan = _plan(k.contract)
    w, f = rng.standard_normal((R, U)), rng.standard_normal((R, B))
    y_bar = rng.standard_normal(B * U)
    planes = {
        "w": w.reshape(-1),  # a table given flat is viewed in its declared shape
        "f": arrays.asarray(f),  # a host eagle Array is viewed without a copy too
        "y_bar": y_bar,
        "w_bar": np.zeros((R, U)),
        "f_bar": np.zeros(R * B),
    }
    operands = _route.gemm_operands(plan, plan.record, planes)
    assert operands.roles == {"a": "f", "b": "w", "out": "y"}
    shapes = {name: view.shape for name, view in operands.views.items()}
    assert shapes == {"w": (R, U), "f": (R, B), "y_bar": (B, U), "w_bar": (R, U), "f_bar": (R, B)}
    for name, view in operands.views.items():
        assert np.shares_memory(view, planes[name]), name
    lower_dense_gemm(plan.record, direction="adjoint")("host", operands.views)
    g = y_bar.reshape(B, U)  # the cotangent of y = f.T @ w, as the product
    np.testing.assert_allclose(planes["w_bar"], f @ g, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(planes["f_bar"].reshape(R, B), w @ g.T, rtol=1e-12, atol=1e-12)


def test_gemm_operands_refuse_unknown_planes_and_wrong_sizes():
    plan = _plan(k.contract)
    with pytest.raises(ValueError, match=r"kernel 'contract' has no plane 'v'.*w, f, y"):
        _route.gemm_operands(plan, plan.record, {"v": np.zeros(3)})
    with pytest.raises(ValueError, match=r"plane 'y' holds 34 values; its matrix is \(7, 5\)"):
        _route.gemm_operands(plan, plan.record, {"y": np.zeros(34)})
    with pytest.raises(ValueError, match="plane 'w' is not contiguous"):
        _route.gemm_operands(plan, plan.record, {"w": np.zeros((U, R)).T})


def forget_bindings(kernel):
    """Drop what plans and adjoints of ``kernel`` keep of earlier binds (moves included), and
    the routed products kept per layout, so a test starts from a first bind. (Not
    ``eagle.clear_caches()``: it gives back loaded kernels, which needs a driver.)"""
    kernel.runtime.clear()
    _route._products_kept.clear()


def _FakeDeviceArray(shape, ptr, dtype=np.float32):
    """A device eagle Array over an address that is never touched: the route reads only its
    layout and address."""
    kind = np.dtype(dtype)
    strides = tuple(int(np.prod(shape[axis + 1 :])) * kind.itemsize for axis in range(len(shape)))
    return arrays.Array(ptr=ptr, shape=tuple(shape), dtype=kind, strides=strides, device_index=0)


def test_the_device_product_binds_the_callers_own_buffers():
    plan = _plan(k.contract)
    planes = {
        "w": _FakeDeviceArray((R, U), 0x10000),
        "f": _FakeDeviceArray((R * B,), 0x20000),
        "y": _FakeDeviceArray((B * U,), 0x30000),
    }
    operands = _route.gemm_operands(plan, plan.record, planes)
    lowered = lower_dense_gemm(plan.record, direction="forward", dtype="float32")
    (call,) = captured_gemm_calls(lowered, operands.views, operand_class="gemm")
    assert {role: array.ptr for role, array in call.operands.items()} == {
        "a": 0x20000,
        "b": 0x10000,
        "out": 0x30000,
    }
    assert operands.views["w"] is planes["w"]  # already its matrix's shape: no view
    f, w, y = (
        _FakeDeviceArray(shape, at)
        for shape, at in (((R, B), 0x1000), ((R, U), 0x2000), ((B, U), 0x3000))
    )
    assert call.params == sgemm_params_for_arrays(f, w, y, transpose_a=True)
    assert (call.params.m, call.params.n, call.params.k, call.params.ldc) == (U, B, R, U)


@pytest.mark.parametrize(
    "kernel",
    [row[0] for row in ROUTES] + [k.double, k.square, k.make_contract(33, 17, 45)],
    ids=lambda kernel: kernel.name,
)
def test_the_loop_each_kernel_falls_back_to_compiles_for_sm90(kernel):
    emitted = cuda.emit(kernel.ir, {p.name: "float32" for p in kernel.planes})
    assert compile_cuda(emitted.source, name=emitted.name, arch="sm_90")


class _FakeHandle:
    """Stands in for a stream's cuBLAS handle: records what it is asked to do, and keys
    what it has warmed as the real handle does (params and operands' 16-byte alignment);
    a warm with ``keep_out`` runs into its scratch matrix at 0x9000. Products it records
    into another stream's capture (lent by ``_record_lent``) are noted in ``lent``."""

    def __init__(self, stream_ptr):
        self.stream_ptr, self.warmed, self.calls, self.betas = stream_ptr, [], [], []
        self.rebound = 0  # products moved to other operands
        self.moved = []  # the address, shape and strides of each's operands
        self.keys = set()
        self.alive = True
        self.capturing = set()
        self.lent = []

    @staticmethod
    def _key(params, operands):
        return (params, *(operands[role].ptr % 16 for role in ("a", "b", "out")))

    def warm(self, params, operands, *, keep_out=False):
        key = self._key(params, operands)
        if key not in self.keys and self.stream_ptr in self.capturing:
            raise GemmCaptureUnavailable("warm() runs the product: before the capture")
        if key not in self.keys:
            self.keys.add(key)
            self.warmed.append((params, 0x9000 if keep_out else operands["out"].ptr))

    def has_warmed(self, params, operands):
        return self._key(params, operands) in self.keys

    def bind(self, params, operands, *, beta=0.0):
        return _FakeProduct(self, params, operands, beta)


class _FakeProduct:
    """A product bound on a :class:`_FakeHandle`: records each launch; moves as
    ``BoundGemm.rebound`` does."""

    def __init__(self, handle, params, operands, beta):
        self.handle, self.params, self.operands, self.beta = handle, params, dict(operands), beta

    def __call__(self):
        self.handle.calls.append(
            (self.params, {role: array.ptr for role, array in self.operands.items()})
        )
        self.handle.betas.append(self.beta)

    @property
    def warm(self):
        return self.handle.has_warmed(self.params, self.operands)

    def rebound(self, operands, *, checked=False):
        self.handle.rebound += 1
        self.handle.moved.append(
            {role: (array.ptr, array.shape, array.strides) for role, array in operands.items()}
        )  # (what each operand is, holding none)
        return _FakeProduct(self.handle, self.params, operands, self.beta)


def _record_lent(handle, stream_ptr, products):
    handle.lent.append((stream_ptr, len(products)))
    for product in products:
        product()


@pytest.fixture
def fake_cublas(monkeypatch):
    """The route's CUDA edges replaced: stream 0x11 is current, streams in ``capturing``
    are being captured, handles are :class:`_FakeHandle` (also in eagle's registry of
    stream handles, where a capture of an unprepared stream looks for a warmed one)."""
    handles, capturing = {}, set()
    registry = {}
    monkeypatch.setattr(gemm_handles, "_stream_handles", registry)

    def stream_handle(stream_ptr, device):
        if stream_ptr not in handles and stream_ptr in capturing:
            raise GemmCaptureUnavailable("the real one refuses to make a handle in a capture")
        handle = handles.setdefault(stream_ptr, _FakeHandle(stream_ptr))
        registry[(device, stream_ptr)] = handle
        handle.capturing = capturing
        return handle

    class _Current:
        @staticmethod
        def ptr():
            return 0x11

    monkeypatch.setattr(_route, "stream_handle", stream_handle)
    monkeypatch.setattr(_route, "record_lent", _record_lent)
    monkeypatch.setattr(_route, "is_capturing", lambda stream_ptr: stream_ptr in capturing)
    monkeypatch.setattr(_route, "launch_stream", lambda values, device: _Current.ptr())
    monkeypatch.setattr(_bound, "launch_stream", lambda values, device: _Current.ptr())
    monkeypatch.setattr(_autoplan, "launch_stream", lambda values, device: _Current.ptr())
    monkeypatch.setattr(_route, "as_stream_ptr", lambda s, device: 0x11 if s is None else s)
    # the side streams of captured launches: 0x51, 0x52, ... with their forks and joins logged
    monkeypatch.setattr(_bound, "is_capturing", lambda stream_ptr: stream_ptr in capturing)
    monkeypatch.setattr(_bound, "in_loop_body", lambda stream_ptr: False)
    monkeypatch.setattr(_bound, "as_stream_ptr", lambda s, device: 0x11 if s is None else s)
    sides: list[int] = []

    def side_stream(device, index, *, make):
        if index >= len(sides):
            if not make:
                return None
            sides.extend(0x51 + n for n in range(len(sides), index + 1))
        return sides[index]

    class Branches:
        log: ClassVar[list[tuple[str, int]]] = []

        def __init__(self, stream_ptr, device):
            self.stream_ptr, self.open = stream_ptr, set()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            for index in sorted(self.open):
                self.join(index)

        def fork(self, index):
            self.open.add(index)
            Branches.log.append(("fork", index))
            return sides[index]

        def join(self, index):
            if index in self.open:
                self.open.discard(index)
                Branches.log.append(("join", index))

    monkeypatch.setattr(_bound, "side_stream", side_stream)
    monkeypatch.setattr(_bound, "Branches", Branches)
    return handles, capturing


def test_a_routed_bind_prepares_its_stream_once_and_launches_one_product(fake_cublas):
    handles, capturing = fake_cublas
    planes = {
        "w": _FakeDeviceArray((R, U), 0x10000),
        "f": _FakeDeviceArray((R, B), 0x20000),
        "y": _FakeDeviceArray((B * U,), 0x30000),
    }
    bound = _plan(k.contract).bind(**planes)
    assert (bound.side, bound.route, bound.reasons) == ("device", "gemm", ())
    ((params, scratch),) = handles[0x11].warmed  # warmed into a scratch matrix, not into y
    assert scratch == 0x9000 and handles[0x11].calls == []

    bound.launch()
    bound.launch(0x11)
    assert handles[0x11].calls == 2 * [(params, {"a": 0x20000, "b": 0x10000, "out": 0x30000})]
    _plan(k.contract).bind(**planes).launch()
    assert len(handles[0x11].warmed) == 1  # a handle is warmed once per product

    capturing.add(0x22)  # a capture of a stream never prepared: 0x11's handle records it
    bound.launch(0x22)
    assert handles[0x11].lent == [(0x22, 1)] and len(handles[0x11].calls) == 4
    assert 0x22 not in handles
    capturing.clear()
    bound.launch(0x22)  # outside a capture, a new stream is prepared on first use
    assert len(handles[0x22].warmed) == 1 and len(handles[0x22].calls) == 1
    assert handles[0x11].lent == [(0x22, 1)]


def _contract_planes(base):
    return {
        "w": _FakeDeviceArray((R, U), base),
        "f": _FakeDeviceArray((R, B), base + 0x10000),
        "y": _FakeDeviceArray((B * U,), base + 0x20000),
    }


def test_a_routed_products_site_reissues_them_over_new_planes_seen_as_before(fake_cublas):
    """A rebind of a captured routed launch moves its product to the new planes, each
    operand the same view of its new plane as of the old (y seen as a matrix)."""
    handles, _ = fake_cublas
    forget_bindings(k.contract)
    bound = _plan(k.contract).bind(**_contract_planes(0x100000))
    (step,) = bound._steps
    bound.launch()
    (_, old) = handles[0x11].calls[-1]
    new = _contract_planes(0x400000)
    step.site().reissue(0x11, new)()
    (_, ptrs) = handles[0x11].calls[-1]
    assert ptrs == {role: ptr - 0x100000 + 0x400000 for role, ptr in old.items()}
    moved = handles[0x11].moved[-1]
    ptr, shape, strides = moved["out"]
    assert ptr == new["y"].ptr and shape != new["y"].shape  # a view of the plane
    assert strides == (shape[1] * 4, 4)  # row-major, as the plane is
    for role, plane in (("a", new["f"]), ("b", new["w"])):  # planes seen as they are
        assert moved[role] == (plane.ptr, plane.shape, plane.strides)


def test_a_routed_bind_to_new_addresses_moves_the_products_kept_for_the_layout(fake_cublas):
    handles, _ = fake_cublas
    forget_bindings(k.contract)
    plan = _plan(k.contract)
    plan.bind(**_contract_planes(0x100000))  # checked in full, warmed, bound
    handle = handles[0x11]
    assert len(handle.warmed) == 1 and handle.rebound == 1  # kept over address views
    for turn in range(3):  # other addresses, aligned alike: moved, nothing warmed
        planes = _contract_planes(0x200000 + 0x100000 * turn)
        bound = _plan(k.contract).bind(**planes)
        bound.launch()
        assert handle.calls[-1][1] == {"a": planes["f"].ptr, "b": planes["w"].ptr,
                                       "out": planes["y"].ptr}  # fmt: skip
    assert len(handle.warmed) == 1 and handle.rebound == 4
    skewed = {**_contract_planes(0x600000), "y": _FakeDeviceArray((B * U,), 0x620004)}
    plan.bind(**skewed).launch()  # a new alignment class: warmed once, then moved
    plan.bind(**{**skewed, "w": _FakeDeviceArray((R, U), 0x700000)})
    assert len(handle.warmed) == 2 and handle.rebound == 6
    assert handle.calls[-1][1]["out"] == 0x620004


def test_the_products_kept_for_a_layout_keep_no_plane_alive(fake_cublas):
    import gc
    import weakref

    class Memory:  # what keeps a plane's memory alive
        pass

    forget_bindings(k.contract)
    owners = [Memory() for _ in range(3)]
    planes = {
        name: arrays.Array(ptr=a.ptr, shape=a.shape, dtype=a.dtype, strides=a.strides,
                           device_index=0, owner=owner)
        for (name, a), owner in zip(_contract_planes(0x100000).items(), owners, strict=True)
    }  # fmt: skip
    watched = [weakref.ref(owner) for owner in owners]
    bound = _plan(k.contract).bind(**planes)
    del bound, planes, owners
    gc.collect()
    assert [ref() for ref in watched] == [None, None, None]
    ((products),) = _route._products_kept.values()
    ((_, kept),) = products._bound.values()
    assert all(array._owner is None for p in kept for array in p.operands.values())


def test_a_moved_bind_checks_again_what_depends_on_the_addresses(fake_cublas, monkeypatch):
    """A bind of planes laid out as an earlier bind's, at addresses that align alike, is
    moved: nothing of the layout is checked again. What depends on the addresses is, with
    the full checks' messages."""
    from eagle.plan import _autoplan

    handles, _ = fake_cublas
    forget_bindings(k.contract)
    checks = []
    full = _autoplan.check_planes
    monkeypatch.setattr(
        _autoplan, "check_planes", lambda kernel, planes: checks.append(1) or full(kernel, planes)
    )
    plan = _plan(k.contract)
    plan.bind(**_contract_planes(0x100000))
    planes = _contract_planes(0x200000)
    plan.bind(**planes).launch()
    assert len(checks) == 1
    assert handles[0x11].calls[-1][1] == {"a": 0x210000, "b": 0x200000, "out": 0x220000}

    refused = [
        ("y", _FakeDeviceArray((B * U,), 0x200040), "planes 'w' and 'y' share memory"),
        ("w", _FakeDeviceArray((R, U), 0x220040), "planes 'w' and 'y' share memory"),
        ("f", _FakeDeviceArray((R, B), 0x210002), "plane 'f' is misaligned"),
        ("y", _FakeDeviceArray((B * U,), 0), "plane 'y' is at address 0"),
        ("y", _read_only(_FakeDeviceArray((B * U,), 0x220000)), "plane 'y' is read-only"),
    ]
    for name, array, says in refused:
        with pytest.raises(ValueError, match=says):
            plan.bind(**{**planes, name: array})
    assert len(checks) == 1 + len(refused)  # each refused by the full checks
    assert len(handles[0x11].calls) == 1


def _read_only(array):
    return arrays.Array(ptr=array.ptr, shape=array.shape, dtype=array.dtype,
                        strides=array.strides, device_index=0, readonly=True)  # fmt: skip


def test_a_moved_bind_keeps_no_plane_alive(fake_cublas):
    import gc
    import weakref

    class Memory:  # what keeps a plane's memory alive
        pass

    forget_bindings(k.contract)
    plan = _plan(k.contract)
    for base in (0x100000, 0x200000):  # the first bound in full, the second moved
        owners = [Memory() for _ in range(3)]
        planes = {
            name: arrays.Array(ptr=a.ptr, shape=a.shape, dtype=a.dtype, strides=a.strides,
                               device_index=0, owner=owner)
            for (name, a), owner in zip(_contract_planes(base).items(), owners, strict=True)
        }  # fmt: skip
        watched = [weakref.ref(owner) for owner in owners]
        bound = plan.bind(**planes)
        assert {name: bound._steps[0].planes[i] for i, name in enumerate(planes)} == planes
        del bound, planes, owners
        gc.collect()
        assert [ref() for ref in watched] == [None, None, None]


def test_a_routed_bind_inside_a_capture_uses_the_handle_warmed_before_it(fake_cublas):
    """As under torch.cuda.graph: planes allocated during the capture are bound to the
    handle made and warmed for that stream before it, by pointers only."""
    handles, capturing = fake_cublas
    planes = {
        "w": _FakeDeviceArray((R, U), 0x10000),
        "f": _FakeDeviceArray((R, B), 0x20000),
        "y": _FakeDeviceArray((B * U,), 0x30000),
    }
    with pytest.MonkeyPatch.context() as patch:
        for module in (_route, _bound, _autoplan):
            patch.setattr(module, "launch_stream", lambda values, device: 0x22)
        _plan(k.contract).bind(**planes).launch()  # the warm-up, on the stream
        capturing.add(0x22)
        fresh = {**planes, "y": _FakeDeviceArray((B * U,), 0x50000)}  # same alignment
        _plan(k.contract).bind(**fresh).launch()
        assert len(handles[0x22].warmed) == 1
        assert [ops["out"] for _, ops in handles[0x22].calls] == [0x30000, 0x50000]
        skewed = {**planes, "y": _FakeDeviceArray((B * U,), 0x50004)}  # never warmed
        with pytest.raises(GemmCaptureUnavailable, match="no cuBLAS handle on cuda:0 has"):
            _plan(k.contract).bind(**skewed)
        assert handles[0x22].lent == [] and len(handles[0x22].calls) == 2


def _host_backed(values):
    """A device eagle Array over host memory the fake cuBLAS of test_gemm_capture reads."""
    return arrays.Array(
        ptr=values.ctypes.data, shape=values.shape, dtype=values.dtype,
        strides=values.strides, device_index=0, owner=values,
    )  # fmt: skip


def _routed_fake_device(monkeypatch) -> FakeDevice:
    """The fake cuBLAS of test_gemm_capture, with the route's launches on its stream and
    its captures as the fake's ``capturing`` says."""
    device = FakeDevice(monkeypatch)
    stream = type("Stream", (), {"ptr": staticmethod(lambda: FakeDevice.STREAM)})
    monkeypatch.setattr(_route, "launch_stream", lambda values, index: stream.ptr())
    monkeypatch.setattr(_bound, "launch_stream", lambda values, index: stream.ptr())
    monkeypatch.setattr(_autoplan, "launch_stream", lambda values, index: stream.ptr())
    monkeypatch.setattr(_route, "is_capturing", lambda stream_ptr: device.capturing)
    monkeypatch.setattr(_route, "as_stream_ptr", lambda s, index: s or FakeDevice.STREAM)
    return device


def test_a_routed_output_4_bytes_into_its_buffer_is_warmed_for_capture(monkeypatch, rng):
    """The handle's own record of what it warmed is the only one, and it is keyed by the
    operands' alignment: the route warms the output plane's product, not an aligned twin."""
    device = _routed_fake_device(monkeypatch)
    w = rng.standard_normal((R, U)).astype(np.float32)
    f = rng.standard_normal((R, B)).astype(np.float32)
    big = np.full(B * U + 1, np.nan, np.float32)
    for values in (w, f, big):
        device.cublas.register(values)
    planes = {"w": _host_backed(w), "f": _host_backed(f), "y": _host_backed(big)[1 : 1 + B * U]}
    assert planes["y"].ptr % 16 == big.ctypes.data % 16 + 4

    bound = _plan(k.contract).bind(**planes)
    assert bound.route == "gemm" and np.isnan(big).all()  # warmed into scratch
    device.capturing = True
    bound.launch()  # as inside a capture: the product was warmed with y's alignment
    expected = k.reference({"w": w.astype(np.float64), "f": f.astype(np.float64)})
    assert np.isnan(big[0])
    np.testing.assert_allclose(big[1:], expected, rtol=1e-5, atol=1e-5)
