"""How ``eagle.torch`` runs a plan over torch tensors: :class:`Runner`, and the facts
about tensors and kernels that running needs.

Host tensors run through numpy views of them, bound afresh at each run (a
plan's own reuse would keep the tensors alive); CUDA tensors through a binding
cached by their addresses and sizes, launched on torch's current stream. A kernel
that adds into a table adds floats atomically on the device, in an order that varies
from run to run: :func:`refuse_nondeterminism` says so under
``torch.use_deterministic_algorithms(True)``. Only :mod:`eagle.torch` and its private
modules import this module (it needs torch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Set
from typing import Any

import numpy as np
import torch

import hawk
from eagle._cache import KeyedCache
from eagle.arrays import _holder
from eagle.cuda.stream import Stream
from eagle.errors import EagleRuntimeError, _warn_user
from hawk import ir
from hawk.dtypes import TABLE
from hawk.emit import compute_dtype as compute_rule
from hawk.emit.policy import TableAdds

__all__ = [
    "DTYPE_NAMES",
    "Runner",
    "adds",
    "compute_dtype",
    "compute_dtype_of",
    "contiguous",
    "first_tensor",
    "refuse_nondeterminism",
    "rounded",
]

#: the numpy dtype of each torch dtype hawk planes take (bfloat16: ``ml_dtypes``'), from
#: the plane rows of hawk's dtype table (torch names its dtypes as numpy does) whose planes
#: take adds, as an op's gradients are (so not fp8, a storage type without them)
_NUMPY = {
    getattr(torch, row.name): row.numpy for row in TABLE if row.plane is not None and row.plane.adds
}
#: the torch dtypes hawk planes take, by their names
DTYPE_NAMES = {torch_dtype: dtype.name for torch_dtype, dtype in _NUMPY.items()}
_CACHED_BINDINGS = 32  # bound launches kept per plan (the most recently used), by address


def _raw_stream(device: torch.device) -> int:
    """torch's current stream on ``device``, as a raw pointer."""
    return int(torch.cuda.current_stream(device).cuda_stream)


_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # torch's own


class Runner:
    """Runs a plan (or an adjoint plan) over tensors through a binding cached by the
    tensors' addresses and sizes (the most recently used of them kept; torch's
    allocators hand addresses back): CPU tensors through numpy views of their memory;
    CUDA tensors prepared for and launched on torch's current stream (a routed plan's
    cuBLAS handle for a capturing stream is the one made during the warm-up on it).
    The planes named in ``one`` take a broadcast (stride-0) tensor as its one element."""

    def __init__(self, plan: Any, one: frozenset[str] = frozenset()) -> None:
        self._plan = plan
        self._one = one
        self._bound: KeyedCache[tuple, Any] = KeyedCache("torch runner bindings", _CACHED_BINDINGS)

    def run(self, names: tuple[str, ...], tensors: list[Any], device: torch.device) -> None:
        stream, index = None, 0  # a CPU binding runs on the host
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            stream = _current_raw_stream(index) if _current_raw_stream else _raw_stream(device)
        try:
            key = (names, *[(t.data_ptr(), t.numel(), t.dtype) for t in tensors])
        except RuntimeError as exc:  # a tensor without storage: a batched one, say
            raise _without_storage(names, tensors) from exc
        kept = self._bound
        last = kept.last
        if last is not None and last[0] == key:  # the last call's tensors: no hashing
            bound = last[1]
            kept.hits += 1
        else:
            bound = kept.get(key)  # (now the most recent: the least recent goes first)
            if bound is None:
                bound = self._bind(names, tensors, key, stream, index)
        bound.launch(stream)

    def _bind(
        self,
        names: tuple[str, ...],
        tensors: list[Any],
        key: tuple,
        stream: int | None,
        index: int,
    ) -> Any:
        """Bind the plan over flat views of ``tensors`` that do not keep them alive (the
        key holds their addresses); CUDA tensors' binding is prepared for torch's
        ``stream`` on device ``index``."""
        planes = {
            n: _holder.address_view(t, one=n in self._one)
            for n, t in zip(names, tensors, strict=True)
        }
        scope = contextlib.nullcontext() if stream is None else Stream.external(stream, index)
        with scope:
            bound = self._plan.bind(**planes)
        self._bound[key] = bound
        return bound


def adds(kernel: hawk.Kernel, policy_adds: TableAdds = "auto") -> bool:
    """True when ``kernel`` adds into a table in an order that varies from run to run: a
    ``Mutable[Table]`` add, or a Param's or table's gradient summed over lanes (atomic
    float adds on the device), unless its plan sums them in a fixed order
    (``policy_adds`` ``"deterministic"``)."""
    if policy_adds == "deterministic":
        return False
    return any(isinstance(node, ir.Accumulate) for node in ir.walk(kernel.ir))


def refuse_nondeterminism(what: str, device: torch.device) -> None:
    """Under ``torch.use_deterministic_algorithms(True)``, raise (with ``warn_only``,
    warn) as torch's own nondeterministic ops do, for work on a CUDA device that adds
    floats atomically (``what`` names it): the order the adds land in, and so the
    rounding, varies from run to run. Host runs add in a fixed order."""
    if device.type != "cuda" or not torch.are_deterministic_algorithms_enabled():
        return
    message = (
        f"{what} adds floats atomically on the GPU (table adds, or gradients summed over "
        "lanes), so its rounding varies from run to run, but "
        "torch.use_deterministic_algorithms(True) is set"
    )
    if torch.is_deterministic_algorithms_warn_only_enabled():
        _warn_user(message, UserWarning)
        return
    raise EagleRuntimeError(
        f"{message}. Run it on CPU tensors, or set "
        "torch.use_deterministic_algorithms(True, warn_only=True) to be warned instead"
    )


def first_tensor(*groups: Any) -> torch.Tensor:
    """The first tensor of ``groups`` (sequences whose entries may be None)."""
    return next(t for group in groups for t in group if t is not None)


#: the torch dtypes whose planes make a kernel compute in float64 (hawk's rule,
#: :func:`hawk.emit.compute_dtype`, over its dtype table)
_WIDE = frozenset(
    torch_dtype
    for torch_dtype, numpy in _NUMPY.items()
    if compute_rule({"plane": numpy}) == np.float64
)


def compute_dtype(*tensors: Any) -> torch.dtype:
    """The dtype a kernel over these tensors computes in, by hawk's rule: float64 when
    any is, else float32 (None entries aside)."""
    wide = any(t is not None and t.dtype in _WIDE for t in tensors)
    return torch.float64 if wide else torch.float32


def compute_dtype_of(dtypes: Set[torch.dtype]) -> torch.dtype:
    """:func:`compute_dtype` of tensors whose dtypes (the set ``dtypes``) a caller has
    already gathered."""
    return torch.float32 if _WIDE.isdisjoint(dtypes) else torch.float64


#: the narrow dtypes a float64 value rounds into once (their rows'
#: :attr:`~hawk.dtypes.PlaneForm.from_double`), which torch converts to through float32
_ROUNDED_ONCE = frozenset(
    getattr(torch, row.name)
    for row in TABLE
    if row.plane is not None
    and row.plane.adds  # (the rows eagle.torch takes: see _NUMPY)
    and row.plane.from_double == "once"
    and row.itemsize < 4
)


def rounded(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor`` in ``dtype``, each value rounded as a kernel's own stores round it.

    torch takes float64 to a 16-bit dtype through float32, two roundings that can land a
    value near a float16 tie one ulp off where the row rounds once; such a conversion
    rounds to odd in float32 first (the nearest float32 toward zero, its last bit set
    where inexact), which leaves the rounding to the narrow dtype the only one that
    counts. (bfloat16's row rounds through float32, as torch does.)"""
    if tensor.dtype == dtype:
        return tensor
    if tensor.dtype == torch.float64 and dtype in _ROUNDED_ONCE:
        narrow = tensor.to(torch.float32)
        wide = narrow.to(torch.float64)
        toward_zero = torch.where(
            wide.abs() > tensor.abs(), torch.nextafter(narrow, torch.zeros_like(narrow)), narrow
        )
        odd = (toward_zero.view(torch.int32) | 1).view(torch.float32)
        tensor = torch.where(wide != tensor, odd, narrow)  # (NaN stays NaN)
    return tensor.to(dtype)


def contiguous(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself when it is contiguous and not a lazily negated view (no copy),
    else a contiguous copy of the values it stands for (as torch's own ops read it)."""
    if tensor.is_neg():
        return tensor.resolve_neg().contiguous()
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _without_storage(names: tuple[str, ...], tensors: list[Any]) -> Exception:
    """The error for tensors of which one has no memory eagle can read."""
    functorch = torch._C._functorch
    for name, tensor in zip(names, tensors, strict=True):
        if functorch.is_functorch_wrapped_tensor(tensor) or functorch.is_legacy_batchedtensor(
            tensor
        ):
            return EagleRuntimeError(
                f"a batched tensor reached an eagle.torch op (as plane {name!r} of a kernel it "
                "runs): torch.autograd.grad(..., is_grads_batched=True), "
                "torch.autograd.functional.jacobian or hessian with vectorize=True (which "
                "forward-mode strategies need), and gradcheck's check_batched_grad=True batch "
                "in a way eagle.torch cannot run. Use torch.func (jacrev, jacfwd, hessian, vmap "
                "over vjp), which it runs, or pass vectorize=False (check_batched_grad=False)"
            )
    return EagleRuntimeError(
        f"a plane of {', '.join(names)} has no memory eagle can read (a tensor without "
        "storage); pass ordinary tensors"
    )
