"""Emitters: hawk IR -> numpy code (:mod:`hawk.emit.host`) and CUDA C
(:mod:`hawk.emit.cuda`), and the routing policy (:mod:`hawk.emit.policy`).

Both emitters specialise a kernel for concrete plane dtypes, per plane:
float16, bfloat16 (``ml_dtypes.bfloat16`` on the host), float32, float64,
float8_e4m3fn or float8_e5m2 (``ml_dtypes``' on the host; the rows of
:data:`hawk.dtypes.TABLE` with a plane form). The 16-bit and 8-bit dtypes are
storage only, and the 8-bit ones take no adds (a kernel that adds into one is
refused, naming the plane). Arithmetic runs in the kernel's *compute dtype*
(:func:`compute_dtype`): float64 when any plane is float64, else float32. Every
load converts a plane's value to the compute dtype and every store (and every
``Mutable[Table]`` add) rounds the result to nearest in the plane's own dtype, so
planes of several dtypes mix freely in one kernel, each rounded where it is
written.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from hawk import dtypes as table
from hawk import ir
from hawk.ir import HawkError, KernelIR, Var

__all__ = ["DTYPES", "HALVES", "Names", "compute_dtype", "plane_dtypes"]

_NAMES = ", ".join(table.PLANE_DTYPES)
_ADDS = [row.name for row in table.TABLE if row.plane is not None and row.plane.adds]
_ADDED = f"{', '.join(_ADDS[:-1])} or {_ADDS[-1]}"  # the dtypes whose planes take adds


def __getattr__(name: str) -> Any:
    # the plane dtypes as numpy dtypes, built on first use: bfloat16's imports ml_dtypes
    planes = [row for row in table.TABLE if row.plane is not None]
    if name == "DTYPES":  # the dtypes a plane may have
        return tuple(row.numpy for row in planes)
    if name == "HALVES":  # the 16-bit dtypes a plane may have: storage only, computed in float32
        return tuple(row.numpy for row in planes if row.storage_only and row.itemsize == 2)
    raise AttributeError(f"module 'hawk.emit' has no attribute {name!r}")


def plane_dtypes(kernel: KernelIR, dtypes: Mapping[str, Any]) -> dict[str, np.dtype]:
    """``dtypes`` checked against ``kernel``: a plane dtype of :data:`hawk.dtypes.TABLE` per
    plane (a dtype or its name; ``"bfloat16"`` is ``ml_dtypes.bfloat16``).

    Raises:
        HawkError: a plane without a dtype, an unknown plane, another dtype, or a
            dtype that takes no adds (fp8) for a table the kernel adds into.
    """
    names = [p.name for p in kernel.planes]
    added = {node.plane.name for node in ir.walk(kernel) if isinstance(node, ir.Accumulate)}
    unknown = sorted(set(dtypes) - set(names))
    if unknown:
        raise HawkError(f"kernel {kernel.name!r} has no plane {unknown[0]!r}; it has {names}")
    result = {}
    for name in names:
        if name not in dtypes:
            raise HawkError(f"no dtype given for plane {name!r} of kernel {kernel.name!r}")
        dtype = table.numpy_dtype(dtypes[name])
        row = table.plane_row(dtype)
        if row is None or row.plane is None:
            raise HawkError(f"plane {name!r} is {dtype}; hawk planes are {_NAMES}")
        if name in added and not row.plane.adds:
            raise HawkError(
                f"plane {name!r} is {dtype}, and kernel {kernel.name!r} adds into it; {dtype} "
                f"planes are read and written but take no adds (there is no atomic add of "
                f"them): make {name!r} {_ADDED}"
            )
        result[name] = dtype
    return result


def compute_dtype(dtypes: Mapping[str, np.dtype]) -> np.dtype:
    """The dtype a kernel over planes of these dtypes computes in: the widest of their
    rows' compute dtypes, so float64 when any plane is float64, else float32 (16-bit
    planes compute in float32)."""
    computes = {_compute(dtype) for dtype in dtypes.values()}
    return np.dtype(np.float64) if "float64" in computes else np.dtype(np.float32)


@functools.cache  # (a binding asks for each of its planes)
def _compute(dtype: Any) -> str:
    row = table.find(dtype)
    return row.compute if row is not None else np.dtype(dtype).name


class Names:
    """Identifiers for generated code: ``v<k>_<name>`` per :class:`~hawk.ir.Var`
    (unique whatever the kernel's own names are), ``p_<name>`` per plane.

    Python names may be any Unicode identifier, but NVRTC takes ASCII only:
    a plane whose name is not ASCII is ``pu_<hex of its UTF-8 bytes>`` in
    generated code (its value ``lu_<hex>``), and a variable keeps only its
    number, so such kernels run on the host and the device alike."""

    def __init__(self) -> None:
        self._vars: dict[Var, str] = {}
        self._count = 0

    def var(self, var: Var) -> str:
        """The identifier of ``var``."""
        name = self._vars.get(var)
        if name is None:
            base = var.name.split(".")[0] if var.name.isascii() else "x"
            name = self._vars[var] = f"v{len(self._vars)}_{base}"
        return name

    def fresh(self, prefix: str) -> str:
        """A new helper identifier, ``<prefix><k>``."""
        self._count += 1
        return f"{prefix}{self._count}"

    @staticmethod
    def plane(name: str) -> str:
        """The identifier of a plane's pointer / array."""
        return _ascii("p", name)

    @staticmethod
    def load(name: str) -> str:
        """The identifier of a plane's loaded value (a lane's or a param's)."""
        return _ascii("l", name)


def _ascii(prefix: str, name: str) -> str:
    """``<prefix>_<name>``, or ``<prefix>u_<hex>`` for a name that is not ASCII
    (the two forms cannot meet: their second characters differ)."""
    if name.isascii():
        return f"{prefix}_{name}"
    return f"{prefix}u_{name.encode('utf-8').hex()}"
