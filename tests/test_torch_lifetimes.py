"""What eagle.torch keeps: a function nothing holds is freed (its kernel, plans and
runners), the registered ops are one set per signature, a compiled graph only runs a
function that computes what it was compiled for (its key is a hash of that), and
torch.use_deterministic_algorithms is honoured. Each test scales by factors of its own, so
that no function another test left alive shares its keys."""

from __future__ import annotations

import contextlib
import copy
import gc
import os
import subprocess
import sys
import tracemalloc
import warnings
import weakref

import pytest

torch = pytest.importorskip("torch")

import eagle.torch  # noqa: E402
import hawk  # noqa: E402
import hawk.diff  # noqa: E402
import hawk.emit.policy  # noqa: E402
from eagle import _torch_autograd, _torch_runner  # noqa: E402
from tests import _torch_kernels as k  # noqa: E402


def _scaled(factor: float) -> hawk.Kernel:
    """A new kernel (a distinct object each call) of one signature: y = factor * x."""

    @hawk.kernel
    def scaled(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
        y = factor * x  # noqa: F841

    return scaled


def test_a_thousand_wrapped_kernels_dropped_grow_memory_less_than_a_mebibyte():
    x = torch.randn(16, dtype=torch.float64, requires_grad=True)

    def wrap_call_drop(factor: float) -> None:
        f = eagle.torch.function(_scaled(factor))
        y = f(x=x)
        y.sum().backward()  # the backward's runners too
        assert torch.equal(y.detach(), factor * x.detach())

    for factor in range(5):  # first uses: the signature's ops, torch's own caches
        wrap_call_drop(float(factor))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for factor in range(1000):
            wrap_call_drop(float(factor))
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 1 << 20, f"{grown / 1024:.0f} KiB"


def test_a_dropped_function_is_freed_and_its_key_names_what_it_computes():
    f = eagle.torch.function(_scaled(12.0))
    key = f.key
    assert _torch_autograd.lookup(key) is f
    twin = eagle.torch.function(_scaled(12.0))  # another kernel object, the same computation
    assert twin is not f and twin.key == key
    del f
    gc.collect()
    assert _torch_autograd.lookup(key) is twin  # (either computes what the key names)
    del twin
    gc.collect()
    assert key not in _torch_autograd._live
    with pytest.raises(RuntimeError, match=rf"key {key}\) has been freed"):
        eagle.torch.function(_scaled(14.0)).op(torch.ones(3), None, -1, torch.float32, key)
    assert eagle.torch.function(_scaled(12.0), contraction="gemm").key != key  # another policy


_KEY_OF = """
import hawk, eagle.torch

@hawk.kernel
def scaled(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = {body}

print(eagle.torch.function(scaled).key)
"""


def test_a_function_s_key_is_the_same_in_every_process_and_changes_with_its_kernel(tmp_path):
    """torch's on-disk caches of compiled graphs key a graph on the key it passes: the same
    kernel gets the same key in another process (a cache hit is right), an edited one
    another (a graph compiled for the old body is never replayed for the new)."""
    keys = []
    for seed, body in enumerate(("2.0 * x", "2.0 * x", "2.0 * x + 1.0")):
        script = tmp_path / "key_of.py"
        script.write_text(_KEY_OF.format(body=body))
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},  # (no order of a set counts)
        )
        assert done.returncode == 0, done.stderr
        keys.append(int(done.stdout))
    assert keys[0] == keys[1] != keys[2]


def test_a_deep_copy_of_a_model_shares_its_functions():
    model = torch.nn.Module()
    model.act = eagle.torch.function(k.scale_add)
    model.w = torch.nn.Parameter(torch.randn(4))
    twin = copy.deepcopy(model)
    assert twin.act is model.act and twin.w is not model.w
    torch.testing.assert_close(twin.act(x=twin.w, z=twin.w), 1.5 * model.w)


def test_an_autograd_graph_keeps_its_function_until_the_backward():
    x = torch.randn(5, requires_grad=True)
    y = eagle.torch.function(_scaled(3.0))(x=x)  # nothing else holds the function
    gc.collect()
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 3.0))


def test_a_compiled_graph_never_runs_another_function():
    """The op is shared by every function of the signature; the function it runs is found
    by the key compiled into the graph. After A is dropped and B (same signature, another
    computation) takes its place, the compiled code either compiles again for B or
    refuses: it never runs B in a graph traced for A, nor A's key in B's place. A function
    made again with A's computation runs in A's graph, as A would."""
    torch._dynamo.reset()
    holder = {"f": eagle.torch.function(_scaled(22.0))}
    old_key = holder["f"].key

    def model(x):
        return holder["f"](x=x)

    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), 22.0 * x)
    holder["f"] = eagle.torch.function(_scaled(23.0))
    gc.collect()
    assert old_key not in _torch_autograd._live  # A is gone: nothing kept it
    try:
        result = compiled(x)
    except RuntimeError as refused:
        assert "has been freed" in str(refused)
    else:
        torch.testing.assert_close(result, 23.0 * x)  # compiled again, for B
    holder["f"] = eagle.torch.function(_scaled(22.0))
    loss = compiled(x.requires_grad_()).sum()  # (compiled again, for A's computation)
    keep = holder.pop("f").key
    gc.collect()
    assert keep not in _torch_autograd._live
    again = eagle.torch.function(_scaled(22.0))  # the same computation: its backward runs
    loss.backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 22.0))
    assert again.key == keep
    torch._dynamo.reset()


def test_code_compiled_with_a_function_does_not_keep_it_alive():
    """torch.compile keeps the autograd contexts it traced (forward and backward) with the
    compiled code; they hold the function's key, so a function dropped is still freed (as
    the docs say, a compiled call's backward then raises: keep the function until then)."""
    torch._dynamo.reset()
    alive = []
    for factor in (32.0, 33.0):
        f = eagle.torch.function(_scaled(factor))
        compiled = torch.compile(lambda x, f=f: f(x=x).square().sum(), fullgraph=True)
        x = torch.randn(16, requires_grad=True)
        (grad,) = torch.autograd.grad(compiled(x), x)
        torch.testing.assert_close(grad, 2.0 * factor * factor * x)
        alive.append(weakref.ref(f))
        del f, compiled  # dynamo keeps what it traced with the lambda's code object
    gc.collect()
    try:
        assert [ref() for ref in alive] == [None, None]
        # and so a compiled call whose function is dropped before its backward raises
        f = eagle.torch.function(_scaled(35.0))
        compiled = torch.compile(lambda x, f=f: f(x=x).square().sum(), fullgraph=True)
        loss = compiled(torch.randn(16, requires_grad=True))
        del f, compiled
        gc.collect()
        with pytest.raises(Exception, match=r"has been freed: a graph compiled or traced"):
            loss.backward()
    finally:
        torch._dynamo.reset()


class _CountingPlan:
    """A plan whose bindings are counted, each launch recorded with its binding's planes."""

    def __init__(self) -> None:
        self.binds = 0
        self.launched: list[dict[str, object]] = []

    def bind(self, **planes: object) -> object:
        self.binds += 1
        launched = self.launched

        class Bound:
            def launch(self, stream: object) -> None:
                launched.append(planes)

        return Bound()


def test_a_runner_keeps_its_most_recently_used_bindings(monkeypatch):
    """Two allocations alternating (torch's allocator handing a step's tensors back)
    amid a stream of new ones bind once each: a hit is refreshed, the least recently
    used binding is the one dropped."""
    monkeypatch.setattr(_torch_runner, "_current_raw_stream", lambda index: 0)
    monkeypatch.setattr(_torch_runner._holder, "address_view", lambda tensor, one=False: tensor)
    monkeypatch.setattr(
        _torch_runner.Stream, "external", lambda stream, index: contextlib.nullcontext()
    )
    plan = _CountingPlan()
    runner = _torch_runner.Runner(plan)
    cuda = torch.device("cuda", 0)  # the runner's device path, over host memory
    hot = [[torch.empty(8)], [torch.empty(8)]]
    steps = 3 * _torch_runner._CACHED_BINDINGS
    for step in range(steps):
        runner.run(("y",), hot[step % 2], cuda)
        runner.run(("y",), [torch.empty(8 + step)], cuda)  # a new address every step
    assert plan.binds == 2 + steps
    assert len(runner._bound) == _torch_runner._CACHED_BINDINGS
    assert plan.launched[-2]["y"] is hot[1][0]  # each launch with its own binding


def test_cpu_tensors_reuse_their_binding_and_are_not_kept_alive(monkeypatch):
    """CPU tensors are bound by their addresses, as CUDA tensors are, over numpy views
    that hold no reference: a training loop, whose allocator hands addresses back, binds
    far less often than it runs; the tensors are freed when the caller drops them; and a
    new tensor at a freed one's address is read and written where it is."""
    f = eagle.torch.function(k.scale_add)
    binds: list[int] = []
    bind = _torch_runner.Runner._bind
    monkeypatch.setattr(
        _torch_runner.Runner, "_bind", lambda self, *a: binds.append(1) or bind(self, *a)
    )
    x = torch.randn(1000, requires_grad=True)
    z = torch.randn(1000)
    for _ in range(20):  # the allocator settles on the addresses it hands back
        f(x=x, z=z).sum().backward()
    assert len(binds) >= 2
    binds.clear()
    gc.collect()
    for _ in range(100):  # 200 runs: each step's forward and backward
        f(x=x, z=z).sum().backward()
    assert len(binds) < 100
    assert torch.allclose(x.grad, torch.full((1000,), 60.0))
    y = torch.randn(1000, dtype=torch.float64)
    gone = weakref.ref(y)
    assert torch.allclose(f(x=y, z=y), 1.5 * y)
    del y
    gc.collect()
    assert gone() is None  # no binding keeps a CPU tensor alive
    for _ in range(20):  # new tensors, some at the freed one's address
        a, b = torch.randn(1000, dtype=torch.float64), torch.randn(1000, dtype=torch.float64)
        assert torch.allclose(f(x=a, z=b), 0.5 * a + b)


def test_a_cpu_training_loop_reads_parameters_updated_in_place():
    """A binding kept by address reads its planes at each launch: Adam's in-place updates
    of Params (the same tensors, the same addresses) reach every step, as in torch."""
    f = eagle.torch.function(k.affine)
    generator = torch.Generator().manual_seed(3)
    x, t = (torch.randn(1000, dtype=torch.float64, generator=generator) for _ in range(2))
    ours = [torch.nn.Parameter(torch.tensor(v, dtype=torch.float64)) for v in (0.3, -0.2)]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    steps = [torch.optim.Adam(ours, lr=0.05), torch.optim.Adam(theirs, lr=0.05)]
    for _ in range(30):
        for optimizer in steps:
            optimizer.zero_grad()
        ((f(x=x, a=ours[0], b=ours[1]) - t) ** 2).mean().backward()
        ((theirs[0] * x + theirs[1] - t) ** 2).mean().backward()
        for optimizer in steps:
            optimizer.step()
    for mine, torch_own in zip(ours, theirs, strict=True):
        assert abs(mine.item() - torch_own.item()) < 1e-12


# -- torch.use_deterministic_algorithms ----------------------------------------------------


@contextlib.contextmanager
def _deterministic(warn_only: bool = False):
    was, was_warn = (
        torch.are_deterministic_algorithms_enabled(),
        (torch.is_deterministic_algorithms_warn_only_enabled()),
    )
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)


def test_which_kernels_add_atomically_on_the_device():
    assert _torch_runner.adds(k.binned) and _torch_runner.adds(k.tally)
    assert not _torch_runner.adds(k.scale_add) and not _torch_runner.adds(k.contract)
    affine = eagle.torch.function(k.affine)._derivatives
    # the loop adjoint sums a Param's gradient over lanes; a Scalar's it writes per lane
    assert affine._backward_adjoint(
        [False, True, False, False], fresh=True, broadcast=(), zero=(False,)
    ).adds
    needs_x = [True, False, False, False]
    assert not affine._backward_adjoint(needs_x, fresh=True, broadcast=(), zero=(False,)).adds
    # a routed contraction's backward is two cuBLAS products: deterministic
    gemm = eagle.torch.function(k.contract, contraction="gemm")._derivatives
    cuda = torch.device("cuda")
    assert not gemm._adjoint_loops(cuda, {torch.float32})
    assert not gemm._backward_adjoint(
        [True, True, False], fresh=False, broadcast=(), zero=(False,)
    ).adds
    loop = eagle.torch.function(k.contract, contraction="loop")._derivatives
    assert loop._adjoint_loops(cuda, {torch.float32})
    assert loop._backward_adjoint([True, True, False], fresh=True, broadcast=(), zero=(False,)).adds


def test_an_op_made_with_deterministic_adds_is_not_refused_as_atomic():
    """Its forward and loop adjoints sum in a fixed order (the plan's adds="deterministic")."""
    assert not _torch_runner.adds(k.binned, "deterministic")
    with hawk.emit.policy.using(adds="deterministic"):
        fixed = eagle.torch.function(k.affine)
    assert fixed.plan.policy.adds == "deterministic"
    param_gradient = [False, True, False, False]
    assert not fixed._derivatives._backward_adjoint(
        param_gradient, fresh=True, broadcast=(), zero=(False,)
    ).adds
    with hawk.emit.policy.using(adds="deterministic"):
        assert not eagle.torch.function(k.binned)._forward_adds
    assert eagle.torch.function(k.binned)._forward_adds


def test_atomic_adds_on_the_device_refuse_as_torch_does_under_deterministic_algorithms():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    _torch_runner.refuse_nondeterminism("the op", cuda)  # the setting is off
    with _deterministic():
        with pytest.raises(
            RuntimeError, match=r"the op adds floats atomically on the GPU.*use_deterministic"
        ):
            _torch_runner.refuse_nondeterminism("the op", cuda)
        _torch_runner.refuse_nondeterminism("the op", cpu)  # host runs add in a fixed order
    with _deterministic(warn_only=True), pytest.warns(UserWarning, match="adds floats"):
        _torch_runner.refuse_nondeterminism("the op", cuda)


def test_host_table_adds_and_their_gradients_run_under_deterministic_algorithms():
    planes = k.inputs(k.tally, torch.float64, "cpu")
    with _deterministic(), warnings.catch_warnings():
        warnings.simplefilter("error")
        got = eagle.torch.function(k.tally)(**planes)
        got.sum().backward()
    torch.testing.assert_close(got, k.REFERENCES[k.tally](**planes))
