"""Adjoints of plans: ``eagle.diff.reverse(plan)`` -> :class:`AdjointPlan`.

The adjoint of a plan runs the reverse mode of its kernel
(:func:`hawk.diff.vjp`) over planes you pass by name, like the plan itself:

* the primal's inputs, params and tables (the values the forward launch
  read; the adjoint recomputes everything else from them, so it never takes
  the primal's outputs);
* ``<out>_bar``, the cotangent of each output;
* the gradient planes you want, which it **adds into**: ``<in>_bar`` for an
  input, param or table (``<out>_in_bar`` for the value an output held before
  the launch, when the kernel reads it first). A gradient plane you do not
  pass is not computed: the adjoint is specialised to the ones you pass.

``reverse(plan, accumulate=False)`` writes the gradients instead, whatever
the planes held, so they need no zeroing before each step: the routed
products run with beta = 0 (the plane is not read), a loop adjoint stores
its per-lane gradients, and the table and param gradients that several lanes
add to are zeroed first (a fill, legal inside a capture).

::

    plan = eagle.plan.auto(contract)
    plan.run(w=w, f=f, y=y)
    grad = eagle.diff.reverse(plan)
    grad.run(w=w, f=f, y_bar=y_bar, w_bar=w_bar)     # w_bar += dL/dw; f_bar not computed

``bind`` prepares a launch (legal inside a capture) and ``capture`` records
it, as for :class:`eagle.plan.BoundPlan`; a forward and its adjoint can be
captured into one graph. ``reverse([plan1, plan2])`` reverses a sequence of
launches into one :class:`AdjointSequence` that runs their adjoints in
reverse order; pass the same array as a later launch's gradient plane and an
earlier launch's cotangent to chain them, and the same gradient plane to
several launches to sum their gradients (with ``accumulate=False`` the first
adjoint to reach a plane writes it and the later ones add).

**Routes.** :meth:`AdjointPlan.route` is the one routing decision. When the
primal plan takes the GEMM route (planes of one dtype, lanes that are the
product), so does its adjoint: the gradient products of
``lower_dense_gemm(record, direction="adjoint")`` over your own planes, one
per gradient plane you pass, issued with beta = 1 so they add into it (a
table read by several launches gets the sum of their gradients). They take
the primal's dtype and policy: bfloat16 and float16 gradient planes are
summed in float32 (the old gradient included) and rounded once, float64 ones
by Dgemm, float32 ones in FP32 or, for a plan built with ``math="tf32"``,
TF32. On the host the adjoint routes only when the primal was built with
``host_route="gemm"`` (numpy products). Everything else — a primal that runs
its loop, planes of mixed dtypes — runs the adjoint kernel's own loop, and
:attr:`AdjointPlan.reasons` says why.
"""

from __future__ import annotations

from eagle.plan._reverse import AdjointPlan, AdjointSequence, BoundAdjoint, reverse

__all__ = ["AdjointPlan", "AdjointSequence", "BoundAdjoint", "reverse"]

for _public in (AdjointPlan, AdjointSequence, BoundAdjoint, reverse):
    _public.__module__ = __name__
del _public
