"""eagle.clear_caches on a device (run with ``nox -s gpu``): a bound plan and a graph keep
their loaded kernel and error record through it; once nothing holds them, their library
is unloaded and their record's slot freed (a failure left in it raised), and a new plan
loads the kernel again."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import eagle
import eagle.plan
import hawk
from eagle import arrays, cuda
from eagle.cuda import _records, module
from tests import _bounds_kernels as k
from tests._hawk_kernels import saxpy
from tests._util import rel_error

pytestmark = pytest.mark.gpu


def _gone() -> None:
    """Collect what was dropped, then give back what nothing holds."""
    gc.collect()
    eagle.clear_caches()
    assert not module._has_unused() and not _records.has_unused()


def test_a_held_binding_and_its_graph_run_after_clear_caches(rng: np.random.Generator) -> None:
    n = 40_961
    x, y0 = rng.standard_normal(n), rng.standard_normal(n)
    a = float(rng.uniform(0.5, 1.5))
    x_d, y_d = arrays.asarray(x, device="cuda:0"), arrays.asarray(y0, device="cuda:0")
    stream = cuda.Stream(non_blocking=True)
    plan = eagle.plan.auto(saxpy)
    bound = plan.bind(a=a, x=x_d, y=y_d)
    launcher = bound.capture(stream)
    del plan
    _gone()  # the binding and the graph hold the kernel and its record
    bound.launch(stream)
    launcher.launch()
    launcher.synchronize()
    assert rel_error(y_d.numpy(), y0 + 2 * a * x) < 1e-12
    del bound
    _gone()  # the graph alone holds them now
    launcher.launch()
    launcher.synchronize()
    assert rel_error(y_d.numpy(), y0 + 3 * a * x) < 1e-12
    del launcher
    _gone()  # nothing holds them: unloaded, the slot freed
    fresh = arrays.asarray(y0, device="cuda:0")
    eagle.plan.auto(saxpy).run(a=a, x=x_d, y=fresh)  # loads it again
    assert rel_error(fresh.numpy(), y0 + a * x) < 1e-12


def test_a_failure_a_dropped_kernel_recorded_is_raised_by_clear_caches() -> None:
    t = arrays.asarray(np.arange(12.0).reshape(3, 4), device="cuda:0")
    bad = arrays.asarray(np.array([1.0, 7.0, 0.0]), device="cuda:0")
    good = arrays.asarray(np.array([1.0, 2.0, 0.0]), device="cuda:0")
    y = arrays.asarray(np.full(3, np.nan), device="cuda:0")
    plan = eagle.plan.auto(k.lookup)
    plan.run(t=t, i=bad, y=y)  # lane 1 reads row 7 of 3: recorded on the device
    del plan
    gc.collect()
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.clear_caches()
    assert caught.value.lane == 1
    _gone()
    eagle.plan.auto(k.lookup).run(t=t, i=good, y=y)  # a new record, maybe in the freed slot
    np.testing.assert_array_equal(y.numpy(), [5.0, 9.0, 1.0])
