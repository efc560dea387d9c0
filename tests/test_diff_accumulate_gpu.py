"""``eagle.diff.reverse(..., accumulate=False)`` on the device: a loop adjoint's fills
and stores inside a captured graph, against the host's adjoint (run with ``nox -s gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk.diff
from eagle import arrays, cuda
from tests._diff_kernels import ALL, adjoint_planes, random_cotangents

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_a_written_adjoint_replayed_in_a_graph_matches_the_host(case, rng):
    planes = case.make(rng, np.dtype("float64"))
    eagle.plan.auto(case.kernel).run(**{name: v.copy() for name, v in planes.items()})
    cotangents = random_cotangents(case.kernel, planes, rng)
    wrt = tuple(hawk.diff.gradient_planes(case.kernel))
    given, start = adjoint_planes(case.kernel, planes, cotangents, wrt, rng)
    adjoint = eagle.diff.reverse(eagle.plan.auto(case.kernel), accumulate=False)
    expected = {name: value.copy() for name, value in given.items()}
    adjoint.run(**expected)
    device = {name: arrays.asarray(value, device="cuda:0") for name, value in given.items()}
    for gradient in start:
        device[gradient].fill(np.nan)  # poisoned: a written gradient does not read it
    stream = cuda.Stream(non_blocking=True)
    with stream:
        bound = adjoint.bind(**device)
    with cuda.StreamCapturer(stream) as capturer:
        bound.launch(stream)
    graph = cuda.Graph.from_captured(capturer.captured)
    try:
        runner = graph.launcher().stream(stream)
        for _ in range(3):  # replays write the same gradients: nothing accumulates
            runner.launch()
        runner.synchronize()
        for gradient in start:
            got, want = device[gradient].numpy(), expected[gradient]
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=gradient)
    finally:
        graph.destroy()
