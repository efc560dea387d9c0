"""The ``"cuda"`` backend: a plan's kernel as hawk's CUDA C, launched over device arrays.

emit: :func:`hawk.emit.cuda.emit`, kept per kernel, signature, the Params
passed by value and whether the lane loops may count in 32 bits; load: NVRTC
and the driver (:func:`eagle.cuda.module.load_kernel`), with the kernel's
error record on that device; bind: the arguments packed once
(:class:`~eagle.cuda.module.PackedArgs`), so a launch only enqueues. A
kernel whose adds into a small table are privatised in shared memory
(:mod:`hawk.emit.private`, by the plan's ``adds``) launches with those copies'
dynamic shared memory and a bounded grid: at most :data:`PRIVATE_BLOCKS_PER_SM`
blocks per multiprocessor, as many as the device holds at once, and at most
:func:`hawk.emit.private.blocks_for` (with
``adds="deterministic"``, at most :data:`hawk.emit.private.DETERMINISTIC_BLOCKS`
blocks, and a scratch buffer the binding owns: launches of one binding, or of
graphs captured from it, must not run at the same time). A
recognised contraction under ``contraction="gemm"`` runs as cuBLAS products
instead (:class:`eagle.plan._route.GemmLaunch`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import hawk
from eagle import arrays
from eagle.arrays import Array
from eagle.cuda import _records, module
from eagle.cuda.stream import as_stream_ptr
from eagle.gemm.lowering import Direction
from eagle.plan._backends import (
    Backend,
    Binding,
    KernelPrograms,
    Plan,
    Signature,
    check_lanes,
    plane_dtypes,
)
from eagle.plan._bound import Step
from eagle.plan._planes import Planes
from eagle.plan._route import GemmLaunch
from eagle.plan._sites import kernel_site, product_site
from hawk import ir
from hawk.emit import compute_dtype, cuda, private
from hawk.emit.checks import INT32_LANES, IntOverflow, record_error
from hawk.emit.policy import Policy

__all__ = ["BACKEND", "BLOCK_SIZE", "PRIVATE_BLOCKS_PER_SM", "WIDE_LANES", "CudaBackend", "grid"]

#: threads per block of a kernel launch
BLOCK_SIZE = 256

#: lane count from which each thread runs several lanes (see ``hawk.emit.cuda.UNROLL``)
WIDE_LANES = 1 << 20

#: the most blocks per multiprocessor a launch with privatised tables runs (each block
#: zeroes and flushes its copies once, so fewer, longer blocks flush less)
PRIVATE_BLOCKS_PER_SM = 8

_WARPS = BLOCK_SIZE // 32  # per block: a deterministic block keeps a copy per warp


class CudaBackend(Backend):
    """Device planes through hawk's CUDA C (see the module docstring)."""

    name = "cuda"
    side = "device"

    def __init__(self) -> None:
        # per kernel (going with it): (signature, values, narrow lanes) -> its source
        self._sources: KernelPrograms[cuda.CudaSource] = KernelPrograms("cuda sources")

    def product_reasons(self, policy: Policy) -> tuple[str, ...]:
        return ()

    def emit(
        self,
        kernel: hawk.Kernel,
        signature: Signature,
        *,
        values: frozenset[str] = frozenset(),
        lanes: int = 0,
        int_overflow: IntOverflow = "wrap",
        shared: tuple[private.SharedTable, ...] = (),
        deterministic: bool = False,
    ) -> cuda.CudaSource:
        """The CUDA C for planes of ``signature`` over ``lanes`` lanes, the Params named in
        ``values`` passed by value, the adds into the tables of ``shared`` privatised
        (:func:`hawk.emit.private.choose`), in a fixed order when ``deterministic``. Below
        2**31 lanes it is emitted ``narrow``: the ints proved to fit 32 bits with the
        lane are ``int``."""
        key = (signature, values, lanes < INT32_LANES, int_overflow, shared, deterministic)

        def make() -> cuda.CudaSource:
            return cuda.emit(
                kernel.ir,
                plane_dtypes(kernel, signature),
                values=values,
                narrow=key[2],
                int_overflow=int_overflow,
                shared=shared,
                deterministic=deterministic,
            )

        return self._sources.get(kernel, key, make)

    def load(self, program: Any, device: int | None) -> tuple[module.Kernel, Any]:
        """The loaded kernel and its error record on ``device`` (a failed check is noted
        in the record, :mod:`hawk.emit.checks`)."""
        assert device is not None
        kernel = module.load_kernel(program.source, program.name, device=device)
        record = _records.record_for(
            (program.source, program.name),
            device,
            functools.partial(record_error, program.checks),
        )
        return kernel, record

    def bind(self, plan: Plan, checked: Planes) -> Binding:
        device = checked.device
        assert device is not None
        # A Param given as a number is a kernel argument passed by value (the kernel is
        # compiled for that): packed with the others, as a scalar of the compute dtype
        # (checked to fit it, param_number), and copied by each launch, so a later
        # number (a setter of the packed arguments) never reaches a launch made before.
        values = frozenset(checked.numbers)
        ir_ = plan.kernel.ir
        sizes = {
            p.name: int(checked.values[p.name].shape[0])
            for p in ir_.planes
            if p.is_table and p.axes is None
        }
        dtypes = plane_dtypes(plan.kernel, checked.signature)
        deterministic = plan.policy.adds == "deterministic"
        shared = private.choose(
            ir_,
            dtypes,
            sizes,
            adds=plan.policy.adds,
            lanes=checked.lanes,
            blocks=lambda: module.multiprocessors(device),
            warps=_WARPS,
        )
        source = self.emit(
            plan.kernel,
            checked.signature,
            values=values,
            lanes=checked.lanes,
            int_overflow=plan.policy.int_overflow,
            shared=shared,
            deterministic=deterministic,
        )
        check_lanes(ir_, source.launch_checks, checked)
        kernel, record = self.load(source, device)
        names = [p.name for p in plan.kernel.planes]
        args = [checked.values[name] for name in names]
        lengths = [np.int64(sizes[name]) for name in source.lengths]
        sums = _sums(plan.kernel, source, checked, device)
        blocks, shared_mem, scratch = _private_launch(
            kernel,
            shared,
            sizes,
            blocks=grid(checked.lanes, source.width),
            lanes=checked.lanes,
            deterministic=deterministic,
            device=device,
        )
        # the packed arguments keep the arrays alive (in a capture too)
        packed = module.PackedArgs(
            [*args, np.int64(checked.lanes), *lengths, record, *sums, *scratch]
        )
        setters = {name: packed.setter(names.index(name)) for name in values}

        def enqueue(stream: Any) -> None:
            record.check()  # an earlier launch's failure, once it is recorded
            if not blocks:
                return
            stream_ptr = stream if type(stream) is int else as_stream_ptr(stream, device)
            kernel.launch(blocks, BLOCK_SIZE, packed, stream_ptr, shared_mem)

        label = f"plan {plan.kernel.name!r}"
        site = kernel_site(label, plan.kernel.ir, checked.values, packed) if blocks else None
        planes = tuple(checked.values.values())
        return Binding(Step(enqueue, site=site, planes=planes), setters)

    def bind_products(
        self,
        plan: Plan,
        checked: Planes,
        *,
        direction: Direction = "forward",
        kernel: ir.KernelIR | None = None,
        accumulate: bool = True,
    ) -> tuple[Step, ...]:
        assert plan.record is not None and checked.device is not None
        launch = GemmLaunch(
            plan,
            plan.record,
            checked.values,
            checked.device,
            direction=direction,
            math=plan.policy.math,
            accumulate=accumulate,
        )
        name = plan.kernel.name
        label = f"plan {name!r}" if direction == "forward" else f"the adjoint of {name!r}"
        bound_ir = plan.kernel.ir if kernel is None else kernel
        return _product_steps(label, bound_ir, launch.mover(), launch, checked.values)


def _product_steps(
    label: str,
    kernel: ir.KernelIR,
    mover: Callable[[Mapping[str, Any], int], GemmLaunch],
    launch: GemmLaunch,
    planes: Mapping[str, Any],
) -> tuple[Step, ...]:
    """The steps that enqueue ``launch``'s products over ``planes``: one step for one
    product; for several (an adjoint's gradient products), a step each, which a capture may
    run on branches of their own. Each step's :attr:`~Step.move` makes them all over other
    planes laid out alike, through ``mover``."""
    move = functools.partial(_moved_product_steps, label, kernel, mover)
    if len(launch.calls) == 1:
        site = product_site(label, kernel, planes, launch)
        return (Step(launch, launch.prepare, site=site, planes=tuple(planes.values()), move=move),)
    return tuple(
        Step(
            part,
            part.prepare,
            site=product_site(f"{label} (product {part.index})", kernel, planes, part),
            planes=launch.planes_of(part.index, planes, ("a", "b", "out")),
            fork=part.ready,
            writes=launch.planes_of(part.index, planes, ("out",)),
            move=move,
        )
        for part in launch.parts()
    )


def _moved_product_steps(
    label: str,
    kernel: ir.KernelIR,
    mover: Callable[[Mapping[str, Any], int], GemmLaunch],
    planes: Mapping[str, Any],
    stream: int,
) -> tuple[Step, ...]:
    return _product_steps(label, kernel, mover, mover(planes, stream), planes)


def _private_launch(
    kernel: module.Kernel,
    shared: tuple[private.SharedTable, ...],
    sizes: dict[str, int],
    *,
    blocks: int,
    lanes: int,
    deterministic: bool,
    device: int,
) -> tuple[int, int, list[Any]]:
    """The blocks (from ``blocks``, the unbounded grid), the dynamic shared memory and the
    arguments after the error record (a deterministic kernel's scratch buffer) of a launch
    over ``lanes`` lanes whose adds into ``shared`` are privatised."""
    if not shared or not blocks:
        return blocks, 0, []
    blocks = min(blocks, private.blocks_for(shared, sizes, lanes))
    if deterministic:  # a grid fixed by the lane count alone
        blocks = min(blocks, private.DETERMINISTIC_BLOCKS)
        size = private.scratch_bytes(shared, sizes, blocks)
        # zeroed: uploaded, the stream synchronised (the last block zeroes its count again)
        scratch = arrays.asarray(np.zeros(-(-size // 8), np.int64), device=f"cuda:{device}")
        return blocks, private.shared_bytes(shared, sizes, _WARPS), [scratch]
    shared_mem = private.shared_bytes(shared, sizes)
    # a bounded grid: every block resident at once, each running many lanes
    resident = kernel.resident_blocks(BLOCK_SIZE, shared_mem)
    per_sm = PRIVATE_BLOCKS_PER_SM * module.multiprocessors(device)
    return min(blocks, max(1, min(resident, per_sm))), shared_mem, []


def grid(lanes: int, width: int = 1) -> int:
    """Blocks for ``lanes``: one lane per thread, or, once there are enough lanes to
    fill the device that way, :data:`hawk.emit.cuda.UNROLL` lanes per thread (each thread
    then keeps several independent loads in flight) and at least one vector group of
    ``width`` lanes (``CudaSource.width``: 8 for 16-bit planes), so no thread idles."""
    per_thread = max(cuda.UNROLL, width) if lanes >= WIDE_LANES else 1
    return -(-lanes // (BLOCK_SIZE * per_thread))


BACKEND = CudaBackend()


def _sums(
    kernel: hawk.Kernel, source: cuda.CudaSource, checked: Planes, device: int
) -> list[Array]:
    """The scratch of a kernel that adds into 16-bit tables (``CudaSource.sums``): zeroed
    sums in the compute type for each, then the counter of finished blocks. They belong
    to the binding, whose launches run one after another (on one stream, or replays of
    one graph), each leaving them zero."""
    if not source.sums:
        return []
    real = compute_dtype(hawk.emit.plane_dtypes(kernel.ir, plane_dtypes(kernel, checked.signature)))
    where = f"cuda:{device}"
    scratch = [
        arrays.zeros(int(np.prod(checked.values[name].shape)), real, where) for name in source.sums
    ]
    return [*scratch, arrays.zeros(1, "int32", where)]
