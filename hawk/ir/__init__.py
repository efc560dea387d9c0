"""hawk's IR: a small typed, structured form of one kernel.

A kernel is a list of statements run once per lane. Values are typed
:class:`~hawk.kinds.Type` ``INT`` (64-bit), ``REAL`` (the kernel's float
type, fixed when it is emitted for concrete dtypes) or ``BOOL``, and are either *uniform* (the same
on every lane) or *varying*. Every assignment makes a new variable (each
:class:`Var` is assigned once), so a pass can read a value's definition
without tracking reassignment. Control flow is structured:

* :class:`Loop` iterates a constant ``range``; each variable the body
  reassigns is a :class:`Carry` — the same :class:`Var` holds the value on
  entry to every iteration and, after the loop, the final value.
* :class:`If` runs one of two blocks; each variable either block assigns is a
  :class:`Merge` — a select of the two blocks' values by the condition.

Outputs are written by :class:`Store` (a lane's value of a
``Mutable[Scalar]``, once, at the end of the kernel) and :class:`Accumulate`
(an add into a ``Mutable[Table]`` element; atomic on the device).

:func:`walk` is the one traversal, :func:`map_children` the one rewrite of an
expression's operands and :class:`Builder` the one way to collect blocks;
``str(kernel_ir)`` prints a kernel. The package's modules: ``planes``,
``expr`` (values and expressions), ``stmt`` (statements, the kernel,
``walk``), ``build``, ``printing`` and ``rules`` (the rule tables every pass and
emitter dispatches through, :class:`Rules`).
"""

from hawk.errors import HawkError
from hawk.ir import printing as printing  # fills in the nodes' text form (TEXT_FORMS)
from hawk.ir.build import Builder, map_children
from hawk.ir.expr import (
    ARITHMETIC,
    COMPARISONS,
    EXPRESSIONS,
    OPERATIONS,
    Binary,
    Call,
    Cast,
    Compare,
    Const,
    Expr,
    Lane,
    Load,
    Logic,
    Not,
    Operation,
    Read,
    Ref,
    Select,
    Unary,
    Var,
)
from hawk.ir.planes import Plane
from hawk.ir.rules import TABLES, Rules
from hawk.ir.stmt import (
    STATEMENTS,
    Accumulate,
    Carry,
    Debug,
    If,
    KernelIR,
    Let,
    Loop,
    Merge,
    Stmt,
    Store,
    walk,
    without_debug,
)
from hawk.kinds import PlaneKind, Type

__all__ = [
    "ARITHMETIC",
    "COMPARISONS",
    "EXPRESSIONS",
    "OPERATIONS",
    "STATEMENTS",
    "TABLES",
    "Accumulate",
    "Binary",
    "Builder",
    "Call",
    "Carry",
    "Cast",
    "Compare",
    "Const",
    "Debug",
    "Expr",
    "HawkError",
    "If",
    "KernelIR",
    "Lane",
    "Let",
    "Load",
    "Logic",
    "Loop",
    "Merge",
    "Not",
    "Operation",
    "Plane",
    "PlaneKind",
    "Read",
    "Ref",
    "Rules",
    "Select",
    "Stmt",
    "Store",
    "Type",
    "Unary",
    "Var",
    "map_children",
    "walk",
    "without_debug",
]
