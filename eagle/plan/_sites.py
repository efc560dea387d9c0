"""What a bound step leaves in a capture, so that the graph can be rebound.

A device step of a bound plan or adjoint (:class:`eagle.plan._bound.Step`) carries a
``site`` maker: while eagle captures the step's stream, each launch records one
:class:`~eagle.cuda._rebind.Site`, which :meth:`eagle.cuda.Launcher.rebind`
later points at other planes. :func:`kernel_site` is for a hawk kernel (its
node's arguments are rewritten), :func:`product_site` for the routed cuBLAS
products of :class:`eagle.plan._route.GemmLaunch` (bound again over the new planes
on the same warmed handle, and captured alone).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from eagle.cuda._node_arguments import ALIGNED
from eagle.cuda._rebind import KernelSite, ProductSite
from eagle.plan._route import _seen, _view
from hawk import ir

__all__ = ["kernel_site", "product_site", "written_planes"]


def written_planes(kernel: ir.KernelIR) -> frozenset[str]:
    """The names of the planes ``kernel`` writes."""
    return frozenset(p.name for p in kernel.planes if p.is_written)


def _arrays(planes: Mapping[str, Any]) -> dict[str, Any]:
    """The planes given as arrays (a Param given as a number is none)."""
    return {name: value for name, value in planes.items() if hasattr(value, "ptr")}


def kernel_site(
    label: str, kernel: ir.KernelIR, planes: Mapping[str, Any], packed: Any
) -> Callable[[], KernelSite]:
    """The site maker of a launch of ``kernel`` whose arguments are ``packed``: one per
    plane, in the kernel's plane order (a pointer; a Param given as a number, its value),
    then the lane count. A rebind rewrites the pointers; a number stays as captured."""
    arrays = _arrays(planes)
    positions = {p.name: index for index, p in enumerate(kernel.planes) if p.name in arrays}
    return functools.partial(KernelSite, label, arrays, written_planes(kernel), packed, positions)


def product_site(
    label: str, kernel: ir.KernelIR, planes: Mapping[str, Any], launch: Any
) -> Callable[[], ProductSite]:
    """The site maker of a :class:`~eagle.plan._route.GemmLaunch` over ``planes``.

    Each product's operands are views of the planes (the same memory, seen as
    matrices); captured again, each is the same view of the new plane. The site is worked
    out when a capture records the launch (most bindings never meet one).
    """
    return functools.partial(_product_site, label, kernel, planes, launch)


def _product_site(
    label: str, kernel: ir.KernelIR, planes: Mapping[str, Any], launch: Any
) -> ProductSite:
    arrays = _arrays(planes)
    # each product's operands' planes by role, found at the first rebind (most bindings
    # never meet one)
    roles: list[dict[str, str | None]] | None = None

    def reissue(stream_ptr: int, new: Mapping[str, Any]) -> Callable[[], None]:
        nonlocal roles
        if roles is None:
            roles = [
                {role: _plane_of(view, arrays) for role, view in call.operands.items()}
                for call in launch.calls
            ]
        bound = launch.prepare(stream_ptr)  # the products as bound on the stream's handle
        products = []
        for call, names, first in zip(launch.calls, roles, bound, strict=True):
            operands = {
                role: _moved(view, names[role], new) for role, view in call.operands.items()
            }
            if any(operands[r].ptr % ALIGNED != v.ptr % ALIGNED for r, v in call.operands.items()):
                first.handle.warm(call.params, operands, keep_out=True)  # aligned otherwise
            # the rebind has checked the new planes: each laid out as the plane it
            # replaces, and a written one apart from the others
            products.append(first.rebound(operands, checked=True))

        def enqueue() -> None:
            for product in products:
                product()

        return enqueue

    return ProductSite(label, arrays, written_planes(kernel), reissue)


def _plane_of(view: Any, planes: Mapping[str, Any]) -> str | None:
    """The plane whose memory ``view`` is, or None for an operand of eagle's own."""
    for name, array in planes.items():
        if array.ptr == view.ptr and array.nbytes == view.nbytes:
            return name
    return None


def _moved(view: Any, name: str | None, planes: Mapping[str, Any]) -> Any:
    """The operand ``view`` of plane ``name``, seen the same way in that plane's array in
    ``planes`` (the same view of the new memory); an operand of eagle's own stays.

    The view is the whole plane (:func:`_plane_of`), and the rebind has checked that the
    new plane is laid out as the old one, so the new view takes the old one's layout at
    the new plane's address, as the routed launch views its planes, without
    :meth:`~eagle.arrays.Array.reshape`'s checks.
    """
    if name is None:
        return view
    plane = planes[name]
    return _view(plane, _seen(plane, view.shape))
