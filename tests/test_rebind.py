"""Launcher.rebind without a device: the argument checks, the refusals (which change
nothing), the bookkeeping of planes and fills, all or nothing, and the sites a bound launch
records while eagle captures. CUDA's graph calls are replaced by fakes that record what
would be set; tests/test_rebind_gpu.py runs the real thing."""

from __future__ import annotations

import ctypes
import gc
import math
import weakref
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from eagle.cuda import _capture_state, _graph_nodes, _node_arguments, _rebind
from eagle.cuda.graph import Launcher
from eagle.cuda.module import PackedArgs
from eagle.plan._bound import Bound, Step
from eagle.plan._sites import kernel_site, product_site
from hawk import ir
from hawk.kinds import PlaneKind
from tests import _route_kernels as k
from tests._util import FakeCalls


class FakeArray:
    """What rebind reads of a device eagle Array."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: str = "float32", device=0):
        self.ptr = ptr
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.device_index = device
        self.is_host = False
        self.readonly = False
        self._owner = None
        self.strides = tuple(
            int(np.prod(shape[i + 1 :])) * self.dtype.itemsize for i in range(len(shape))
        )

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def reshape(self, shape: tuple[int, ...]) -> FakeArray:
        return FakeArray(self.ptr, tuple(shape), self.dtype.name, self.device_index)


class FakeGraph:
    def __init__(self, kept: list[Any]) -> None:
        self._kept = kept
        self._exec = "exec"
        self._graph = "graph"

    def _check(self) -> None:
        pass


class FakeCuda:
    """The graph calls rebind makes, over nodes that are ints with a kind each."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kinds: dict[int, str] = {}
        self.deps: dict[int, list[int]] = {}
        self.memsets: dict[int, SimpleNamespace] = {}
        self.funcs: dict[int, int] = {}
        self.sets: list[tuple[Any, ...]] = []
        self.fail_after: int | None = None
        self.graphs: dict[str, list[int]] = {"graph": []}
        self.destroyed: list[Any] = []
        monkeypatch.setattr(_graph_nodes, "deps", lambda node: self.deps[node])
        for name in ("nodes", "edges", "kind", "kernel_params", "set_kernel", "driver_handles"):
            monkeypatch.setattr(_graph_nodes, name, getattr(self, name))
        for name in ("memset_params", "set_memset"):
            monkeypatch.setattr(_graph_nodes, name, getattr(self, name))
        monkeypatch.setattr(_rebind, "cudart", FakeCalls(self.call))

    def node(self, kind: str, graph_name: str = "graph", deps=(), func: int = 7) -> int:
        node = 100 + len(self.kinds)
        self.kinds[node] = kind
        self.deps[node] = list(deps)
        self.funcs[node] = func
        self.graphs.setdefault(graph_name, []).append(node)
        return node

    def memset(self, dst: int, width: int, height: int = 1) -> int:
        node = self.node("memset")
        self.memsets[node] = SimpleNamespace(dst=dst, width=width, height=height, pitch=4 * width,
                                             elementSize=4)  # fmt: skip
        return node

    def nodes(self, graph_name: Any) -> list[int]:
        return list(self.graphs[graph_name])

    def edges(self, graph_name: Any) -> tuple[dict[int, int], dict[int, list[int]]]:
        found = {node: node for node in self.graphs[graph_name]}
        return found, {node: self.deps[node] for node in found}

    def kind(self, node: int) -> str:
        return self.kinds[node]

    def kernel_params(self, node: int) -> SimpleNamespace:
        return SimpleNamespace(kernelParams=0, func=self.funcs[node], kern=0, node=node)

    def driver_handles(self, exec_handle: Any, node: int) -> tuple[Any, int]:
        return exec_handle, node

    def memset_params(self, node: int) -> SimpleNamespace:
        return self.memsets[node]

    def _count(self) -> None:
        if self.fail_after is not None and len(self.sets) >= self.fail_after:
            raise RuntimeError("the driver refused")

    def set_kernel(self, exec_handle: Any, node: int, params: Any) -> None:
        self._count()
        if params.kernelParams:
            self.sets.append(("kernel", node, _pointer_args(params.kernelParams, 3)))
        else:
            self.sets.append(("copy", node, params.node))

    def set_memset(self, exec_handle: Any, node: int, params: Any) -> None:
        self._count()
        self.sets.append(("memset", node, params.dst))

    def call(self, name: str, *args: Any) -> Any:
        assert name == "cudaGraphDestroy", name
        self.destroyed.append(args[0])


def _pointer_args(address: int, count: int) -> tuple[int, ...]:
    slots = (ctypes.c_void_p * count).from_address(address)
    return tuple(ctypes.c_void_p.from_address(slot).value for slot in slots)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    return FakeCuda(monkeypatch)


def _kernel_site(fake: FakeCuda, planes: dict[str, FakeArray], label: str = "plan 'k'"):
    packed = PackedArgs([*planes.values(), np.int64(5)])
    site = kernel_site(label, _ir(planes), planes, packed)()
    site.after = [fake.node("kernel")]
    return site


def _ir(planes: dict[str, FakeArray]) -> Any:
    """A stand-in for a kernel's IR: the planes in order, the last one written."""
    names = list(planes)
    kinds = [PlaneKind.TABLE] * (len(names) - 1) + [PlaneKind.OUTPUT]
    return SimpleNamespace(planes=[ir.Plane(n, t) for n, t in zip(names, kinds, strict=True)])


def _planes(base: int = 0x10000) -> dict[str, FakeArray]:
    return {
        "w": FakeArray(base, (4, 3)),
        "f": FakeArray(base + 0x1000, (4, 5)),
        "y": FakeArray(base + 0x2000, (15,)),
    }


def _launcher(*kept: Any) -> Launcher:
    return Launcher(FakeGraph(list(kept)))  # type: ignore[arg-type]


# -- rebinding a kernel node -----------------------------------------------------------------


def test_keywords_rewrite_the_pointer_arguments_of_the_kernel_node(fake):
    planes = _planes()
    site = _kernel_site(fake, planes)
    launcher = _launcher(site)
    new_f = FakeArray(0x90000, (4, 5))
    assert launcher.rebind(f=new_f) is launcher
    node = site.after[0]
    assert fake.sets == [("kernel", node, (0x10000, 0x90000, 0x12000))]
    assert site.planes["f"] is new_f
    newer = FakeArray(0xA0000, (4, 5))
    launcher.rebind(f=newer)  # the name now means the array the graph works on now
    assert fake.sets[-1] == ("kernel", node, (0x10000, 0xA0000, 0x12000))


def test_a_rebound_kernel_node_keeps_the_arguments_it_was_captured_with(fake):
    planes = _planes()
    packed = PackedArgs([*planes.values(), np.float32(2.0), np.int64(5)])
    site = kernel_site("plan 'k'", _ir(planes), planes, packed)()  # made in the capture
    site.after = [fake.node("kernel")]
    packed.setter(3)(7.0)  # a later run's number, packed for the launches after it
    packed.setter(4)(9)
    _launcher(site).rebind(f=FakeArray(0x90000, (4, 5)))
    assert fake.sets == [("kernel", site.after[0], (0x10000, 0x90000, 0x12000))]
    slots = (ctypes.c_void_p * 5).from_address(site._params.kernelParams)
    assert ctypes.c_float.from_address(slots[3]).value == 2.0  # the number as captured
    assert ctypes.c_int64.from_address(slots[4]).value == 5


def test_a_mapping_names_the_arrays_the_graph_works_on_now(fake):
    planes = _planes()
    site = _kernel_site(fake, planes)
    launcher = _launcher(site)
    new_w, new_y = FakeArray(0x50000, (4, 3)), FakeArray(0x60000, (15,))
    launcher.rebind({planes["w"]: new_w, planes["y"]: new_y})
    assert fake.sets == [("kernel", site.after[0], (0x50000, 0x11000, 0x60000))]
    with pytest.raises(ValueError, match="not a plane this graph works on"):
        launcher.rebind({planes["w"]: FakeArray(0x70000, (4, 3))})  # w is new_w now


def test_a_plane_the_graph_shares_between_launches_moves_in_every_one(fake):
    planes = _planes()
    first = _kernel_site(fake, planes)
    second = _kernel_site(fake, {"w": planes["w"], "g": FakeArray(0x30000, (4, 5)),
                                 "z": FakeArray(0x40000, (15,))})  # fmt: skip
    launcher = _launcher(first, second)
    launcher.rebind(w=FakeArray(0x80000, (4, 3)))
    assert [s[2][0] for s in fake.sets] == [0x80000, 0x80000]
    assert {s[1] for s in fake.sets} == {first.after[0], second.after[0]}


def test_a_name_that_is_different_arrays_in_different_launches_is_refused(fake):
    first = _kernel_site(fake, _planes())
    second = _kernel_site(fake, _planes(0x40000))
    with pytest.raises(TypeError, match=r"plane 'w' is a different array.*old_array: new_array"):
        _launcher(first, second).rebind(w=FakeArray(0x80000, (4, 3)))
    assert fake.sets == []


def test_a_name_is_one_array_again_once_a_mapping_made_its_launches_agree(fake):
    first = _kernel_site(fake, _planes())
    second = _kernel_site(fake, _planes(0x40000))
    launcher = _launcher(first, second)
    shared = FakeArray(0x80000, (4, 3))
    launcher.rebind({first.planes["w"]: shared, second.planes["w"]: shared})
    fake.sets.clear()
    launcher.rebind(w=FakeArray(0x90000, (4, 3)))
    assert [s[2][0] for s in fake.sets] == [0x90000, 0x90000]


# -- refusals change nothing -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("new", "error", "message"),
    [
        (FakeArray(0x90000, (5, 4)), ValueError, r"plane 'f' of plan 'k'.*shape \(5, 4\)"),
        (FakeArray(0x90000, (4, 5), "float64"), TypeError, "plane 'f' of plan 'k'.*float64"),
        (FakeArray(0x90000, (4, 5), device=1), ValueError, "plane 'f'.*cuda:1.*cuda:0"),
        (np.zeros((4, 5), np.float32), TypeError, "ndarray, not an eagle Array"),
    ],
    ids=["shape", "dtype", "device", "not-an-array"],
)
def test_another_shape_dtype_or_device_is_refused_by_name(fake, new, error, message):
    planes = _planes()
    site = _kernel_site(fake, planes)
    with pytest.raises(error, match=message):
        _launcher(site).rebind(f=new)
    assert fake.sets == []
    assert site.planes == planes


def _read_only(array: FakeArray) -> FakeArray:
    array.readonly = True  # type: ignore[attr-defined]
    return array


@pytest.mark.parametrize(
    ("plane", "new", "message"),
    [
        ("f", FakeArray(0, (4, 5)), r"plane 'f' of plan 'k': the new array is at address 0"),
        ("f", FakeArray(0x90002, (4, 5)), "plane 'f' of plan 'k': the new array is misaligned"),
        ("y", FakeArray(0x90001, (15,)), "plane 'y' of plan 'k': the new array is misaligned"),
        ("y", _read_only(FakeArray(0x90000, (15,))), "plane 'y' .* is read-only.*written"),
    ],
    ids=["null", "misaligned", "misaligned-written", "read-only-written"],
)
def test_a_null_misaligned_or_read_only_new_array_is_refused_as_a_bind_refuses_it(
    fake, plane, new, message
):
    planes = _planes()
    site = _kernel_site(fake, planes)
    with pytest.raises(ValueError, match=message):
        _launcher(site).rebind(**{plane: new})
    assert fake.sets == [] and site.planes == planes
    _launcher(site).rebind(f=_read_only(FakeArray(0x90000, (4, 5))))  # read only: taken
    assert fake.sets[-1][2] == (0x10000, 0x90000, 0x12000)


def test_a_host_array_and_other_strides_are_refused(fake):
    planes = _planes()
    site = _kernel_site(fake, planes)
    host = FakeArray(0x90000, (4, 5))
    host.is_host = True
    with pytest.raises(ValueError, match="host array"):
        _launcher(site).rebind(f=host)
    strided = FakeArray(0x90000, (4, 5))
    strided.strides = (40, 4)
    with pytest.raises(ValueError, match=r"strides \(40, 4\).*contiguous"):
        _launcher(site).rebind(f=strided)
    assert fake.sets == []


def test_unknown_names_and_bad_arguments_are_refused(fake):
    site = _kernel_site(fake, _planes())
    launcher = _launcher(site)
    with pytest.raises(TypeError, match="no plane 'x'; its planes are f, w, y"):
        launcher.rebind(x=FakeArray(0x90000, (4, 5)))
    with pytest.raises(TypeError, match="takes a mapping"):
        launcher.rebind([FakeArray(0x90000, (4, 5))])
    with pytest.raises(TypeError, match="a key of the mapping is a str"):
        launcher.rebind({"f": FakeArray(0x90000, (4, 5))})
    assert fake.sets == []


def test_keys_that_share_memory_and_new_planes_over_a_written_one_are_refused(fake):
    planes = _planes()
    site = _kernel_site(fake, planes)
    launcher = _launcher(site)
    with pytest.raises(ValueError, match="share memory; name each plane once"):
        launcher.rebind({planes["f"]: FakeArray(0x90000, (4, 5))}, f=FakeArray(0xA0000, (4, 5)))
    with pytest.raises(ValueError, match="planes 'f' and 'y' of plan 'k' would share memory"):
        launcher.rebind(f=FakeArray(planes["y"].ptr, (4, 5)))
    with pytest.raises(ValueError, match="planes 'y' and 'w' of plan 'k' would share memory"):
        launcher.rebind(y=FakeArray(planes["w"].ptr + 8, (15,)))  # the pair (w, y), y moved
    with pytest.raises(ValueError, match="planes 'f' and 'y' of plan 'k' would share memory"):
        launcher.rebind(f=FakeArray(0x90000, (4, 5)), y=FakeArray(0x90040, (15,)))  # both
    launcher.rebind(w=FakeArray(0x90000, (4, 3)), f=FakeArray(0x90000, (4, 5)))  # both read
    assert fake.sets == [("kernel", site.after[0], (0x90000, 0x90000, 0x12000))]


def test_an_array_that_covers_a_plane_in_part_is_refused(fake):
    planes = _planes()
    site = _kernel_site(fake, planes)
    bigger = FakeArray(planes["f"].ptr - 16, (4, 6))
    with pytest.raises(ValueError, match="plane 'f' of plan 'k' overlaps"):
        _launcher(site).rebind({bigger: FakeArray(0x90000, (4, 6))})
    assert fake.sets == []


def test_the_span_index_finds_planes_after_a_few_moves_and_after_every_plane_moved(fake):
    # 12 launches, 36 planes: one move updates the sorted spans in place, every plane
    # moved sorts them again; either way a key is found by its span and an array that
    # covers a plane in part is refused
    def planes_of(i: int) -> dict[str, FakeArray]:
        return {f"{n}{i}": FakeArray(0x100000 * (i + 1) + 0x1000 * at, (4, 5))
                for at, n in enumerate("abc")}  # fmt: skip

    sites = [_kernel_site(fake, planes_of(i), f"plan {i}") for i in range(12)]
    launcher = _launcher(*sites)

    def state_of() -> Any:
        return launcher._graph._rebind_state

    moved = FakeArray(0x9000000, (4, 5))
    launcher.rebind(b3=moved)
    assert state_of().ranges == sorted(state_of().at) and not state_of().nested
    newer = FakeArray(0x9100000, (4, 5))
    launcher.rebind({moved: newer})
    assert sites[3].planes["b3"] is newer
    with pytest.raises(ValueError, match="plane 'b3' of plan 3 overlaps"):
        launcher.rebind({FakeArray(newer.ptr - 16, (4, 6)): FakeArray(0x9200000, (4, 6))})
    planes = [array for site in sites for array in site.planes.values()]
    news = [FakeArray(0xA000000 - 0x1000 * at, (4, 5)) for at in range(len(planes))]
    launcher.rebind(dict(zip(planes, news, strict=True)))
    assert state_of().ranges == sorted(state_of().at) and not state_of().nested
    assert [array for site in sites for array in site.planes.values()] == news
    with pytest.raises(ValueError, match="plane 'c11' of plan 11 overlaps"):
        launcher.rebind({FakeArray(news[-1].ptr + 16, (4, 5)): FakeArray(0x9200000, (4, 5))})
    # planes moved onto memory that nests: every later lookup scans the spans
    nesting = {news[0]: FakeArray(0xB000000, (4, 5)), news[1]: FakeArray(0xB000010, (4, 5))}
    launcher.rebind(nesting)
    assert state_of().nested
    launcher.rebind(c5=FakeArray(0xC000000, (4, 5)))
    assert sites[5].planes["c5"].ptr == 0xC000000
    with pytest.raises(ValueError, match="plane 'a0' of plan 0 overlaps"):
        launcher.rebind(b0=FakeArray(0xD000000, (4, 5)))


def test_a_failure_part_way_undoes_what_was_applied(fake):
    planes = _planes()
    first = _kernel_site(fake, planes)
    second = _kernel_site(fake, {"w": planes["w"], "g": FakeArray(0x30000, (4, 5)),
                                 "z": FakeArray(0x40000, (15,))})  # fmt: skip
    launcher = _launcher(first, second)
    fake.fail_after = 1
    with pytest.raises(RuntimeError, match="the driver refused"):
        launcher.rebind(w=FakeArray(0x80000, (4, 3)))
    assert first.planes["w"] is planes["w"] and second.planes["w"] is planes["w"]
    fake.fail_after = None
    launcher.rebind(w=FakeArray(0x80000, (4, 3)))  # the graph still takes a rebind
    assert [s[2][0] for s in fake.sets[-2:]] == [0x80000, 0x80000]


def test_an_undone_kernel_change_gives_the_node_its_old_pointers_again(fake):
    planes = _planes()
    first = _kernel_site(fake, planes)
    second = _kernel_site(fake, {"w": planes["w"], "g": FakeArray(0x30000, (4, 5)),
                                 "z": FakeArray(0x40000, (15,))})  # fmt: skip
    fake.fail_after = 1
    with pytest.raises(RuntimeError):
        _launcher(first, second).rebind(w=FakeArray(0x80000, (4, 3)))
    node = first.after[0]
    assert fake.sets == [
        ("kernel", node, (0x80000, 0x11000, 0x12000))
    ]  # the undo's update failed too
    fake.fail_after = None
    first.update()  # what the undo left in the site's arguments
    assert fake.sets[-1] == ("kernel", node, (0x10000, 0x11000, 0x12000))


def test_planes_swapped_in_one_rebind_keep_their_names_and_keys(fake):
    planes = _planes()
    first = _kernel_site(fake, planes)
    second = _kernel_site(fake, {"g": FakeArray(0x30000, (4, 5)), "z": FakeArray(0x40000, (15,))})
    launcher = _launcher(first, second)
    f, g = first.planes["f"], second.planes["g"]
    launcher.rebind({f: g, g: f})
    assert first.planes["f"] is g and second.planes["g"] is f
    newer = FakeArray(0x90000, (4, 5))
    launcher.rebind(f=newer)  # the name means g's old array now, which moves alone
    assert first.planes["f"] is newer and second.planes["g"] is f
    with pytest.raises(ValueError, match="not a plane this graph works on"):
        launcher.rebind({g: FakeArray(0xA0000, (4, 5))})


def test_a_plane_moved_onto_another_launchs_memory_then_moves_with_it(fake):
    planes = _planes()
    first = _kernel_site(fake, planes)
    other = FakeArray(0x30000, (4, 3))
    second = _kernel_site(fake, {"v": other, "g": FakeArray(0x40000, (4, 5)),
                                 "z": FakeArray(0x50000, (15,))})  # fmt: skip
    launcher = _launcher(first, second)
    launcher.rebind(w=other)  # both launches read one array now
    moved = FakeArray(0x60000, (4, 3))
    launcher.rebind({other: moved})
    assert first.planes["w"] is moved and second.planes["v"] is moved


def test_the_graph_keeps_no_array_it_no_longer_works_on(fake):
    planes = _planes()
    site = _kernel_site(fake, planes)
    launcher = _launcher(site)
    for turn in range(50):
        new = FakeArray(0x100000 + 0x1000 * turn, (4, 5))
        view = FakeArray(site.planes["f"].ptr, (4, 5))  # a key the graph does not hold
        launcher.rebind({view: new} if turn % 2 else {site.planes["f"]: new})
    held = {id(array) for array, _ in launcher._graph._rebind_state.held.values()}
    assert held == {id(array) for array in site.planes.values()}
    old = weakref.ref(site.planes["f"])
    del new, view
    launcher.rebind(f=FakeArray(0x900000, (4, 5)))
    gc.collect()
    assert old() is None


# -- fills -----------------------------------------------------------------------------------


def test_a_fill_of_a_rebound_array_moves_with_it(fake):
    planes = _planes()
    site = _kernel_site(fake, planes)
    fill = fake.memset(planes["y"].ptr, 15)
    new_y = FakeArray(0x70000, (15,))
    launcher = _launcher(site)
    launcher.rebind(y=new_y)
    assert ("memset", fill, 0x70000) in fake.sets
    launcher.rebind(y=FakeArray(0x78000, (15,)))
    assert fake.sets[-1] == ("memset", fill, 0x78000)


def test_a_fill_alone_can_be_rebound_and_a_2d_fill_cannot(fake):
    site = _kernel_site(fake, _planes())
    other = FakeArray(0x50000, (8,))
    fill = fake.memset(other.ptr, 8)
    _launcher(site).rebind({other: FakeArray(0x58000, (8,))})
    assert fake.sets == [("memset", fill, 0x58000)]
    wide = FakeArray(0x60000, (8,), "float64")
    fake.memset(wide.ptr, 1, height=8)
    with pytest.raises(ValueError, match="2-D memset"):
        _launcher(site).rebind({wide: FakeArray(0x68000, (8,), "float64")})


def test_a_kind_of_site_that_neither_changes_nor_captures_fails_loudly(fake):
    class Unknown(_rebind.Site):  # a kind of step that knows no way to move
        def resolve(self):
            return [fake.node("kernel")]

        def change(self, planes, spans):
            return None

    site = Unknown("step 'u'", {"y": FakeArray(0x10000, (15,))}, ["y"])
    with pytest.raises(TypeError, match="step 'u' can be neither changed nor captured again"):
        _launcher(site).rebind(y=FakeArray(0x20000, (15,)))
    assert fake.sets == [] and site.planes["y"].ptr == 0x10000


# -- graphs that cannot be rebound ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("kernel", "a kernel that no bound plan or adjoint launched"),
        ("conditional", "a device-side loop or branch"),
        ("memcpy", "a memory copy"),
    ],
)
def test_a_graph_with_work_eagle_did_not_record_is_refused(fake, kind, message):
    site = _kernel_site(fake, _planes())
    fake.node(kind)
    with pytest.raises(ValueError, match=message):
        _launcher(site).rebind(f=FakeArray(0x90000, (4, 5)))
    assert fake.sets == []


# -- cuBLAS products: captured again, nodes copied -------------------------------------------------


class FakeCapturer:
    """Stands in for StreamCapturer: 'captures' the nodes the fake's next graph holds."""

    graphs = 0

    def __init__(self, fake: FakeCuda, funcs: list[int]) -> None:
        self.fake, self.funcs = fake, funcs

    def __call__(self, stream_ptr: int) -> FakeCapturer:
        return self

    def __enter__(self) -> FakeCapturer:
        return self

    def __exit__(self, *exc: object) -> None:
        FakeCapturer.graphs += 1
        name = f"mini{FakeCapturer.graphs}"
        previous: list[int] = []
        for func in self.funcs:
            previous = [self.fake.node("kernel", name, previous, func)]
        held = SimpleNamespace(handles=[("cudaGraphDestroy", name)], kept=[])
        self.captured = SimpleNamespace(_take=lambda: (name, held))


def _product_site(fake: FakeCuda, funcs=(7, 8)):
    planes = _planes()
    launch = FakeLaunch(planes)
    site = product_site("plan 'k'", _ir(planes), planes, launch)()
    site.stream_ptr = 0x5
    before = fake.node("memset")  # what ran before the product
    fake.memsets[before] = SimpleNamespace(dst=0xFF000, width=1, height=1, pitch=4, elementSize=4)
    previous = [before]
    for func in funcs:
        previous = [fake.node("kernel", deps=previous, func=func)]
    site.before, site.after = [before], previous
    return site, launch


class FakeLaunch:
    """A GemmLaunch's surface: calls over matrix views of the planes, prepare, beta."""

    beta = 0.0

    def __init__(self, planes: dict[str, FakeArray]) -> None:
        view = planes["y"].reshape((5, 3))
        self.calls = [SimpleNamespace(params="p", operands={"a": planes["w"], "b": planes["f"],
                                                            "out": view})]  # fmt: skip
        self.warmed: list[dict[str, Any]] = []
        self.issued: list[dict[str, Any]] = []
        handle = SimpleNamespace()
        handle.warm = lambda params, operands, keep_out: self.warmed.append(operands)
        self.checked: list[bool] = []  # whether each rebound was told the planes are checked

        def rebound(operands: dict[str, Any], checked: bool = False) -> Any:
            self.checked.append(checked)
            return lambda: self.issued.append(operands)

        self.bound = (SimpleNamespace(handle=handle, rebound=rebound),)

    def prepare(self, stream_ptr: int) -> Any:
        return self.bound


def test_a_product_is_captured_again_over_the_new_planes_and_its_nodes_copied(fake, monkeypatch):
    site, launch = _product_site(fake)
    monkeypatch.setattr(_rebind, "StreamCapturer", FakeCapturer(fake, [7, 8]))
    new_y = FakeArray(0x70000, (15,))
    _launcher(site).rebind(y=new_y)
    (issued,) = launch.issued
    assert issued["out"].ptr == 0x70000 and issued["out"].shape == (5, 3)  # the same view
    assert issued["a"] is site.planes["w"]
    assert launch.checked == [True]  # the rebind checked the new planes' layout and overlaps
    assert launch.warmed == []  # aligned as before: the handle is warm already
    mini = fake.graphs[f"mini{FakeCapturer.graphs}"]
    assert fake.sets == [("copy", site.after[0] - 1, mini[0]), ("copy", site.after[0], mini[1])]
    assert site.planes["y"] is new_y
    _launcher(site).rebind(y=FakeArray(0x78004, (15,)))  # 4 bytes past: warmed first
    assert [w["out"].ptr for w in launch.warmed] == [0x78004]


def test_a_product_that_recorded_no_node_only_takes_the_new_planes(fake, monkeypatch):
    site, launch = _product_site(fake, funcs=())  # its capture made no node of its own
    monkeypatch.setattr(_rebind, "StreamCapturer", FakeCapturer(fake, []))
    captures = FakeCapturer.graphs
    new_y = FakeArray(0x70000, (15,))
    _launcher(site).rebind(y=new_y)
    assert site.nodes == [] and site.planes["y"] is new_y
    assert fake.sets == [] and launch.issued == [] and FakeCapturer.graphs == captures


def test_a_product_that_records_other_kernels_is_refused_and_its_capture_freed(fake, monkeypatch):
    site, _ = _product_site(fake)
    monkeypatch.setattr(_rebind, "StreamCapturer", FakeCapturer(fake, [7, 9]))
    with pytest.raises(ValueError, match="cuBLAS chose other kernels") as refused:
        _launcher(site).rebind(y=FakeArray(0x70000, (15,)))
    assert fake.sets == []
    del refused
    gc.collect()
    assert fake.destroyed == [f"mini{FakeCapturer.graphs}"]


def test_chain_orders_nodes_and_refuses_parallel_ones():
    nodes = {1: 1, 2: 2, 3: 3}
    assert _graph_nodes.chain(nodes, {1: [], 2: [1], 3: [2]}) == [1, 2, 3]
    assert _graph_nodes.chain(nodes, {3: [], 2: [3], 1: [2]}) == [3, 2, 1]
    assert _graph_nodes.chain(nodes, {1: [], 2: [1], 3: [1]}) is None


# -- what a bound launch records ---------------------------------------------------------------


def test_a_bound_launch_records_a_site_per_step_only_while_eagle_captures(monkeypatch):
    stream = 0x1234
    ran: list[int] = []
    made: list[Any] = []

    def make() -> Any:
        site = _rebind.KernelSite("plan 'k'", {}, (), PackedArgs([np.int64(1)]), {})
        made.append(site)
        return site

    bound = Bound("device", 0, [Step(ran.append, site=make), Step(ran.append)])
    bound.launch(stream)
    assert ran == [stream, stream] and made == []
    monkeypatch.setitem(_capture_state._active, stream, [])
    monkeypatch.setattr(_rebind, "_capture_deps", lambda ptr: ["node"])
    bound.launch(stream)
    assert ran == [stream] * 4
    assert _capture_state._active[stream] == made and made[0].after == ["node"]


def test_kernel_site_puts_each_array_plane_at_its_argument_position():
    planes = {"w": FakeArray(0x1000, (12, 5)), "f": FakeArray(0x2000, (12, 7)),
              "y": FakeArray(0x3000, (35,))}  # fmt: skip
    site = kernel_site("plan 'contract'", k.contract.ir, planes, PackedArgs([np.int64(1)]))()
    assert site._arguments == {"w": 0, "f": 1, "y": 2}
    assert site.written == {"y"}


# -- cuBLAS products: patched once a capture has shown where their pointers are ----------------


class ArgumentCuda(FakeCuda):
    """FakeCuda whose product kernels hold real argument bytes (a 48-byte struct, as
    cuBLAS's kernels take one): kernel 7 points at ``a``, ``b`` and ``out``, with an int
    pair and a host pointer between; kernel 8 at ``out`` plus 16 bytes. A node of a new
    capture holds the pointers of the operands the launch last issued."""

    HOST = 0x1234_5678_9ABC

    def __init__(self, monkeypatch, launch_of) -> None:
        super().__init__(monkeypatch)
        self.launch_of = launch_of  # () -> the site's FakeLaunch (None while it is made)
        self.operands: dict[int, dict[str, Any]] = {}
        self.unexplained = False  # a capture's kernel 7 changes its int pair too
        self.odd: set[int] = set()  # the nodes captured so
        self.unexplained_eight = False  # a capture's kernel 8 changes an int
        self.odd_eight: set[int] = set()  # the nodes captured so
        self.kept: list[Any] = []
        monkeypatch.setattr(_graph_nodes, "kernel_arguments", self.kernel_arguments)

    def node(self, kind, graph_name="graph", deps=(), func=7):
        node = super().node(kind, graph_name, deps, func)
        launch = self.launch_of()
        if kind == "kernel":  # a capture's: the operands issued last; the graph's: the first
            operands = launch.issued[-1] if launch is not None and launch.issued else None
            self.operands[node] = operands and {r: a.ptr for r, a in operands.items()}
            if self.unexplained and func == 7:
                self.odd.add(node)
            if self.unexplained_eight and func == 8:
                self.odd_eight.add(node)
        return node

    def kernel_params(self, node):
        ptrs = self.operands[node]
        if ptrs is None:
            first = self.launch_of().calls[0].operands
            ptrs = self.operands[node] = {r: a.ptr for r, a in first.items()}
        if self.funcs[node] == 7:
            pair = 0x40_0000_0040 + (node in self.odd)
            words = [ptrs["a"], ptrs["b"], ptrs["out"], pair, self.HOST, ptrs["out"]]
        else:
            words = [0, ptrs["out"] + 16, 0, node in self.odd_eight, 0, 0]
        data = b"".join(w.to_bytes(8, "little") for w in words)
        buffer = ctypes.create_string_buffer(data, len(data))
        array = (ctypes.c_void_p * 1)(ctypes.addressof(buffer))
        self.kept.append((buffer, array))
        return SimpleNamespace(
            kernelParams=ctypes.addressof(array), func=self.funcs[node], kern=0, node=node,
            gridDimX=2, gridDimY=2, gridDimZ=1, blockDimX=64, blockDimY=1, blockDimZ=1,
            sharedMemBytes=0,
        )  # fmt: skip

    def _count(self) -> None:  # fail_after fails one call, once
        if self.fail_after is not None and len(self.sets) == self.fail_after:
            self.fail_after = None
            raise RuntimeError("the driver refused")

    @staticmethod
    def kernel_arguments(params):
        address = ctypes.c_void_p.from_address(params.kernelParams).value
        return [ctypes.string_at(address, 48)]

    def set_kernel(self, exec_handle, node, params):
        self._count()
        if params.node not in self.operands:  # a hawk kernel's node
            self.sets.append((node, None))
            return
        (data,) = self.kernel_arguments(params)
        words = [int.from_bytes(data[i : i + 8], "little") for i in range(0, 48, 8)]
        self.sets.append((node, words))


@pytest.fixture
def patching(monkeypatch):
    launches: list[FakeLaunch] = []
    fake = ArgumentCuda(monkeypatch, lambda: launches[-1] if launches else None)
    monkeypatch.setattr(_rebind, "StreamCapturer", FakeCapturer(fake, [7, 8]))

    def site():
        made, launch = _product_site(fake)
        launches.append(launch)
        return made, launch

    return fake, site


def test_a_product_rebound_again_is_patched_where_a_capture_showed_its_pointers(patching):
    fake, make = patching
    site, launch = make()
    w, f = site.planes["w"].ptr, site.planes["f"].ptr
    launcher = _launcher(site)
    launcher.rebind(y=FakeArray(0x70000, (15,)))  # a capture: y's pointers learned
    seven, eight = site.nodes
    captures = FakeCapturer.graphs
    pair, host = 0x40_0000_0040, ArgumentCuda.HOST
    assert fake.sets == [
        (seven, [w, f, 0x70000, pair, host, 0x70000]),
        (eight, [0, 0x70000 + 16, 0, 0, 0, 0]),
    ]
    fake.sets.clear()
    launcher.rebind(y=FakeArray(0x80000, (15,)))  # aligned alike: patched
    assert FakeCapturer.graphs == captures and len(launch.issued) == 1
    assert fake.sets == [
        (seven, [w, f, 0x80000, pair, host, 0x80000]),
        (eight, [0, 0x80000 + 16, 0, 0, 0, 0]),
    ]
    assert site.planes["y"].ptr == 0x80000
    launcher.rebind(w=FakeArray(0x90000, (4, 3)))  # w never moved: captured first
    assert FakeCapturer.graphs == captures + 1 and len(launch.issued) == 2
    fake.sets.clear()
    launcher.rebind(w=FakeArray(0xA0000, (4, 3)), y=FakeArray(0xB0000, (15,)))
    assert FakeCapturer.graphs == captures + 1  # both learned: patched
    assert fake.sets == [
        (seven, [0xA0000, f, 0xB0000, pair, host, 0xB0000]),
        (eight, [0, 0xB0000 + 16, 0, 0, 0, 0]),
    ]


def test_a_plane_aligned_otherwise_is_captured_again(patching):
    fake, make = patching
    site, launch = make()
    launcher = _launcher(site)
    launcher.rebind(y=FakeArray(0x70000, (15,)))
    captures = FakeCapturer.graphs
    launcher.rebind(y=FakeArray(0x80040, (15,)))  # 64 bytes off the 256 boundary
    assert FakeCapturer.graphs == captures + 1
    assert launch.issued[-1]["out"].ptr == 0x80040
    launcher.rebind(y=FakeArray(0x90040, (15,)))  # aligned as the one it replaces
    assert FakeCapturer.graphs == captures + 1 and fake.sets[-2][1][2] == 0x90040


def test_a_capture_that_changes_more_than_pointers_is_not_learned_from(patching):
    fake, make = patching
    site, _ = make()
    launcher = _launcher(site)
    fake.unexplained = True  # the new capture's kernel changes an int too
    launcher.rebind(y=FakeArray(0x70000, (15,)))
    fake.unexplained = False
    captures = FakeCapturer.graphs
    launcher.rebind(y=FakeArray(0x80000, (15,)))  # captured: compared with the odd one
    launcher.rebind(y=FakeArray(0x90000, (15,)))  # captured, and learned from
    assert FakeCapturer.graphs == captures + 2
    launcher.rebind(y=FakeArray(0xA0000, (15,)))  # patched
    assert FakeCapturer.graphs == captures + 2 and fake.sets[-2][1][2] == 0xA0000


def test_a_patch_is_undone_when_a_later_change_fails(patching):
    fake, make = patching
    site, _ = make()
    other = _kernel_site(fake, {"x": FakeArray(0x40000, (8,)), "z": FakeArray(0x41000, (8,))})
    launcher = _launcher(site, other)
    launcher.rebind(y=FakeArray(0x70000, (15,)))
    seven, eight = site.nodes
    fake.sets.clear()
    fake.fail_after = 2  # the two patched nodes are set; the kernel site's update fails
    with pytest.raises(RuntimeError, match="refused"):
        launcher.rebind(y=FakeArray(0x80000, (15,)), x=FakeArray(0x42000, (8,)))
    pair, host = 0x40_0000_0040, ArgumentCuda.HOST
    assert fake.sets == [
        (seven, [0x10000, 0x11000, 0x80000, pair, host, 0x80000]),
        (eight, [0, 0x80000 + 16, 0, 0, 0, 0]),
        (seven, [0x10000, 0x11000, 0x70000, pair, host, 0x70000]),  # undone
        (eight, [0, 0x70000 + 16, 0, 0, 0, 0]),
    ]
    assert site.planes["y"].ptr == 0x70000 and other.planes["x"].ptr == 0x40000
    launcher.rebind(y=FakeArray(0x90000, (15,)))
    assert fake.sets[-2:] == [
        (seven, [0x10000, 0x11000, 0x90000, pair, host, 0x90000]),
        (eight, [0, 0x90000 + 16, 0, 0, 0, 0]),
    ]


def test_pointer_words_are_found_in_one_plane_each():
    spans = {"a": (0x1000, 0x1100), "b": (0x1100, 0x1200)}
    words = [0x10F8, 0x1100, 0x1200, 7]
    data = b"".join(w.to_bytes(8, "little") for w in words)
    assert _node_arguments.pointer_words([data], spans) == [(0, 0, "a", 0xF8), (0, 8, "b", 0)]
    moved = _node_arguments.shifted([data], [(0, 8, "b", 0)], {"b": 0x100})
    assert moved[0][8:16] == (0x1200).to_bytes(8, "little")
    nested = {"a": (0x1000, 0x1200), "b": (0x1100, 0x1200)}
    assert _node_arguments.pointer_words([data], nested) is None


def test_kernel_arguments_are_read_by_the_sizes_the_driver_gives(monkeypatch):
    from eagle.cuda._runtime import CudaError

    sizes = {0: 8, 1: 24}

    def call(name, *args):
        if name == "cuKernelGetFunction":
            return "function of " + args[0]
        assert name == "cuFuncGetParamInfo" and args[0] == "function of kernel"
        if args[1] not in sizes:
            raise CudaError(name, "CUDA_ERROR_INVALID_VALUE")
        return (0, sizes[args[1]])

    monkeypatch.setattr(_graph_nodes, "cudadrv", FakeCalls(call))
    first, second = (ctypes.create_string_buffer(bytes(range(n)), n) for n in (8, 24))
    array = (ctypes.c_void_p * 2)(ctypes.addressof(first), ctypes.addressof(second))
    params = SimpleNamespace(kernelParams=ctypes.addressof(array), func=0, kern="kernel")
    assert _graph_nodes.kernel_arguments(params) == [bytes(range(8)), bytes(range(24))]
    assert _graph_nodes.kernel_arguments(SimpleNamespace(kernelParams=0)) is None

    def refused(name, *args):
        raise CudaError(name, "CUDA_ERROR_NOT_SUPPORTED")

    monkeypatch.setattr(_graph_nodes, "cudadrv", FakeCalls(refused))
    with pytest.raises(CudaError, match="NOT_SUPPORTED"):  # only "no such argument" ends
        _graph_nodes.kernel_arguments(SimpleNamespace(kernelParams=params.kernelParams, func=5))


def test_a_capture_learns_from_while_the_graph_it_replaces_still_lives(patching, monkeypatch):
    """The parameters a capture is compared with point into the previous capture's graph,
    which the site frees once it holds the new one: only after learning."""
    fake, make = patching
    site, _ = make()
    launcher = _launcher(site)
    fake.unexplained = True  # nothing learned: the site keeps the capture's own parameters
    launcher.rebind(y=FakeArray(0x70000, (15,)))
    fake.unexplained = False
    previous = f"mini{FakeCapturer.graphs}"
    alive = []
    learned = _node_arguments.Patch.learned.__func__

    def checked(cls, *args):
        alive.append(previous not in fake.destroyed)
        return learned(cls, *args)

    monkeypatch.setattr(_node_arguments.Patch, "learned", classmethod(checked))
    launcher.rebind(y=FakeArray(0x80000, (15,)))
    gc.collect()
    assert alive == [True] and previous in fake.destroyed


def test_a_capture_whose_last_kernel_is_unexplained_leaves_every_node_as_captured(patching):
    """Learning checks every node before it makes any a patch: the nodes' parameters stay
    the capture's own, whose arguments the graph keeps."""
    fake, make = patching
    site, _ = make()
    launcher = _launcher(site)
    fake.unexplained_eight = True  # kernel 7 is explained, kernel 8 is not
    launcher.rebind(y=FakeArray(0x70000, (15,)))
    fake.unexplained_eight = False
    assert site._patch is None and fake.odd_eight
    captured = {ctypes.addressof(array) for _, array in fake.kept}
    assert all(params.kernelParams in captured for params in site._current)
