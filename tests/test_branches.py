"""Branches of a captured launch: which steps fork onto side streams and where they join
(``eagle.plan._bound.branch_plan``), and a routed adjoint's two gradient products forked
inside a capture and never outside one, over the fake cuBLAS layer of ``test_route``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eagle.plan
from eagle.cuda._runtime import CudaError
from eagle.plan import _bound
from eagle.plan._bound import Placement, Step, branch_plan
from tests.test_diff_route import _adjoint, _planes
from tests.test_route import fake_cublas  # noqa: F401 - the fixture


@dataclass(frozen=True)
class _Memory:
    ptr: int
    nbytes: int


def _at(span: tuple[int, int]) -> _Memory:
    return _Memory(span[0], span[1] - span[0])


def _step(*spans: tuple[int, int], fork: bool = True, reads: int = 0) -> Step:
    """A step over ``spans``; a product (``fork``) writes all but the first ``reads``."""
    planes = tuple(_at(span) for span in spans)
    return Step(
        print,
        planes=planes,
        fork=(lambda side: True) if fork else None,
        writes=planes[reads:] if fork else None,
    )


A, B, C, D = (0x1000, 0x1100), (0x2000, 0x2100), (0x3000, 0x3100), (0x4000, 0x4100)


def test_of_two_independent_products_the_first_forks_and_joins_at_the_end():
    assert branch_plan([_step(A, B), _step(C, D)]) == (Placement((), 0), Placement((), None))


def test_the_product_the_next_step_reads_stays_on_the_launch_stream():
    steps = [_step(A, B), _step(C, D), _step(B, fork=False)]
    assert branch_plan(steps) == (Placement(), Placement((), 0), Placement())


def test_a_branch_joins_before_the_first_later_step_that_touches_its_memory():
    steps = [_step(A, B), _step(C), _step(D, fork=False), _step((0x2080, 0x2090), fork=False)]
    assert branch_plan(steps) == (
        Placement((), 0),
        Placement(),
        Placement(),
        Placement((0,), None),
    )


def test_products_that_read_one_plane_still_fork_and_a_reader_of_it_joins_none():
    """An adjoint's two products both read the cotangent: reads alone never order steps."""
    reader = Step(print, planes=(_at(A),), writes=())
    steps = [_step(A, B, reads=1), _step(A, C, reads=1), reader]
    assert branch_plan(steps) == (Placement((), 0), Placement(), Placement())


def test_a_later_write_to_a_plane_a_branch_reads_joins_it_first():
    writer = Step(print, planes=(_at(A),))  # writes A, which both products read
    steps = [_step(A, B, reads=1), _step(A, C, reads=1), writer]
    assert branch_plan(steps) == (Placement((), 0), Placement(), Placement((0,), None))


def test_three_products_fork_onto_two_side_streams():
    plan = branch_plan([_step(A), _step(B), _step(C)])
    assert plan == (Placement((), 0), Placement((), 1), Placement())


def test_a_forked_step_waits_for_a_branch_it_overlaps():
    steps = [_step(A, B), _step(C), _step(fork=False), _step(B, D), _step(C)]
    plan = branch_plan(steps)
    assert plan is not None
    # the second run forks its first product after the first branch (over B) joined back
    assert plan[3] == Placement((0,), 0) and plan[4] == Placement()


@pytest.mark.parametrize(
    "steps",
    [
        [_step(A)],
        [_step(A), _step(B, fork=False)],
        [_step(A), _step(B, fork=False), _step(C)],
    ],
    ids=["one", "one-then-loop", "separated"],
)
def test_nothing_forks_without_two_forking_steps_in_a_row(steps):
    assert branch_plan(steps) is None


def test_a_plane_of_unknown_memory_joins_every_branch_first():
    unknown = Step(print, planes=(object(),))
    plan = branch_plan([_step(A), _step(B), unknown])
    assert plan == (Placement((), 0), Placement(), Placement((0,), None))


def test_numbers_among_the_planes_touch_no_memory():
    steps = [_step(A), _step(B), Step(print, planes=(1.5,))]
    assert branch_plan(steps) == (Placement((), 0), Placement(), Placement())


def _gradient_outs(handle):
    return [operands["out"] for _, operands in handle.calls]


def test_outside_a_capture_both_products_run_on_the_launch_stream(fake_cublas):  # noqa: F811
    handles, _ = fake_cublas
    bound = _adjoint().bind(**_planes(w_bar=True, f_bar=True))
    # the side stream's handle is prepared at the bind (warmed into scratch, as 0x11's)
    assert len(handles[0x51].warmed) == 2 and handles[0x51].calls == []
    bound.launch()
    assert len(handles[0x11].calls) == 2 and handles[0x51].calls == []
    assert _bound.Branches.log == []


def test_inside_a_capture_the_first_product_runs_on_a_branch(fake_cublas):  # noqa: F811
    handles, capturing = fake_cublas
    bound = _adjoint().bind(**_planes(w_bar=True, f_bar=True))
    capturing.add(0x11)
    bound.launch()
    assert len(handles[0x11].calls) == 1 and len(handles[0x51].calls) == 1
    assert _bound.Branches.log == [("fork", 0), ("join", 0)]
    outs = {*_gradient_outs(handles[0x11]), *_gradient_outs(handles[0x51])}
    assert len(outs) == 2  # each gradient written once


def test_a_capture_of_an_unprepared_stream_forks_onto_the_prepared_side(fake_cublas):  # noqa: F811
    handles, capturing = fake_cublas
    bound = _adjoint().bind(**_planes(w_bar=True, f_bar=True))
    capturing.add(0x22)  # torch's capture stream, say: its product is lent by 0x11's handle
    bound.launch(0x22)
    assert handles[0x11].lent == [(0x22, 1)] and len(handles[0x51].calls) == 1
    assert _bound.Branches.log == [("fork", 0), ("join", 0)]


def test_a_bind_inside_a_capture_prepares_no_side_and_nothing_forks(fake_cublas):  # noqa: F811
    handles, capturing = fake_cublas
    _adjoint().bind(**_planes(w_bar=True, f_bar=True)).launch()  # 0x11's handle warmed
    capturing.add(0x11)
    fresh = _planes(w_bar=True, f_bar=True)
    bound = _adjoint().bind(**fresh)
    calls = len(handles[0x51].calls)
    bound.launch()
    assert len(handles[0x51].calls) == calls
    assert _bound.Branches.log == []


def test_a_capture_into_a_device_side_loop_body_forks_nothing(fake_cublas, monkeypatch):  # noqa: F811
    handles, capturing = fake_cublas
    bound = _adjoint().bind(**_planes(w_bar=True, f_bar=True))
    capturing.add(0x11)
    monkeypatch.setattr(_bound, "in_loop_body", lambda stream_ptr: True)
    bound.launch()
    assert len(handles[0x11].calls) == 2 and _bound.Branches.log == []


def test_one_gradient_is_one_product_and_never_forks(fake_cublas):  # noqa: F811
    handles, capturing = fake_cublas
    bound = _adjoint().bind(**_planes(w_bar=True))
    capturing.add(0x11)
    bound.launch()
    assert len(handles[0x11].calls) == 1 and 0x51 not in handles
    assert _bound.Branches.log == []


def test_a_launch_whose_forking_steps_are_apart_runs_in_order_in_a_capture(fake_cublas):  # noqa: F811
    handles, capturing = fake_cublas
    parts = _adjoint().bind(**_planes(w_bar=True, f_bar=True))._steps
    ran: list[str] = []
    between = Step(lambda stream: ran.append("kernel"))
    bound = _bound.Bound("device", 0, [parts[0], between, parts[1]])
    capturing.add(0x11)
    bound.launch(0x11)
    assert ran == ["kernel"] and len(handles[0x11].calls) == 2
    assert _bound.Branches.log == []


def test_the_bound_plan_of_the_products_launched_alone_forks(fake_cublas):  # noqa: F811
    """The BoundPlan inside an adjoint leaves its side streams to the adjoint's bind;
    launched alone in a capture, it forks onto them."""
    handles, capturing = fake_cublas
    (products,) = _adjoint().bind(**_planes(w_bar=True, f_bar=True)).steps
    capturing.add(0x11)
    products.launch()
    assert _bound.Branches.log == [("fork", 0), ("join", 0)]
    assert len(handles[0x51].calls) == 1 and len(handles[0x11].calls) == 1


# -- every ordering a launch needs holds on its branches -------------------------------------

REGIONS = [(0x10000 * (n + 1), 0x10000 * (n + 1) + 0x100) for n in range(5)]


@st.composite
def _launches(draw: st.DrawFn) -> list[Step]:
    steps = []
    for _ in range(draw(st.integers(2, 8))):
        touched = draw(st.lists(st.sampled_from(REGIONS), min_size=1, max_size=3, unique=True))
        planes = tuple(_at(span) for span in touched)
        if draw(st.booleans()):
            written = draw(st.lists(st.sampled_from(planes), max_size=len(planes), unique=True))
            steps.append(Step(print, planes=planes, fork=lambda side: True, writes=tuple(written)))
        else:
            steps.append(Step(print, planes=planes))
    return steps


def _happens_before(placements: tuple[Placement, ...]) -> list[set[int]]:
    """For each step, every step that runs before it on the launch stream and its branches
    (stream order, forks after the launch stream's work so far, joins back)."""
    before: list[set[int]] = []
    main: set[int] = set()  # what the launch stream has waited for so far
    sides: dict[int, set[int]] = {}  # side -> what its branch has run (and waited for)
    for i, placement in enumerate(placements):
        for side in placement.joins:
            main |= sides.pop(side)
        if placement.side is None:
            before.append(set(main))
            main.add(i)
        else:
            waited = main | sides.get(placement.side, set())
            before.append(set(waited))
            sides[placement.side] = waited | {i}
    return before


def _conflict(a: Step, b: Step) -> bool:
    def spans(planes: tuple[_Memory, ...]) -> set[tuple[int, int]]:
        return {(p.ptr, p.ptr + p.nbytes) for p in planes}

    touched_a, touched_b = spans(a.planes), spans(b.planes)
    written_a = touched_a if a.writes is None else spans(a.writes)
    written_b = touched_b if b.writes is None else spans(b.writes)
    return bool(written_a & touched_b or touched_a & written_b)


@settings(max_examples=300, deadline=None)
@given(_launches())
def test_steps_that_write_what_another_touches_stay_in_order(steps):
    placements = branch_plan(steps)
    if placements is None:
        return  # in order, on the launch stream
    before = _happens_before(placements)
    for j, later in enumerate(steps):
        for i in range(j):
            if _conflict(steps[i], later):
                assert i in before[j], (i, j, placements)
    for step, placement in zip(steps, placements, strict=True):
        assert placement.side is None or step.fork is not None  # only forking steps fork


def test_a_product_that_fails_on_its_branch_raises_and_its_branch_still_joins(
    fake_cublas,  # noqa: F811
):
    handles, capturing = fake_cublas
    bound = _adjoint().bind(**_planes(w_bar=True, f_bar=True))
    capturing.add(0x11)
    launch = bound._steps[0].enqueue.launch
    handle, (_, second) = launch._launches[0x51]

    def failing() -> None:
        raise CudaError("cublasSgemm", "CUBLAS_STATUS_EXECUTION_FAILED", "injected")

    launch._launches[0x51] = (handle, (failing, second))
    with pytest.raises(CudaError, match="injected"):
        bound.launch()
    assert _bound.Branches.log == [("fork", 0), ("join", 0)]  # joined: the capture can end
    assert handles[0x11].calls == []  # the launch stopped at the failure


def test_a_run_prepares_no_side_stream(fake_cublas):  # noqa: F811
    """A run binds and launches at once, and never launches that binding again: it makes
    no side stream for a capture."""
    handles, _ = fake_cublas
    _adjoint().run(**_planes(w_bar=True, f_bar=True))
    assert 0x51 not in handles and len(handles[0x11].calls) == 2


# -- a sequence of bound launches: its branches span the launches ----------------------------


def _kernel_launch(*planes) -> _bound.Bound:
    """A bound launch of one kernel step over ``planes`` that logs itself among the forks."""
    step = Step(lambda stream: _bound.Branches.log.append(("kernel", stream)), planes=planes)
    return _bound.Bound("device", 0, [step])


def test_a_sequence_keeps_a_forked_product_on_its_branch_across_the_next_launch(fake_cublas):  # noqa: F811
    _, capturing = fake_cublas
    adjoint = _adjoint().bind(**_planes(w_bar=True, f_bar=True))
    kernel = _kernel_launch()  # touches none of the adjoint's planes
    capturing.add(0x11)
    adjoint.launch()
    kernel.launch()
    assert _bound.Branches.log == [("fork", 0), ("join", 0), ("kernel", 0x11)]
    _bound.Branches.log.clear()
    eagle.plan.sequence([adjoint, kernel]).launch()
    assert _bound.Branches.log == [("fork", 0), ("kernel", 0x11), ("join", 0)]


def test_a_sequence_joins_a_branch_before_a_launch_that_reads_what_it_writes(fake_cublas):  # noqa: F811
    _, capturing = fake_cublas
    planes = _planes(w_bar=True, f_bar=True)
    adjoint = _adjoint().bind(**planes)
    kernel = _kernel_launch(planes["w_bar"], planes["f_bar"])
    capturing.add(0x11)
    eagle.plan.sequence([adjoint, kernel]).launch()
    assert _bound.Branches.log == [("fork", 0), ("join", 0), ("kernel", 0x11)]


def test_outside_a_capture_a_sequence_runs_its_launches_in_order(fake_cublas):  # noqa: F811
    handles, _ = fake_cublas
    adjoint = _adjoint().bind(**_planes(w_bar=True, f_bar=True))
    kernel = _kernel_launch()
    eagle.plan.sequence([kernel, adjoint, kernel]).launch()
    assert _bound.Branches.log == [("kernel", 0x11), ("kernel", 0x11)]
    assert len(handles[0x11].calls) == 2 and handles[0x51].calls == []
