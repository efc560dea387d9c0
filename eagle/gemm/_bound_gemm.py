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
from eagle.gemm._operands import ROLES
from eagle.gemm._prepared import Call, product_key
from eagle.gemm.dtypes import SCALED_DTYPES
from eagle.gemm.params import GemmParams, SgemmParams, _check_out_apart, check_scaled_pointer

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

    __slots__ = ("_call", "_kept", "_scales", "_tensor", "_used", "handle", "params")

    def __init__(
        self,
        handle: Handle,
        params: Params,
        prepared: Call,
        used: tuple[Any, Any, Any],
        tensor: Any = None,
        scales: tuple[Any, Any] = (None, None),
    ) -> None:
        self.handle, self.params, self._call, self._used = handle, params, prepared, used
        self._tensor = tensor  # the torch tensor ``out`` was given as: its version goes up
        # the scales of cuBLAS's first and second operand (fp8), and all it runs over
        self._scales = scales
        self._kept = (
            used
            if scales[0] is None and scales[1] is None
            else (*used, *(scale for scale in scales if scale is not None))
        )

    def __call__(self) -> None:
        """Enqueue the product (no allocation, no synchronisation).

        Raises:
            GemmCaptureUnavailable: the handle was destroyed, or the stream is
                being captured and the handle never warmed this product.
        """
        handle, prepared = self.handle, self._call
        if handle._closed:
            handle._check_alive()
        if not prepared.warm and not self.warm and is_capturing(handle.stream_ptr):
            first, second, out = self._used
            a, b = (second, first) if prepared.swap else (first, second)
            handle._refuse_unwarmed(self.params, {"a": a, "b": b, "out": out})
        with handle._lock:  # not while the handle is lent to another stream
            if handle._closed:
                handle._check_alive()
            prepared.function(*prepared.args)
        record_use(handle.stream_ptr, handle, *self._kept)
        if self._tensor is not None:
            _holder.bump_versions((self._tensor,))

    @property
    def warm(self) -> bool:
        """Whether its handle has warmed this product for operands aligned as these
        (:meth:`CublasCaptureHandle.warm`): a cold product is not recorded in a capture."""
        call = self._call
        if not call.warm:
            call.warm = call.key in self.handle._warmed
        return call.warm

    @property
    def operands(self) -> dict[str, Any]:
        """Its operands by role, ``"a"``, ``"b"`` and ``"out"``, and for an fp8 product the
        scales given (``"a_scale"``, ``"b_scale"``)."""
        first, second, out = self._used
        names = self.params.operands
        found = dict(zip(names, (first, second), strict=True))
        found["out"] = out
        for name, scale in zip(names, self._scales, strict=True):
            if scale is not None:
                found[f"{name}_scale"] = scale
        return found

    def rebound(self, operands: Mapping[str, Any], *, checked: bool = False) -> BoundGemm:
        """The same product, with the same ``alpha`` and ``beta``, over other operands
        laid out as its own (same shapes, strides, dtypes and device; an fp8 product's
        scales too): a cheaper :meth:`CublasCaptureHandle.bind` for another set of
        planes, as the layout checks carry over. The new addresses are checked (``out``
        apart from ``a`` and ``b``; an fp8 product's alignment) and keyed for warming as
        ``bind`` keys them.

        ``checked`` says the caller has made these checks of the operands already, as a
        plan's bind does of its planes (they are laid out as those they replace, and
        ``out`` is apart from ``a`` and ``b``); only an fp8 product's alignment is
        checked then.

        Raises:
            ValueError: an operand is laid out otherwise than the one it replaces,
                or ``out`` shares memory with ``a`` or ``b``.
            GemmCaptureUnavailable: the handle was destroyed.
        """
        handle, params = self.handle, self.params
        handle._check_alive()
        names = params.operands
        if not checked:
            self._check_laid_out(operands)
        first, second, out = operands[names[0]], operands[names[1]], operands["out"]
        scales, at = self._scales, (0, 0)  # (the scales' addresses: none)
        if scales[0] is not None or scales[1] is not None:  # (an fp8 product's)
            first_scale, second_scale = (
                None if old is None else operands[f"{name}_scale"]
                for name, old in zip(names, scales, strict=True)
            )
            scales = (first_scale, second_scale)
            at = (
                0 if first_scale is None else first_scale.ptr,
                0 if second_scale is None else second_scale.ptr,
            )
        if isinstance(params, GemmParams) and params.dtype in SCALED_DTYPES:
            for name in ROLES:
                check_scaled_pointer(name, operands[name].ptr)
        key = product_key(params, first, second, out)
        alpha, beta = self._call.values
        prepared = handle._call(params, first.ptr, second.ptr, out.ptr, key, alpha, beta, at)
        return BoundGemm(handle, params, prepared, (first, second, out), None, scales)

    def _check_laid_out(self, operands: Mapping[str, Any]) -> None:
        """Refuse ``operands`` unless each is laid out as the one it replaces and ``out``
        is apart from ``a`` and ``b`` (:meth:`rebound`)."""
        names = self.params.operands
        scaled = [
            (f"{name}_scale", old)
            for name, old in zip(names, self._scales, strict=True)
            if old is not None
        ]
        for role, old in [*zip((*names, "out"), self._used, strict=True), *scaled]:
            _check_laid_out_as(role, operands[role], old)
        _check_out_apart(operands)

    def __repr__(self) -> str:
        return f"BoundGemm({self.params}, {self.handle!r})"


def _check_laid_out_as(role: str, new: Any, old: Any) -> None:
    """Refuse operand ``role``'s ``new`` array unless it is a device array laid out as
    ``old``, the one it replaces."""
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
