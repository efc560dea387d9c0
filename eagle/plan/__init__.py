"""Run hawk kernels: ``eagle.plan.auto(kernel)`` -> :class:`AutoPlan`.

A plan runs on the host when its planes are host arrays (numpy or host
eagle Arrays: the kernel's numpy program, results written into your arrays)
and on the device when they are device arrays (eagle's, torch's, CuPy's...:
the kernel's CUDA C, launched on eagle's stream inside ``with stream:``, else
on the current stream of the framework the planes come from, else on the CUDA
default stream: :func:`eagle.cuda.stream.launch_stream`).
Each side runs on a backend registered by name (it emits the kernel's
program, loads it and binds it to planes): by default ``"numpy"`` on the
host and ``"cuda"`` on the device; ``auto(kernel, backend=name)`` builds a
plan for one backend, which then takes planes on its side only (``"reference"``
interprets a kernel one lane at a time on the host, for debugging).
``plan.bind(**planes)`` prepares everything, so ``bound.launch()`` only
enqueues work and is legal inside a capture; ``bound.capture(stream)``
records it into a graph; ``sequence([bound, ...])`` runs bound launches as
one, so that an adjoint's forked gradient product may run beside the launches
after it. ``plan.run(**planes)`` keeps its last few bindings
and reuses one, on any stream, when the planes have the same addresses,
shapes, strides, dtypes and device; device bindings hold addresses only, and
plans of one kernel built with the same options share them. On the device a
Param given as a number is a kernel argument passed by value (the kernel is compiled for it, see
``hawk.emit.cuda.emit``'s ``values``): a reused binding packs a run's numbers
into its arguments before the launch, which copies them.

Planes are checked by name before anything runs: unknown or missing planes,
mixed residency, dtypes other than float16/bfloat16/float32/float64, wrong
shapes, lane planes of different lengths, non-contiguous arrays, read-only
outputs, an output overlapping another plane, and a Param too large for the
kernel's dtype. A host run is all or
nothing: if it raises, every plane is as it was before.

A table index that depends on the lane alone, never decreasing (a
contraction's ``sample`` of ``hm.split_index``), plus maybe a term of loop
indices (``hawk.emit.checks.LaneCheck``), is checked when the plan binds, for
the bound lane count (and a flat table's length): an index out of range raises
the :class:`hawk.PlaneIndexError` the kernel's own check would, naming its
first lane out of range, from ``bind`` or ``run``, before anything is
compiled, written or launched (on the device too). Every other index is
checked as the kernel runs.

A plan keeps the contraction policy it was built under:
``auto(kernel, contraction="gemm")``, or by default
:func:`hawk.emit.policy.current`. Under ``"gemm"``, a kernel that is one
dense two-operand contraction (``plan.record``, from
:func:`hawk.contraction.recognize`) runs on the device as one cuBLAS product
written straight into its output's lane plane, when its planes share one
dtype and its lanes are the product in row-major order; everything else runs
the kernel's own loop. The product by dtype: bfloat16 and float16 planes on
tensor cores, summed in float32 and rounded once into the output; float64
planes by Dgemm; float32 planes in exact FP32, or in TF32 only for a plan
built with ``math="tf32"`` (or inside ``hawk.emit.policy.using(math="tf32")``),
never silently. The host runs the kernel's own loop unless the plan is built
with ``host_route="gemm"``: then a routed contraction runs on the host as one
numpy product into the output (its adjoint as numpy products added into the
gradient planes). ``route(side, dtype)`` says which, ``reasons`` why the
device does not take the GEMM route, and a bound plan's ``route`` and
``reasons`` what it does with its own planes.
"""

from __future__ import annotations

from eagle.plan._autoplan import AutoPlan, BoundPlan, auto
from eagle.plan._cuda_backend import BLOCK_SIZE
from eagle.plan._sequence import BoundSequence, sequence

__all__ = ["BLOCK_SIZE", "AutoPlan", "BoundPlan", "BoundSequence", "auto", "sequence"]

for _public in (AutoPlan, BoundPlan, BoundSequence, auto, sequence):
    _public.__module__ = __name__
del _public
