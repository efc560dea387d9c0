"""How :class:`eagle.torch.Function` calls enter torch: registered ops and ``autograd.Function``.

**Registered ops** are what ``torch.compile``, fake tensors and torch modes see: ops
defined through ``torch.library`` with a fake implementation and an autograd formula. torch
cannot unregister an op, so they are made per *signature*, not per kernel: every
function with as many inputs and outputs calls the same three ops (the forward, its
backward, and the backward's backward), passing its ``key``. The op finds the function
in a weak table by that key, so a function nothing else holds is freed. A key is a hash
of what its function computes, so a graph compiled for one function only ever runs one
that computes the same, in this process or when torch's on-disk caches replay the graph
in another (it raises once no such function is alive).

**autograd.Function** classes carry plain eager calls that autograd records (they skip
the custom-op dispatcher, which costs more than a launch: :class:`Forward`) and calls
under ``torch.func`` transforms and forward-mode AD, which torch supports for these and
not for custom ops (:class:`Transformed`). Those taken under transforms have a vmap rule
(a loop over the batch); the forward and the backward have a forward-mode rule
(``torch.func.jvp``, ``hessian``), the second-order backward refuses one.

Both routes compute through the same methods of the function, and both make the
backward differentiable once: the second-order backward raises when differentiated.
Only :mod:`eagle.torch` imports this module (it needs torch).
"""

from __future__ import annotations

import functools
import hashlib
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

import hawk
from eagle._torch_derivatives import Derivatives, split
from eagle.errors import EagleRuntimeError

__all__ = [
    "Forward",
    "Gradients",
    "SecondOrder",
    "Transformed",
    "dispatched",
    "lookup",
    "recorder",
    "register",
    "signature_ops",
]


class Function(Protocol):
    """What the ops and ``autograd.Function`` classes use of an :class:`eagle.torch.Function`
    (named here so that this module needs nothing of :mod:`eagle.torch`, which imports it)."""

    kernel: Any
    plan: Any
    key: int
    backward_op: Any
    _second_op: Any
    _inputs: tuple[Any, ...]
    _outputs: tuple[Any, ...]
    _derivatives: Derivatives

    def _count(self, *args: Any, **kwargs: Any) -> Any: ...

    def _forward(self, *args: Any, **kwargs: Any) -> Any: ...

    def _forward_op(self, *args: Any, **kwargs: Any) -> Any: ...

    def _forward_fake(self, *args: Any, **kwargs: Any) -> Any: ...


_NAMESPACE = "eagle"
#: part of every op's name. torch's on-disk caches of compiled graphs key a graph on the
#: forward op it calls, not on the backward that op's autograd formula chose when the graph
#: was compiled: a cached backward outlives a change to the backward ops. Bump this with any
#: change to the ops' schemas or autograd formulas (``tests/test_torch.py`` pins the schemas).
_REVISION = 2

#: weak references to the functions of each key (functions of one key compute the same:
#: any live one will do); a list is replaced, never changed in place, so a lookup reads it
#: without the lock
_live: dict[int, list[weakref.ref[Function]]] = {}
_keys_lock = threading.RLock()
_registered: dict[tuple[int, int], tuple[Any, Any, Any]] = {}
_registering = threading.Lock()  # torch refuses to define an op twice


def register(function: Function) -> int:
    """The key of ``function``, by which the registered ops find it while it lives: a hash
    of what it computes (its kernel's IR, its policy, the ops' revision and hawk's
    version), the same in every process. torch's on-disk caches key a compiled graph on
    the key it passes, so a graph compiled for a kernel is never replayed for an edited
    one, whose key differs; two live functions of the same key compute the same."""
    computes = repr((_REVISION, hawk.__version__, function.kernel.ir, function.plan.policy))
    key = int.from_bytes(hashlib.sha256(computes.encode()).digest()[:8], "little") >> 1
    with _keys_lock:  # (reentrant: the collector may run _forget in here)
        _live[key] = [*_alive(_live.get(key, ())), weakref.ref(function)]
    weakref.finalize(function, _forget, key)
    return key


def _alive(refs: Sequence[weakref.ref[Function]]) -> list[weakref.ref[Function]]:
    return [ref for ref in refs if ref() is not None]


def _forget(key: int) -> None:
    """Drop the dead references of ``key``, and the key once no function of it is alive."""
    with _keys_lock:
        refs = _alive(_live.get(key, ()))
        if refs:
            _live[key] = refs
        else:
            _live.pop(key, None)


def lookup(key: int) -> Function:
    """The function of ``key``.

    Raises:
        RuntimeError: it was freed (a graph compiled with it outlived it).
    """
    for ref in _live.get(key, ()):
        function = ref()
        if function is not None:
            return function
    raise EagleRuntimeError(
        f"the eagle.torch function this op call was made for (key {key}) has been freed: "
        "a graph compiled or traced with it outlived it; keep the function (made by "
        "eagle.torch.function) alive as long as the compiled code that calls it, or "
        "compile again"
    )


# -- which route a call takes --------------------------------------------------------------

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def dispatched(values: Sequence[Any], initials: Sequence[Any], name: str) -> bool:
    """True when a call of the op of kernel ``name`` goes through the registered op: while
    compiling, under ``torch.func.functionalize``, while tracing (``torch.jit.trace``
    records only what the dispatcher sees), under a torch dispatch mode, under a torch
    function mode unless a ``torch.func`` transform or forward-mode AD is active (the
    eager route has their rules), or for tensors of other types (fake tensors,
    subclasses) or on the meta device (whose op gives meta outputs, as torch's own ops
    do).

    Raises:
        RuntimeError: forward-mode AD is active and the call would go through the
            registered op, for which torch has no forward-mode rule; a derivative is
            taken through ``torch.func.functionalize``.
    """
    if torch.compiler.is_compiling():
        _refuse_forward_mode(name)
        return True
    if torch._C._are_functorch_transforms_active() and _transform() == "Functionalize":
        _refuse_differentiated_functionalize(name)
        return True  # (torch has no functionalization rule for an autograd.Function)
    if (
        torch._C._is_tracing()
        or torch._C._len_torch_dispatch_stack()
        or any(type(t) not in _PLAIN or t.is_meta for t in (*values, *initials) if t is not None)
    ):
        _refuse_forward_mode(name, (*values, *initials))
        _refuse_differentiating_transform(name)
        return True
    if torch._C._is_torch_function_mode_enabled():  # (torch.device, say)
        return not (_forward_ad_level() >= 0 or _transform() in _EAGER_TRANSFORMS)
    return False


#: the ``torch.func`` transforms whose rules the eager route has
_EAGER_TRANSFORMS = frozenset(("Grad", "Jvp", "Vmap"))


def _transform() -> str | None:
    """The innermost active ``torch.func`` transform's name (``"Grad"``, ``"Jvp"``,
    ``"Vmap"``, ``"Functionalize"``), or None; outside compiled code only (torch.compile
    cannot trace it)."""
    interpreter = torch._C._functorch.peek_interpreter_stack()
    return None if interpreter is None else interpreter.key().name


def _refuse_differentiating_transform(name: str) -> None:
    """Refuse ``torch.func.grad`` and its kin through the registered op, outside compiled
    code (where the transform cannot be told from ``vmap``, which works): torch's custom
    ops raise an internal error there."""
    if _transform() == "Grad":
        raise EagleRuntimeError(
            f"torch.func.grad (vjp, jacrev, hessian) of the eagle.torch op of kernel {name!r} "
            "runs eagerly only: while tracing, under a torch dispatch mode, or over fake or "
            "meta tensors, the op is a torch custom op, which torch's transforms do not "
            "differentiate; take the derivative in eager code, or with tensor.backward() or "
            "torch.autograd.grad there"
        )


def _refuse_differentiated_functionalize(name: str) -> None:
    """Refuse a derivative taken through ``torch.func.functionalize`` (whose calls take the
    registered op): functionalization hides the tangents from the op, which has no
    forward-mode rule, so they would come out zero, and torch.func's reverse mode meets
    torch's internal errors."""
    outer = {i.key().name for i in retrieve_all_functorch_interpreters()}
    if outer & {"Jvp", "Grad"} or _forward_ad_level() >= 0:
        raise EagleRuntimeError(
            f"a derivative through torch.func.functionalize of the eagle.torch op of kernel "
            f"{name!r} is not available: under functionalize the op is a torch custom op, "
            "whose tangents would be zero; differentiate the function itself, outside "
            "functionalize (functionalize alone, and vmap of it, run)"
        )


def _refuse_forward_mode(name: str, tensors: Sequence[Any] | None = None) -> None:
    """Refuse forward-mode AD through the registered op: torch gives a custom op no
    forward-mode rule, and its tangents come out zero. Outside compiled code only a call
    that ``tensors`` carry a tangent into is refused."""
    if _forward_ad_level() >= 0 and (
        tensors is None
        or any(
            isinstance(t, torch.Tensor)
            and torch.autograd.forward_ad.unpack_dual(t).tangent is not None
            for t in tensors
        )
    ):
        raise EagleRuntimeError(
            f"forward-mode AD (torch.func.jvp, jacfwd, linearize, torch.autograd.forward_ad) "
            f"of the eagle.torch op of kernel {name!r} runs eagerly only: while compiling or "
            "tracing, under a torch dispatch mode, or over fake or meta tensors, the op is a "
            "torch custom op, for which torch has no forward-mode rule (its tangents would be "
            "zero); take the forward-mode derivative in eager code, or use reverse mode there"
        )


def recorder(values: Sequence[Any], initials: Sequence[Any]) -> Any:
    """The ``autograd.Function`` an eager call goes through: :class:`Transformed` while a
    ``torch.func`` transform or forward-mode AD is active, :class:`Forward` when autograd
    records the call (a tensor requires grad), None when nothing records it."""
    if torch._C._are_functorch_transforms_active() or _forward_ad_level() >= 0:
        return Transformed
    if torch.is_grad_enabled() and any(
        t.requires_grad for t in (*values, *initials) if t is not None
    ):
        return Forward
    return None


def _forward_ad_level() -> int:
    """The innermost ``torch.autograd.forward_ad.dual_level`` entered, or -1."""
    return int(getattr(torch.autograd.forward_ad, "_current_level", -1))


def _recording() -> bool:
    """True inside a backward that autograd records (``create_graph=True``, or torch.func)."""
    return torch.is_grad_enabled() or torch._C._are_functorch_transforms_active()


# -- the eager route: autograd.Function ----------------------------------------------------


class Forward(torch.autograd.Function):
    """A plain eager call that autograd records: ``apply(function, lanes, dtype, *inputs,
    *initials)``. Its forward takes ``ctx`` itself: torch's ``apply`` reads the signature
    of a forward that has a separate ``setup_context`` (``inspect.signature``) on every
    call, which costs more than the rest of the call. Calls under a ``torch.func``
    transform or forward-mode AD, which need ``setup_context``, take :class:`Transformed`.
    An output no loss reads comes to the backward as None (its grads are not
    materialised), which leaves it out of the adjoint."""

    @staticmethod
    def forward(ctx: Any, function: Function, lanes: Any, dtype: torch.dtype, *tensors: Any) -> Any:
        ctx.function, ctx.lanes, ctx.dtype = function, lanes, dtype
        ctx.set_materialize_grads(False)
        _save(ctx, function, tensors)
        values, initials = _parts(function, tensors, 2)
        return function._forward(values, initials, lanes, dtype)

    @staticmethod
    def backward(ctx: Any, *cotangents: Any) -> tuple[Any, ...]:
        return _eager_backward(ctx, cotangents)


class Transformed(torch.autograd.Function):
    """A function's forward under a ``torch.func`` transform or forward-mode AD (as
    :class:`Forward` takes it), with a forward-mode rule and a vmap rule."""

    @staticmethod
    def forward(function: Function, lanes: Any, dtype: torch.dtype, *tensors: Any) -> Any:
        values, initials = _parts(function, tensors, 2)
        return function._forward(values, initials, lanes, dtype)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        function, lanes, dtype, *tensors = inputs
        ctx.function, ctx.lanes, ctx.dtype = function, lanes, dtype
        _save(ctx, function, tensors)
        ctx.save_for_forward(*tensors)
        # an input with no tangent comes to jvp as None, not zeros (an output with no
        # cotangent to backward as None): a zero tangent times an infinite partial (sqrt
        # at 0) would make NaN of a tangent that has no part in it
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, *cotangents: Any) -> tuple[Any, ...]:
        return _eager_backward(ctx, cotangents)

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> Any:
        function = ctx.function
        values, initials = _parts(function, _saved(ctx, function), 2)
        results = function._derivatives.tangents(
            values,
            initials,
            tangents[3:],
            function._count(values, initials, ctx.lanes),
            ctx.dtype,
            functools.partial(_eager_second, function),
        )
        return results[0] if len(results) == 1 else results

    @staticmethod
    def vmap(info: Any, in_dims: Sequence[Any], function: Function, *args: Any) -> Any:
        lanes, dtype, *tensors = args
        return _looped(
            info,
            in_dims[3:],
            tensors,
            lambda *items: Transformed.apply(function, lanes, dtype, *items),
            lambda *items: _forward_fake(*items, lanes, dtype, function.key),
        )


def _eager_backward(ctx: Any, cotangents: tuple[Any, ...]) -> tuple[Any, ...]:
    """The backward of :class:`Forward` and :class:`Transformed`."""
    function = ctx.function
    grads = function._derivatives.backward_formula(
        _saved(ctx, function),
        cotangents,
        ctx.needs_input_grad[3:],
        functools.partial(_eager_gradients, function),
        functools.partial(function._count, lanes=ctx.lanes),
        ctx.dtype,
    )
    return (None, None, None, *grads)


class Gradients(torch.autograd.Function):
    """A function's backward: ``apply(function, needs, zero, *inputs, *initials,
    *cotangents)`` gives a tensor per slot (empty where ``needs`` is False), with the
    outputs ``zero`` marks left out of the adjoint."""

    @staticmethod
    def forward(
        function: Function, needs: tuple[bool, ...], zero: tuple[bool, ...], *tensors: Any
    ) -> Any:
        values, initials, cotangents = _parts(function, tensors, 3)
        gradients = function._derivatives.gradients(values, initials, cotangents, needs, zero)
        return _padded(gradients, tensors)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        function, needs, zero, *tensors = inputs
        ctx.function, ctx.needs, ctx.zero = function, needs, zero
        ctx.save_for_backward(*tensors)
        ctx.save_for_forward(*tensors)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, *gg: Any) -> tuple[Any, ...]:
        function = ctx.function
        grads = function._derivatives.second_formula(
            ctx.saved_tensors,
            gg,
            ctx.needs,
            ctx.zero,
            ctx.needs_input_grad[3:],
            functools.partial(_eager_second, function),
        )
        return (None, None, None, *grads)

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> Any:
        function = ctx.function
        values, initials, cotangents = _parts(function, ctx.saved_tensors, 3)
        results = function._derivatives.gradient_tangents(
            values,
            initials,
            cotangents,
            ctx.needs,
            ctx.zero,
            tangents[3:],
            functools.partial(_eager_gradients, function),
            functools.partial(_eager_second, function),
        )
        return _padded(results, ctx.saved_tensors)

    @staticmethod
    def vmap(info: Any, in_dims: Sequence[Any], function: Function, *args: Any) -> Any:
        needs, zero, *tensors = args
        return _looped(
            info,
            in_dims[3:],
            tensors,
            lambda *items: Gradients.apply(function, needs, zero, *items),
            lambda *items: _gradients_fake(*items, needs, zero, function.key),
        )


class SecondOrder(torch.autograd.Function):
    """The backward's backward: ``apply(function, needs, wants, zero, *inputs, *initials,
    *cotangents, *gg)``; differentiating it raises (no third derivative)."""

    @staticmethod
    def forward(
        function: Function,
        needs: tuple[bool, ...],
        wants: tuple[bool, ...],
        zero: tuple[bool, ...],
        *tensors: Any,
    ) -> Any:
        values, initials, cotangents, gg = _parts(function, tensors, 4)
        results = function._derivatives.second(values, initials, cotangents, gg, needs, wants, zero)
        return _padded(results, tensors)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.function = inputs[0]

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        raise EagleRuntimeError(_no_third_derivative(ctx.function))

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> Any:
        raise EagleRuntimeError(_no_forward_mode(ctx.function, "second-order backward"))

    @staticmethod
    def vmap(info: Any, in_dims: Sequence[Any], function: Function, *args: Any) -> Any:
        needs, wants, zero, *tensors = args
        return _looped(
            info,
            in_dims[4:],
            tensors,
            lambda *items: SecondOrder.apply(function, needs, wants, zero, *items),
            lambda *items: _second_fake(*items, needs, wants, zero, function.key),
        )


def _eager_gradients(
    function: Function,
    values: Sequence[Any],
    initials: Sequence[Any],
    cotangents: Sequence[Any],
    needs: Sequence[bool],
    zero: Sequence[bool],
) -> Sequence[Any]:
    """The backward on the eager route: recorded (:class:`Gradients`) when autograd
    records the backward, else computed directly."""
    if not _recording():
        return function._derivatives.gradients(values, initials, cotangents, needs, zero)
    results = Gradients.apply(function, tuple(needs), tuple(zero), *values, *initials, *cotangents)
    return results if isinstance(results, tuple) else (results,)


def _eager_second(
    function: Function,
    values: Sequence[Any],
    initials: Sequence[Any],
    cotangents: Sequence[Any],
    gg: Sequence[Any],
    needs: Sequence[bool],
    wants: Sequence[bool],
    zero: Sequence[bool],
) -> Sequence[Any]:
    """The second-order backward on the eager route, recorded as :func:`_eager_gradients`."""
    if not _recording():
        return function._derivatives.second(values, initials, cotangents, gg, needs, wants, zero)
    results = SecondOrder.apply(
        function, tuple(needs), tuple(wants), tuple(zero), *values, *initials, *cotangents, *gg
    )
    return _unpadded(function, results, needs, wants, zero)


def _looped(
    info: Any,
    in_dims: Sequence[Any],
    tensors: Sequence[Any],
    call: Callable[..., Any],
    shaped: Callable[..., Any],
) -> tuple[Any, Any]:
    """A vmap rule: ``call`` once per batch element, the results stacked along dim 0. An
    empty batch gives empty results, shaped by ``shaped`` (``call``'s fake: the results'
    shapes, dtypes and device, from one element's)."""
    if not info.batch_size:
        items = [
            t if dim is None or t is None else t.new_empty((*t.shape[:dim], *t.shape[dim + 1 :]))
            for t, dim in zip(tensors, in_dims, strict=True)
        ]
        result = shaped(*items)
        single = not isinstance(result, tuple)
        stacked = tuple(r.new_empty((0, *r.shape)) for r in ((result,) if single else result))
        return (stacked[0], 0) if single else (stacked, (0,) * len(stacked))
    rows = []
    single = False
    for index in range(info.batch_size):
        items = [
            t if dim is None or t is None else t.select(dim, index)
            for t, dim in zip(tensors, in_dims, strict=True)
        ]
        result = call(*items)
        single = not isinstance(result, tuple)
        rows.append((result,) if single else result)
    stacked = tuple(torch.stack(column) for column in zip(*rows, strict=True))
    if single:
        return stacked[0], 0
    return stacked, (0,) * len(stacked)


# -- the registered ops, one set per signature ---------------------------------------------


def signature_ops(inputs: int, outputs: int) -> tuple[Any, Any, Any]:
    """The forward, backward and second-order backward ops of functions with ``inputs``
    input planes and ``outputs`` Mutable planes (registered on first use)."""
    ops = _registered.get((inputs, outputs))
    if ops is None:
        with _registering:
            ops = _registered.get((inputs, outputs))
            if ops is None:
                ops = _registered[(inputs, outputs)] = _register(inputs, outputs)
    return ops


def _register(inputs: int, outputs: int) -> tuple[Any, Any, Any]:
    name = f"function_{inputs}_{outputs}_r{_REVISION}"
    values = [f"Tensor v{i}" for i in range(inputs)]
    starts = [f"Tensor? s{i}" for i in range(outputs)]
    bars = [f"Tensor c{i}" for i in range(outputs)]
    gg = [f"Tensor? g{i}" for i in range(inputs + outputs)]
    forward = _define(
        name,
        [*values, *starts, "SymInt lanes", "ScalarType dtype", "int key"],
        outputs,
        _forward_impl,
        _forward_fake,
        (_forward_backward, _forward_setup),
    )
    gradients = _define(
        f"{name}_backward",
        [*values, *starts, *bars, "bool[] needs", "bool[] zero", "int key"],
        inputs + outputs,
        _gradients_impl,
        _gradients_fake,
        (_gradients_backward, _gradients_setup),
    )
    second = _define(
        f"{name}_backward2",
        [*values, *starts, *bars, *gg, "bool[] needs", "bool[] wants", "bool[] zero", "int key"],
        inputs + 2 * outputs,
        _second_impl,
        _second_fake,
        (_second_backward, _second_setup),
    )
    return forward, gradients, second


@functools.cache
def _namespace() -> torch.library.Library:
    """The ``eagle`` namespace's registrations (made on first use; torch keeps them for
    good)."""
    return torch.library.Library(_NAMESPACE, "FRAGMENT")


#: the device types an op runs on: its function is the kernel of each one's dispatch key
_DEVICE_KEYS = ("CPU", "CUDA")


def _define(
    name: str,
    arguments: list[str],
    results: int,
    impl: Callable[..., Any],
    fake: Callable[..., Any],
    autograd: tuple[Callable[..., Any], Callable[..., Any]],
) -> Any:
    """The op ``eagle::<name>`` (its overload, which calls it), defined with ``impl`` as
    its kernel on each device type, its fake, and its autograd formula (``backward``,
    ``setup_context``).

    The ops are defined through ``torch.library.Library``, not ``custom_op``: a call of a
    ``custom_op`` goes through Python wrappers of torch's (an aliasing check, a dynamo
    guard) before it reaches ``impl``, which cost more than the launch it makes."""
    lib = _namespace()
    schema = f"({', '.join(arguments)}) -> ({', '.join(['Tensor'] * results)})"
    lib.define(name + schema)
    for key in _DEVICE_KEYS:
        lib.impl(name, impl, key)
    qualified = f"{_NAMESPACE}::{name}"
    torch.library.register_fake(qualified, fake, lib=lib)
    backward, setup_context = autograd
    torch.library.register_autograd(qualified, backward, setup_context=setup_context, lib=lib)
    return getattr(getattr(torch.ops, _NAMESPACE), name).default


def _forward_impl(*args: Any) -> Any:
    *tensors, lanes, dtype, key = args
    function = lookup(key)
    values, initials = _parts(function, tensors, 2)
    return function._forward_op(values, initials, lanes, dtype)


def _forward_fake(*args: Any) -> Any:
    *tensors, lanes, dtype, key = args
    function = lookup(key)
    values, initials = _parts(function, tensors, 2)
    return function._forward_fake(values, initials, lanes, dtype)


# The ops' autograd contexts hold the function's int key, never the function: torch.compile
# keeps the contexts it traces with the compiled code, which must not keep a function you
# drop alive (a call after it is freed raises, from lookup).


def _forward_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.key, ctx.lanes, ctx.dtype = inputs[-1], inputs[-3], inputs[-2]
    ctx.set_materialize_grads(False)  # (an output no loss reads: see Forward)
    _save(ctx, lookup(ctx.key), inputs[:-3])


def _forward_backward(ctx: Any, *cotangents: Any) -> tuple[Any, ...]:
    function = lookup(ctx.key)
    grads = function._derivatives.backward_formula(
        _saved(ctx, function),
        cotangents,
        ctx.needs_input_grad,
        functools.partial(_op_gradients, function),
        functools.partial(function._count, lanes=ctx.lanes),
        ctx.dtype,
    )
    return (*grads, None, None, None)


def _op_gradients(
    function: Function,
    values: Sequence[Any],
    initials: Sequence[Any],
    cotangents: Sequence[Any],
    needs: Sequence[bool],
    zero: Sequence[bool],
) -> Sequence[Any]:
    results = function.backward_op(
        *values, *initials, *cotangents, list(needs), list(zero), function.key
    )
    return results if isinstance(results, tuple) else (results,)


def _gradients_impl(*args: Any) -> Any:
    *tensors, needs, zero, key = args
    function = lookup(key)
    values, initials, cotangents = _parts(function, tensors, 3)
    gradients = function._derivatives.gradients(values, initials, cotangents, needs, zero)
    return _padded(gradients, tensors)


def _gradients_fake(*args: Any) -> Any:
    *tensors, needs, _zero, key = args
    function = lookup(key)
    values, initials, cotangents = _parts(function, tensors, 3)
    gradients = function._derivatives.gradients_fake(values, initials, cotangents, needs)
    return _padded(gradients, tensors)


def _gradients_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.key, ctx.needs, ctx.zero = inputs[-1], inputs[-3], inputs[-2]
    ctx.save_for_backward(*inputs[:-3])


def _gradients_backward(ctx: Any, *gg: Any) -> tuple[Any, ...]:
    function = lookup(ctx.key)
    grads = function._derivatives.second_formula(
        ctx.saved_tensors,
        gg,
        ctx.needs,
        ctx.zero,
        ctx.needs_input_grad,
        functools.partial(_op_second, function),
    )
    return (*grads, None, None, None)


def _op_second(
    function: Function,
    values: Sequence[Any],
    initials: Sequence[Any],
    cotangents: Sequence[Any],
    gg: Sequence[Any],
    needs: Sequence[bool],
    wants: Sequence[bool],
    zero: Sequence[bool],
) -> Sequence[Any]:
    results = function._second_op(
        *values, *initials, *cotangents, *gg, list(needs), list(wants), list(zero), function.key
    )
    return _unpadded(function, results, needs, wants, zero)


def _second_impl(*args: Any) -> Any:
    *tensors, needs, wants, zero, key = args
    function = lookup(key)
    values, initials, cotangents, gg = _parts(function, tensors, 4)
    results = function._derivatives.second(values, initials, cotangents, gg, needs, wants, zero)
    return _padded(results, tensors)


def _second_fake(*args: Any) -> Any:
    *tensors, needs, wants, zero, key = args
    function = lookup(key)
    values, initials, cotangents = _parts(function, tensors, 3)
    results = function._derivatives.second_fake(values, initials, cotangents, needs, wants, zero)
    return _padded(results, tensors)


def _second_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.key = inputs[-1]


def _second_backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
    raise EagleRuntimeError(_no_third_derivative(lookup(ctx.key)))


# -- helpers ---------------------------------------------------------------------------------


def _save(ctx: Any, function: Function, tensors: Sequence[Any]) -> None:
    """Save a forward's ``tensors`` for its backward, the initial values no adjoint reads
    left out (:meth:`~eagle._torch_derivatives.Derivatives.kept`)."""
    kept, ctx.stand_ins = function._derivatives.kept(tensors)
    ctx.save_for_backward(*kept)


def _saved(ctx: Any, function: Function) -> list[Any]:
    """The tensors :func:`_save` saved, with stand-ins for those it left out."""
    return function._derivatives.restored(ctx.saved_tensors, ctx.stand_ins)


def _parts(function: Function, tensors: Sequence[Any], count: int) -> list[Sequence[Any]]:
    """The first ``count`` of (inputs, initial values, cotangents, cotangents of the
    gradients) in ``tensors``, as the ops and ``autograd.Function`` classes take them."""
    inputs, outputs = len(function._inputs), len(function._outputs)
    return split(tensors, *(inputs, outputs, outputs, inputs + outputs)[:count])


def _padded(results: Sequence[Any], tensors: Sequence[Any]) -> Any:
    """``results`` as an op returns them: a new empty tensor for each None (an op's
    results never alias one another), one tensor alone, several as a tuple."""
    first = next(t for t in tensors if t is not None)
    padded = [first.new_empty(0) if result is None else result for result in results]
    return padded[0] if len(padded) == 1 else tuple(padded)


def _unpadded(
    function: Function,
    results: Any,
    needs: Sequence[bool],
    wants: Sequence[bool],
    zero: Sequence[bool],
) -> list[Any]:
    """The second-order gradients an op returned, None where it had none to give."""
    results = results if isinstance(results, tuple) else (results,)
    _, wanted = function._derivatives.second_plan(needs, wants, zero)
    return [r if i in wanted else None for i, r in enumerate(results)]


def _no_third_derivative(function: Function) -> str:
    return (
        f"the eagle.torch op of hawk kernel {function.kernel.name!r} is differentiable twice: "
        "its second-order backward, which also computes its forward mode (torch.func.jvp, "
        "jacfwd), has no derivative. That rules out a third derivative and reverse mode of "
        "forward mode (jacrev or grad of jacfwd or jvp), and torch.autograd.functional.hvp "
        "(which differentiates a backward's backward); for a Hessian use torch.func.hessian "
        "or jacrev(jacrev), and for its products torch.autograd.functional.vhp (equal to "
        "hvp: the Hessian is symmetric) or torch.func.jvp of torch.func.grad"
    )


def _no_forward_mode(function: Function, what: str) -> str:
    return (
        f"the {what} of the eagle.torch op of hawk kernel {function.kernel.name!r}, which "
        "also computes its forward mode, has no forward-mode derivative (torch.func.jvp, "
        "jacfwd, forward_ad): forward mode of forward mode (jacfwd of jacfwd) or of a "
        "second derivative is not available; for a Hessian use torch.func.hessian or "
        "jacrev(jacrev)"
    )
