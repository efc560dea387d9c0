"""Copies and pickles never alias (issue 26): an Array's copy, deep copy and pickle carry
its elements; kernels pickle by reference as functions do, plans as what makes them,
and bindings refuse by name."""

from __future__ import annotations

import copy
import pickle

import ml_dtypes
import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from eagle import arrays
from tests._hawk_kernels import saxpy


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy])
def test_a_copy_of_an_array_has_its_own_elements(rng, duplicate):
    original = arrays.asarray(rng.standard_normal((3, 4)))
    twin = duplicate(original)
    assert twin.ptr != original.ptr and np.array_equal(twin.numpy(), original.numpy())
    np.from_dlpack(twin)[...] = 0.0  # written through its own memory
    assert not np.any(original.numpy() == 0.0)
    view = duplicate(original[:, 1::2])
    assert view.shape == (3, 2) and view.is_contiguous
    assert np.array_equal(view.numpy(), original.numpy()[:, 1::2])


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", ml_dtypes.bfloat16])
def test_a_pickled_array_comes_back_with_its_values_in_new_memory(rng, dtype):
    values = (np.arange(1000.0) + 5).astype(dtype)
    original = arrays.asarray(values)
    loaded = pickle.loads(pickle.dumps(original))
    assert loaded.device == "cpu" and loaded.dtype == original.dtype
    assert loaded.ptr != original.ptr
    assert np.array_equal(loaded.numpy()[:3].astype(np.float64), [5.0, 6.0, 7.0])
    strided = pickle.loads(pickle.dumps(arrays.asarray(values)[::3]))
    assert np.array_equal(strided.numpy(), values[::3]) and strided.is_contiguous
    frozen = values.copy()
    frozen.flags.writeable = False
    for protocol in (4, 5):  # (protocol 5 keeps numpy's read-only flag)
        assert not pickle.loads(pickle.dumps(arrays.asarray(frozen), protocol)).readonly
    buffers: list = []  # protocol 5's out-of-band buffers are the original's own memory
    data = pickle.dumps(original, 5, buffer_callback=buffers.append)
    apart = pickle.loads(data, buffers=buffers)
    assert apart.ptr != original.ptr and not apart.readonly
    apart.fill(0)
    assert original.numpy()[0] == 5


def test_a_kernel_pickles_by_reference_and_copies_as_itself():
    assert pickle.loads(pickle.dumps(saxpy)) is saxpy
    assert copy.deepcopy(saxpy) is saxpy and copy.copy(saxpy) is saxpy
    adjoint = hawk.diff.vjp(saxpy, ["x"], lane_gradients="store")
    assert pickle.loads(pickle.dumps(adjoint)) is adjoint


def test_a_kernel_defined_in_a_function_copies_as_itself_and_refuses_pickle_by_name():
    @hawk.kernel
    def local(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
        y = x  # noqa: F841

    with pytest.raises(TypeError, match="hawk kernel 'local' is pickled by reference.*module"):
        pickle.dumps(local)
    assert copy.copy(local) is local and copy.deepcopy(local) is local  # as a function
    plan = copy.deepcopy(eagle.plan.auto(local))  # so a model holding its plan deep-copies
    assert plan.kernel is local
    y = np.zeros(3)
    copy.deepcopy(eagle.diff.reverse(plan)).run(x=np.ones(3), y_bar=np.ones(3), x_bar=y)
    assert list(y) == [1.0, 1.0, 1.0]


def test_plans_pickle_and_copy_as_what_makes_them(rng):
    plan = eagle.plan.auto(saxpy, contraction="gemm", math="tf32")
    x, y = rng.standard_normal(5), np.zeros(5)
    plan.run(a=2.0, x=x, y=y)
    for twin in (pickle.loads(pickle.dumps(plan)), copy.deepcopy(plan), copy.copy(plan)):
        assert twin is not plan and twin.kernel is saxpy and twin.policy == plan.policy
        assert not twin._bindings  # built again: nothing bound
        out = np.zeros(5)
        twin.run(a=2.0, x=x, y=out)
        np.testing.assert_array_equal(out, y)
    adjoint = pickle.loads(pickle.dumps(eagle.diff.reverse(plan)))
    assert adjoint.primal.kernel is saxpy and adjoint.primal.policy == plan.policy
    assert adjoint.gradients == eagle.diff.reverse(plan).gradients
    sequence = copy.deepcopy(eagle.diff.reverse([plan, plan]))
    assert [s.primal.kernel for s in sequence.steps] == [saxpy, saxpy]


def test_bound_plans_and_adjoints_refuse_pickle_and_copy_by_name(rng):
    plan = eagle.plan.auto(saxpy)
    x, y = rng.standard_normal(5), np.zeros(5)
    bound = plan.bind(a=1.0, x=x, y=y)
    adjoint = eagle.diff.reverse(plan).bind(a=1.0, x=x, y_bar=np.ones(5), x_bar=np.zeros(5))
    for obj, what in ((bound, "bound plan"), (adjoint, "bound adjoint")):
        for refused in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=f"a {what} holds its planes' memory.*bind it"):
                refused(obj)
