"""hawk — a small kernel language whose functions run once per lane.

A restricted Python function becomes an IR (:mod:`hawk.ir`), emitted as
vectorised numpy for the host (:mod:`hawk.emit.host`) and as CUDA C for the
device (:mod:`hawk.emit.cuda`). hawk never touches a device: run kernels
with ``eagle.plan.auto(kernel)``::

    import hawk

    @hawk.kernel
    def axpy(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
        y = a * x + y

    print(axpy.ir)

hawk's compiler API, the modules a runtime such as eagle builds on, is the IR
(:mod:`hawk.ir`), the emitters (:mod:`hawk.emit.host`, :mod:`hawk.emit.cuda`, the
per-lane interpreter :mod:`hawk.emit.reference`, :mod:`hawk.emit.checks`, the routing
policy :mod:`hawk.emit.policy` and the dtypes they share), contraction recognition
(:mod:`hawk.contraction`) with its :mod:`hawk.records`, and reverse mode
(:mod:`hawk.diff`), beside the user's surface: this package, :mod:`hawk.math`, and the
declarations, errors, kinds and tracer behind them. Every other module is private: its
name starts with ``_``.
"""

from hawk import math
from hawk._version import __version__ as __version__
from hawk.decl import Mutable, Param, Scalar, Table
from hawk.errors import AdjointCostWarning, HawkError, PlaneIndexError
from hawk.trace import Kernel, kernel

__all__ = [
    "AdjointCostWarning",
    "HawkError",
    "Kernel",
    "Mutable",
    "Param",
    "PlaneIndexError",
    "Scalar",
    "Table",
    "kernel",
    "math",
]
