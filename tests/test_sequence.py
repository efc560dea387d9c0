"""``eagle.plan.sequence``: bound launches run as one, on the host (in order, all or
nothing) and its refusals; its branches inside a capture are in ``test_branches``."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from tests import _bounds_kernels as k
from tests._hawk_kernels import saxpy


def test_the_launches_run_in_order_as_one(rng: np.random.Generator) -> None:
    x, y0 = rng.standard_normal(50), rng.standard_normal(50)
    y = y0.copy()
    plan = eagle.plan.auto(saxpy)
    first, second = plan.bind(a=2.0, x=x, y=y), plan.bind(a=-0.5, x=y, y=x.copy())
    both = eagle.plan.sequence([first, second])
    assert (both.side, both.device, both.launches) == ("host", None, (first, second))
    x_before = x.copy()
    both.launch()
    np.testing.assert_allclose(y, y0 + 2.0 * x)  # the second reads what the first wrote
    np.testing.assert_array_equal(x, x_before)
    assert repr(both).startswith("BoundSequence(BoundPlan(saxpy")


def test_an_adjoint_and_a_sequence_nest(rng: np.random.Generator) -> None:
    x, y_bar = rng.standard_normal(20), rng.standard_normal(20)
    x_bar, y = np.zeros(20), np.zeros(20)
    plan = eagle.plan.auto(saxpy)
    forward = plan.bind(a=3.0, x=x, y=y)
    adjoint = eagle.diff.reverse(plan).bind(a=3.0, x=x, y_bar=y_bar, x_bar=x_bar)
    eagle.plan.sequence([eagle.plan.sequence([forward]), adjoint]).launch()
    np.testing.assert_allclose(y, 3.0 * x)
    np.testing.assert_allclose(x_bar, 3.0 * y_bar)


def test_a_failing_launch_leaves_every_plane_of_the_sequence_as_it_was() -> None:
    t = np.arange(12.0).reshape(3, 4)
    y, z = np.full(3, 7.0), np.full(3, 9.0)
    writes = eagle.plan.auto(saxpy).bind(a=2.0, x=np.ones(3), y=y)
    fails = eagle.plan.auto(k.lookup).bind(t=t, i=np.array([1.0, 7.0, 0.0]), y=z)
    with pytest.raises(hawk.PlaneIndexError):
        eagle.plan.sequence([writes, fails]).launch()
    np.testing.assert_array_equal(y, 7.0)  # written by the first launch, then put back
    np.testing.assert_array_equal(z, 9.0)


def test_what_is_not_a_list_of_bound_launches_is_refused_by_name() -> None:
    plan = eagle.plan.auto(saxpy)
    bound = plan.bind(a=1.0, x=np.ones(3), y=np.zeros(3))
    with pytest.raises(TypeError, match="pass a list of bound launches .* not BoundPlan"):
        eagle.plan.sequence(bound)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="at least one bound launch"):
        eagle.plan.sequence([])
    with pytest.raises(TypeError, match=r"launches\[1\]: pass a bound launch .*not AutoPlan"):
        eagle.plan.sequence([bound, plan])  # type: ignore[list-item]


def test_launches_on_two_sides_are_refused() -> None:
    host = eagle.plan.auto(saxpy).bind(a=1.0, x=np.ones(3), y=np.zeros(3))
    with pytest.raises(ValueError, match="one side and device: .* on the host, a device launch"):
        eagle.plan.sequence([host, _FakeBound()])


class _FakeBound(eagle.plan.BoundSequence):
    """A bound launch on cuda:0 with no steps (device bindings need a GPU)."""

    def __init__(self) -> None:
        self.side, self.device, self._steps, self.launches = "device", 0, (), ()

    def __repr__(self) -> str:
        return "a device launch"


def test_a_sequence_is_not_pickled_or_copied() -> None:
    bound = eagle.plan.auto(saxpy).bind(a=1.0, x=np.ones(3), y=np.zeros(3))
    both = eagle.plan.sequence([bound])
    for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="pickle or copy the plans, then bind them again"):
            attempt(both)


def test_the_torch_tensors_a_sequence_writes_have_their_versions_bumped() -> None:
    torch = pytest.importorskip("torch")
    x = torch.ones(4, dtype=torch.float64)
    y = torch.zeros(4, dtype=torch.float64)
    bound = eagle.plan.auto(saxpy).bind(a=2.0, x=x, y=y)
    before = y._version
    eagle.plan.sequence([bound, bound]).launch()
    assert torch.equal(y, torch.full((4,), 4.0, dtype=torch.float64))
    assert y._version > before  # autograd sees the writes, as after torch's in-place ops


def test_the_reprs_of_long_sequences_name_a_few_launches_and_how_many() -> None:
    bound = [eagle.plan.auto(saxpy).bind(a=1.0, x=np.ones(2), y=np.zeros(2)) for _ in range(100)]
    shown = repr(eagle.plan.sequence(bound))
    assert shown.endswith(", ... (100 in all))") and len(shown) < 1000
    adjoint = eagle.diff.reverse([eagle.plan.auto(saxpy)] * 100)
    assert repr(adjoint) == f"AdjointSequence({', '.join(['saxpy'] * 8)}, ... (100 in all))"
