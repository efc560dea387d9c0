"""How ``eagle.torch`` runs a plan over torch tensors: :class:`Runner`.

Host tensors run through numpy views of them; CUDA tensors through a binding
cached by their addresses and sizes, launched on torch's current stream. Only
:mod:`eagle.torch` imports this module (it needs torch).
"""

from __future__ import annotations

from typing import Any

import torch

from eagle import arrays
from eagle.cuda.stream import Stream

_TYPESTR = {torch.float32: "<f4", torch.float64: "<f8"}
_CACHED_BINDINGS = 32  # bound launches kept per plan, keyed by their tensors' addresses


class _CudaView:
    """A flat ``__cuda_array_interface__`` of a contiguous CUDA tensor (or of the one
    element of a broadcast one, ``one=True``) that does not keep the tensor alive (a
    cached binding holds addresses, not tensors)."""

    def __init__(self, tensor: torch.Tensor, one: bool = False) -> None:
        self.__cuda_array_interface__ = {
            "shape": (1 if one else tensor.numel(),),
            "typestr": _TYPESTR[tensor.dtype],
            "data": (tensor.data_ptr(), False),
            "strides": None,
            "version": 3,
        }


def _raw_stream(device: torch.device) -> int:
    """torch's current stream on ``device``, as a raw pointer."""
    return int(torch.cuda.current_stream(device).cuda_stream)


_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # torch's own


class Runner:
    """Runs a plan (or an adjoint plan) over tensors: host tensors through numpy
    views; CUDA tensors through a binding cached by the tensors' addresses and
    sizes, prepared for and launched on torch's current stream (a routed plan's
    cuBLAS handle for a capturing stream is the one made during the warm-up on it).
    The planes named in ``one`` take a broadcast (stride-0) tensor as its one element."""

    def __init__(self, plan: Any, one: frozenset[str] = frozenset()) -> None:
        self._plan = plan
        self._one = one
        self._bound: dict[tuple, Any] = {}

    def run(self, names: tuple[str, ...], tensors: list[Any], device: torch.device) -> None:
        if device.type != "cuda":
            self._plan.run(**{n: self._host(n, t) for n, t in zip(names, tensors, strict=True)})
            return
        index = device.index if device.index is not None else torch.cuda.current_device()
        stream = _current_raw_stream(index) if _current_raw_stream else _raw_stream(device)
        key = (names, *((t.data_ptr(), t.numel(), t.dtype) for t in tensors))
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bind(names, tensors, key, stream, index)
        bound.launch(stream)

    def _host(self, name: str, tensor: Any) -> Any:
        values = tensor.detach().numpy()
        return values.reshape(-1)[:1] if name in self._one else values.reshape(-1)

    def _bind(
        self, names: tuple[str, ...], tensors: list[Any], key: tuple, stream: int, index: int
    ) -> Any:
        planes = {
            n: arrays.asarray(_CudaView(t, n in self._one))
            for n, t in zip(names, tensors, strict=True)
        }
        with Stream.external(stream, index):  # prepared for torch's stream
            bound = self._plan.bind(**planes)
        if len(self._bound) >= _CACHED_BINDINGS:
            del self._bound[next(iter(self._bound))]
        self._bound[key] = bound
        return bound
