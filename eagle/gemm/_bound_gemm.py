"""One product bound to its operands: :class:`BoundGemm`, made by
:meth:`~eagle.gemm.CublasCaptureHandle.bind`.

Everything the handle checks is checked when the product is bound; calling the
bound product only enqueues it, legal inside a capture once the handle warmed it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

from eagle.arrays import _holder
from eagle.cuda.graph import is_capturing, record_use
from eagle.errors import EagleValueError
from eagle.gemm._prepared import Call, product_key
from eagle.gemm.params import GemmParams, SgemmParams, _check_out_apart

__all__ = ["BoundGemm", "Handle"]

Params = SgemmParams | GemmParams


class Handle(Protocol):
    """What a bound product uses of its handle (a :class:`~eagle.gemm.CublasCaptureHandle`,
    which makes bound products: named here so this module needs nothing of it)."""

    stream_ptr: int
    _closed: bool
    _warmed: set[Any]
    _lock: threading.RLock

    def _check_alive(self) -> None: ...

    def _refuse_unwarmed(self, params: Params, operands: Mapping[str, Any]) -> None: ...

    def _call(self, *args: Any, **kwargs: Any) -> Call: ...


class BoundGemm:
    """One product bound to its operands by :meth:`CublasCaptureHandle.bind`.

    Calling it enqueues the product on the handle's stream with the ``alpha``
    and ``beta`` it was bound with: legal inside a capture once the handle has
    warmed it; everything else was checked when it was bound. It holds its
    operands, so their memory outlives it.

    Attributes:
        handle: the :class:`CublasCaptureHandle`.
        params: the product's params.
    """

    __slots__ = ("_call", "_tensor", "_used", "handle", "params")

    def __init__(
        self,
        handle: Handle,
        params: Params,
        prepared: Call,
        used: tuple[Any, Any, Any],
        tensor: Any = None,
    ) -> None:
        self.handle, self.params, self._call, self._used = handle, params, prepared, used
        self._tensor = tensor  # the torch tensor ``out`` was given as: its version goes up

    def __call__(self) -> None:
        """Enqueue the product (no allocation, no synchronisation).

        Raises:
            GemmCaptureUnavailable: the handle was destroyed, or the stream is
                being captured and the handle never warmed this product.
        """
        handle, prepared = self.handle, self._call
        if handle._closed:
            handle._check_alive()
        if not prepared.warm:
            prepared.warm = prepared.key in handle._warmed
            if not prepared.warm and is_capturing(handle.stream_ptr):
                first, second, out = self._used
                a, b = (second, first) if prepared.swap else (first, second)
                handle._refuse_unwarmed(self.params, {"a": a, "b": b, "out": out})
        with handle._lock:  # not while the handle is lent to another stream
            if handle._closed:
                handle._check_alive()
            prepared.function(*prepared.args)
        record_use(handle.stream_ptr, handle, *self._used)
        if self._tensor is not None:
            _holder.bump_versions((self._tensor,))

    def rebound(self, operands: Mapping[str, Any]) -> BoundGemm:
        """The same product, with the same ``alpha`` and ``beta``, over other operands
        laid out as its own (same shapes, strides, dtypes and device): a cheaper
        :meth:`CublasCaptureHandle.bind` for another set of planes, as the layout
        checks carry over. The new addresses are checked (``out`` apart from ``a``
        and ``b``) and keyed for warming as ``bind`` keys them.

        Raises:
            ValueError: an operand is laid out otherwise than the one it replaces,
                or ``out`` shares memory with ``a`` or ``b``.
            GemmCaptureUnavailable: the handle was destroyed.
        """
        handle, params = self.handle, self.params
        handle._check_alive()
        roles = (*params.operands, "out")
        for role, old in zip(roles, self._used, strict=True):
            new = operands[role]
            if (
                getattr(new, "is_host", True)
                or new.shape != old.shape
                or new.strides != old.strides
                or new.dtype != old.dtype
                or new.device_index != old.device_index
            ):
                raise EagleValueError(
                    f"operand {role!r} is laid out otherwise than the one it replaces "
                    f"(shape {tuple(old.shape)}, strides {tuple(old.strides)}, {old.dtype}, "
                    f"cuda:{old.device_index}); bind the product again with handle.bind"
                )
        _check_out_apart(operands)
        first, second, out = (operands[role] for role in roles)
        key = product_key(params, first, second, out)
        alpha, beta = self._call.values
        prepared = handle._call(params, first.ptr, second.ptr, out.ptr, key, alpha, beta)
        return BoundGemm(handle, params, prepared, (first, second, out))

    def __repr__(self) -> str:
        return f"BoundGemm({self.params}, {self.handle!r})"
