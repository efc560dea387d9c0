"""The ``hawk.math`` functions, one :class:`~hawk._registry.entry.Builtin` each.

:mod:`hawk.math` makes its public functions from these entries, and the tracer, both
emitters and the adjoint read them, so a function is added by adding one entry here.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from hawk._registry import integers
from hawk._registry.entry import (
    INT32,
    Builtin,
    COut,
    DebugCall,
    Form,
    HostOut,
    function,
    numpy,
    own,
)
from hawk.errors import HawkOverflowError, HawkValueError
from hawk.kinds import Type

__all__ = ["DEBUG_CALLS", "FUNCTIONS"]


def _real(name: str, doc: str, derivative: Any) -> Builtin:
    """A one-argument real function that numpy and C's math library both have."""
    return function(
        name, ("x",), doc, host=numpy(name), c={Type.REAL: name + "$f"}, derivative=derivative
    )


def _select(name: str, test: str) -> Builtin:
    """``minimum`` / ``maximum``: NaN when either argument is NaN, like numpy."""
    pick = min if name == "minimum" else max
    return function(
        name,
        ("x", "y"),
        f"The {'smaller' if name == 'minimum' else 'larger'} of two values (NaN if either is "
        "NaN). At a tie its gradient goes to y, the second (torch's splits it in halves).",
        host=numpy(name),
        c={Type.REAL: f"hawk_{name}", Type.INT: f"hawk_{name}"},
        derivative=lambda bar, result, x, y: (
            _first(x, y, test).select(bar, 0.0),
            _first(x, y, test).select(0.0, bar),
        ),
        bounds=lambda x, y: (pick(x[0], y[0]), pick(x[1], y[1])),
        definitions={
            Type.INT: f"$inline long long hawk_{name}(long long a, long long b)"
            f"\n{{\n    return a {test} b ? a : b;\n}}",
            INT32: f"$inline int hawk_{name}(int a, int b)\n{{\n    return a {test} b ? a : b;\n}}",
            Type.REAL: f"$inline $R hawk_{name}($R a, $R b)\n{{\n"
            f"    return (a {test} b || a != a) ? a : b;\n}}",
        },
    )


def _first(x: Any, y: Any, test: str) -> Any:
    return x < y if test == "<" else x > y


# an int's absolute value, -2**63 wrapping to itself (C's llabs leaves it undefined)
_ABS = """\
$inline long long hawk_abs(long long a)
{
    return a < 0LL ? (long long)(0ULL - (unsigned long long)a) : a;
}"""


def _abs_host(out: HostOut, node: Any, x: str) -> str:
    if node.type == Type.INT:
        x = integers.abs_operand_host(out, node, x)
    return f"_np.abs({x})"


def _abs_c(out: COut, node: Any, x: str) -> str:
    if node.type == Type.INT:
        out.helper(("abs", "int"), _ABS)
        return f"hawk_abs({integers.abs_operand_c(out, node, x)})"
    return f"fabs{out.suffix}({x})"


def _pow_derivative(bar: Any, result: Any, x: Any, y: Any) -> tuple[Any, Any]:
    """The partials of ``x ** y``, zero where the power does not change (as torch's): in
    x where y is 0 (``x ** 0`` is 1, and ``0 * 0 ** -1`` would be NaN), in y where x is 0
    and y is not negative (``0 ** y`` is 0, and ``0 * log(0)`` would be NaN). A NaN
    operand keeps its NaN partials (no comparison with it holds)."""
    by_x = bar * (y * x.call("pow", y - 1.0))
    by_y = bar * (result * x.call("log"))
    return (
        (y >= 0.0).select((y <= 0.0).select(0.0, by_x), by_x),
        (x >= 0.0).select((x <= 0.0).select((y >= 0.0).select(0.0, by_y), by_y), by_y),
    )


def _power(x: Any, y: Any) -> Any:
    """``x ** y`` as ``numpy.power`` computes it, except where the exponent is 0.5: numpy
    takes ``sqrt`` there, which gives -0 for x = -0 and NaN for x = -inf, where C's ``pow``
    (the device's) and Python give +0 and +inf, ``abs(x)``."""
    result = np.power(x, y)
    if isinstance(y, float | np.floating) and y != 0.5:  # (one exponent: nothing to mend)
        return result
    half = np.equal(y, 0.5)
    if not np.any(half):
        return result
    fix = half & ((np.equal(x, 0) & np.signbit(x)) | np.equal(x, -np.inf))
    if np.ndim(result) == 0:
        return np.abs(x) if fix else result
    return np.where(fix, np.abs(x), result) if np.any(fix) else result


def _pow_host(out: HostOut, node: Any, x: str, y: str) -> str:
    if node.type == Type.INT:
        return integers.int_pow_host(out, node, x, y)
    return f"{out.define('_hawk_power', _power)}({x}, {y})"


def _pow_c(out: COut, node: Any, x: str, y: str) -> str:
    if node.type == Type.INT:
        return integers.int_pow_c(out, node, x, y)
    return f"pow{out.suffix}({x}, {y})"


# -- erf and erfc ----------------------------------------------------------------------
# numpy has neither, so their host forms are hawk's own (the device's are CUDA's). On
# each interval of a = |x| a polynomial in w = v - mid (v the interval's variable, mid
# its middle) approximates a smooth function; it interpolates the function at the
# Chebyshev points of the interval, worked out in 50-digit arithmetic by
# tools/erf_coefficients.py:
#
# * erf(x) = x * E(x**2) for a < 1, E(t) = erf(sqrt(t)) / sqrt(t), an entire function;
# * erfc(a) = exp(-a**2) * G(a), G(a) = erfc(a) * exp(a**2) (near 1 / (a sqrt(pi)); a
#   scaled Faddeeva function, entire), through 1 / G(a) on intervals of [0.5, 6), and
#   through a * G(a) in v = 1 / a from 4 to 28 (erfc(28) is below the least double);
# * erf(a) = 1 - erfc(a) from a = 1, where erfc(a) < 0.16 turns its relative error of a
#   few ulps into an absolute one below 1e-16, and 1 - erfc(a) rounds to 1 from a = 6;
#   erf's fits of G need only that absolute accuracy, so theirs are coarser further out;
# * erfc(x) = 1 - erf(x) for a < 0.5 (erfc > 0.47) and 2 - erfc(a) for x <= -0.5; from
#   a = 2, exp(-a**2) is exp(-h**2) * exp(-(a - h)(a + h)), h = a with its low 32 bits
#   cleared (so h**2 is exact), as a rounded a**2 would cost a**2 / 2 ulps.
#
# Everything is computed in float64, in blocks that stay in the processor's cache.


class _Fit(NamedTuple):
    """A polynomial in ``w = v - mid``: its coefficients, lowest power first."""

    mid: float
    coefficients: tuple[float, ...]

    def __call__(self, v: np.ndarray) -> np.ndarray:
        w = v - self.mid
        total = w * self.coefficients[-1]
        total += self.coefficients[-2]
        for coefficient in self.coefficients[-3::-1]:
            total *= w
            total += coefficient
        return total


# degree 11: largest relative error 8.1e-18, 4.9e-17 with float64 coefficients
_ERF_NEAR = _Fit(
    0.5,
    (
        0.9654687386698673,
        -0.2810721780454342,
        0.07940998675593687,
        -0.018283884489152684,
        0.003480274496570158,
        -0.0005611894221209664,
        7.829649688379886e-05,
        -9.614808641390195e-06,
        1.0536323840680666e-06,
        -1.0420387617195658e-07,
        9.432320191926508e-09,
        -7.795898827002142e-10,
    ),
)
# degree 13: largest relative error 4.9e-17, 1.1e-16 with float64 coefficients
_ERF_TAIL_1 = _Fit(
    1.5,
    (
        3.109593746587243,
        1.5821637914721947,
        0.0686581462685997,
        -0.021293361528106805,
        0.005570896397732536,
        -0.0011483549758717238,
        0.00013941744667270913,
        1.8765595565151822e-05,
        -1.890918460412284e-05,
        7.255845954977002e-06,
        -1.8816943212516928e-06,
        2.9759604228859017e-07,
        2.4151963511402605e-08,
        -3.306956389118337e-08,
    ),
)
# degree 11: largest relative error 3.4e-16, 4.4e-16 with float64 coefficients
_ERF_TAIL_2 = _Fit(
    2.5,
    (
        4.74368980487683,
        1.6730080828304466,
        0.028868149257891676,
        -0.007676415737258313,
        0.0018652088648304982,
        -0.0004096006459531724,
        7.913170560678131e-05,
        -1.2541695964200296e-05,
        1.2461034293049821e-06,
        1.1130348924166716e-07,
        -1.1395299586938217e-07,
        3.888003589662195e-08,
    ),
)
# degree 8: largest relative error 1.2e-13, 1.2e-13 with float64 coefficients
_ERF_TAIL_3 = _Fit(
    3.5,
    (
        6.439413098230434,
        1.7135251747641138,
        0.013893357057478512,
        -0.0030971415400232565,
        0.0006526963247885112,
        -0.00012966227170593014,
        2.412843398871995e-05,
        -4.199349858866549e-06,
        6.477840139017313e-07,
    ),
)
# degree 7: largest relative error 1.2e-10, 1.2e-10 with float64 coefficients
_ERF_TAIL_4 = _Fit(
    5.0,
    (
        9.033045230900122,
        1.740668311840343,
        0.005723231214139336,
        -0.0009977594853702513,
        0.0001683196099333592,
        -2.7505903752547993e-05,
        4.544977983808333e-06,
        -6.893281748345131e-07,
    ),
)
# degree 17: largest relative error 9.3e-18, 4.0e-17 with float64 coefficients
_ERFC_TAIL_1 = _Fit(
    1.25,
    (
        2.718699556963346,
        1.5434708286936463,
        0.08690432162115998,
        -0.027621784729130003,
        0.007120616050696283,
        -0.0013122397222885282,
        6.229450311907387e-05,
        7.678892469982676e-05,
        -4.120850564888657e-05,
        1.2812705602108677e-05,
        -2.445090684453415e-06,
        1.726227323264821e-08,
        2.134734182613693e-07,
        -1.0451772214611176e-07,
        3.1609734724374574e-08,
        -5.4311744405781565e-09,
        -1.052699657965291e-09,
        8.198071035419175e-10,
    ),
)
# degree 15: largest relative error 1.5e-17, 4.0e-17 with float64 coefficients
_ERFC_TAIL_2 = _Fit(
    3.0,
    (
        5.586556250616818,
        1.6969370699489361,
        0.019705854233311483,
        -0.004797360594679037,
        0.0010886949219634735,
        -0.0002290814599970322,
        4.4141416932184296e-05,
        -7.581769708690456e-06,
        1.0861580757065745e-06,
        -1.0156397472515455e-07,
        -6.1910099251298095e-09,
        6.491567917589724e-09,
        -2.163345978805112e-09,
        5.459683956556337e-10,
        -1.2268140400185208e-10,
        1.9641284657755522e-11,
    ),
)
# degree 15: largest relative error 1.1e-17, 5.7e-17 with float64 coefficients
_ERFC_FAR = _Fit(
    0.14285714285714285,
    (
        0.5586003803040706,
        -0.0760092369600675,
        -0.23612104015528812,
        0.19043237503516364,
        0.18372719210359403,
        -0.486105636446776,
        0.10037100395769136,
        1.0900110401663208,
        -1.695955321277714,
        -1.0267211475629798,
        7.5255336669191,
        -8.757250249461752,
        -15.637081505993045,
        67.62785985999679,
        -34.051091177812246,
        -213.62229458884372,
    ),
)

#: elements computed at once: the fastest of 2**14 to 2**16 on a 2-core x86 host, where
#: a block's arrays stay in the caches (benchmarks/bench_erf.py)
_BLOCK = 1 << 16
#: the high 32 bits of a float64: a number with only those has an exact square
_HIGH = np.uint64(0xFFFFFFFF00000000)


def _pieces(a: np.ndarray, edges: tuple[float, ...]) -> list[np.ndarray]:
    """The positions of ``a`` below ``edges[0]`` and in each [edges[k - 1], edges[k])
    (none of a NaN)."""
    below = [a < edge for edge in edges]
    pieces = [np.flatnonzero(below[0])]
    pieces += [np.flatnonzero(below[k] & ~below[k - 1]) for k in range(1, len(edges))]
    return pieces


def _erf_block(x: np.ndarray, out: np.ndarray, a: np.ndarray) -> None:
    """``out = erf(x)``, ``a`` a scratch array of their size."""
    np.abs(x, out=a)
    np.sign(a, out=out)  # 1 from 6 on, NaN for NaN
    near, *tail = _pieces(a, (1.0, 2.0, 3.0, 4.0, 6.0))
    b = a.take(near)
    out[near] = b * _ERF_NEAR(b * b)
    for at, fit in zip(tail, (_ERF_TAIL_1, _ERF_TAIL_2, _ERF_TAIL_3, _ERF_TAIL_4), strict=True):
        b = a.take(at)
        erfc = np.exp(-(b * b))
        erfc /= fit(b)
        out[at] = 1.0 - erfc
    np.copysign(out, x, out=out)


def _exp_minus_square(a: np.ndarray) -> np.ndarray:
    """``exp(-a**2)`` to a few ulps at any ``a`` (not only where ``a**2`` is exact)."""
    h = (a.view(np.uint64) & _HIGH).view(np.float64)
    result = np.exp(-(h * h))
    result *= np.exp(-((a - h) * (a + h)))
    return result


def _erfc_block(x: np.ndarray, out: np.ndarray, a: np.ndarray) -> None:
    """``out = erfc(x)``, ``a`` a scratch array of their size."""
    np.abs(x, out=a)
    np.sign(x, out=out)
    np.subtract(1.0, out, out=out)  # 0 from 28 on, 2 from -28 down, NaN for NaN
    near, half, two, far = _pieces(a, (0.5, 2.0, 4.0, 28.0))
    b = x.take(near)
    out[near] = 1.0 - b * _ERF_NEAR(b * b)
    b = a.take(half)
    erfc = np.exp(-(b * b))
    erfc /= _ERFC_TAIL_1(b)
    out[half] = np.where(x.take(half) < 0.0, 2.0 - erfc, erfc)
    b = a.take(two)
    erfc = _exp_minus_square(b)
    erfc /= _ERFC_TAIL_2(b)
    out[two] = np.where(x.take(two) < 0.0, 2.0 - erfc, erfc)
    b = a.take(far)
    v = 1.0 / b
    erfc = _exp_minus_square(b)
    erfc *= v
    erfc *= _ERFC_FAR(v)
    out[far] = np.where(x.take(far) < 0.0, 2.0 - erfc, erfc)


def _blocks(block: Callable[[np.ndarray, np.ndarray, np.ndarray], None], x: Any) -> Any:
    """``block(x, out, scratch)`` over ``x`` (a number or an array of any shape), in
    float64, :data:`_BLOCK` elements at a time (one scratch array serves every block); a
    real ``x`` gives its own dtype back, another float64."""
    array = np.asarray(x)
    dtype = array.dtype if array.dtype.kind == "f" else np.dtype(np.float64)
    values = np.ascontiguousarray(array, np.float64).reshape(-1)
    out = np.empty(values.shape, np.float64)
    scratch = np.empty(min(values.size, _BLOCK), np.float64)
    for start in range(0, values.size, _BLOCK):
        part = values[start : start + _BLOCK]
        block(part, out[start : start + _BLOCK], scratch[: part.size])
    result = out.reshape(array.shape).astype(dtype, copy=False)
    return result[()] if result.ndim == 0 else result


def _erf(x: Any) -> Any:
    """erf over numpy arrays, within 2e-16 of the exact value in float64."""
    return _blocks(_erf_block, x)


def _erfc(x: Any) -> Any:
    """erfc over numpy arrays, within a few ulps of the exact value in float64 while it is
    a normal number (x below 26.5; 0 from 28 on)."""
    return _blocks(_erfc_block, x)


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


# -- floor -----------------------------------------------------------------------------
# An int from a real, checked as int() is: NaN, +-inf and reals beyond int64 raise where
# the kernel makes its checks (HawkValueError, HawkOverflowError), naming the lane. A
# kernel emitted without checks gives hawk.emit.checks.INT_INVALID (the least int64) there.


def floor_unchecked(x: Any) -> Any:
    """The greatest int at most ``x``, for a number or a numpy array (int64); NaN, +-inf
    and reals beyond int64 give the least int64 (a kernel emitted without checks)."""
    return _as_ints(np.floor(np.asarray(x, np.float64)))


def _as_ints(floors: np.ndarray) -> Any:
    """Whole reals as int64 (an int for a 0-d array), those beyond int64 (NaN too) as
    the least int64."""
    with np.errstate(invalid="ignore"):
        result = np.where(np.abs(floors) < 2.0**63, floors, np.iinfo(np.int64).min)
    result = result.astype(np.int64)
    return int(result) if result.ndim == 0 else result


def _floor(x: Any) -> Any:
    """The greatest int at most ``x``, for a number or a numpy array (int64).

    Raises:
        HawkValueError: ``x`` is (or holds) NaN.
        HawkOverflowError: ``x`` is (or holds) an infinity or a real beyond int64.
    """
    values = np.asarray(x, np.float64)
    floors = np.floor(values)
    with np.errstate(invalid="ignore"):
        invalid = ~((floors >= -(2.0**63)) & (floors < 2.0**63))  # NaN too
    if invalid.any():
        first = values[invalid].flat[0].item()
        kind = HawkValueError if math.isnan(first) else HawkOverflowError
        raise kind(f"hm.floor() of {first!r}: an int is finite and within int64")
    return _as_ints(floors)


def _floor_host(out: HostOut, node: Any, a: str) -> str:
    site = out.check_site(node, "int")
    if site is None:
        return f"_floor_int({a})"
    return f"_to_int(_np.floor({a}), {site}, {out.lanes()})"


_FLOOR_INT = """\
$inline long long hawk_floor_int(double f)
{
    // floor of a real as an int, unchecked: NaN, +-inf and beyond int64 give INT_INVALID
    return fabs(f) < 9223372036854775808.0 ? (long long)f : (long long)(1ULL << 63);
}"""


def _floor_c(out: COut, node: Any, a: str) -> str:
    floor = f"floor{out.suffix}({a})"
    site = out.check_site(node, "int")
    if site is not None:
        return f"hawk_to_int({floor}, hawk_rec, {site}, lane)"  # a helper of the checks
    out.helper(("floor", "int"), _FLOOR_INT)
    return f"hawk_floor_int((double){floor})"


def _piecewise_constant(bar: Any, result: Any, x: Any) -> tuple[None]:
    """The derivative of a step function where it has one: zero (it sends no gradient)."""
    return (None,)


_FLOOR = Builtin(
    "floor",
    Form.CALL,
    "floor",
    ("x",),
    "The greatest int at most x, an int usable in a table address (NaN, +-inf and reals "
    "beyond int64 raise, as int() does). Its derivative is "
    "zero: hawk.diff takes an address through floor as piecewise constant, so a gradient "
    "flows through the values computed from x, never through the address.",
    _floor,
    _floor_host,
    _floor_c,
    _piecewise_constant,
    result=Type.INT,
)


#: every ``hawk.math`` function
FUNCTIONS: tuple[Builtin, ...] = (
    _real("exp", "e ** x.", lambda bar, result, x: (bar * result,)),
    _real("log", "The natural logarithm.", lambda bar, result, x: (bar / x,)),
    _real("sqrt", "The square root.", lambda bar, result, x: (bar * 0.5 / result,)),
    _real("sin", "The sine (radians).", lambda bar, result, x: (bar * x.call("cos"),)),
    _real("cos", "The cosine (radians).", lambda bar, result, x: (-(bar * x.call("sin")),)),
    _real(
        "tanh",
        "The hyperbolic tangent.",
        lambda bar, result, x: (bar * (1.0 - result * result),),
    ),
    Builtin(
        "abs",
        Form.CALL,
        "abs",
        ("x",),
        "The absolute value (int for an int; hm.abs(-2**63) wraps to -2**63, or is "
        "checked, as the int operators are).",
        np.abs,
        _abs_host,
        _abs_c,
        lambda bar, result, x: ((x > 0.0).select(bar, (x < 0.0).select(-bar, 0.0)),),
        keeps_int=True,
    ),
    _select("minimum", "<"),
    _select("maximum", ">"),
    Builtin(
        "pow",
        Form.CALL,
        "pow",
        ("x", "y"),
        "x ** y (also written ``x ** y`` in a kernel): of reals, or of ints exactly "
        "(modulo 2**64). An int to a negative constant power is a real, as in Python; a "
        "negative int exponent known only as the kernel runs raises.",
        _power,
        _pow_host,
        _pow_c,
        _pow_derivative,
        keeps_int=True,
    ),
    function(
        "erf",
        ("x",),
        "The error function, 2 / sqrt(pi) times the integral of exp(-t**2) from 0 to x.",
        host=own(_erf),
        c={Type.REAL: "erf$f"},
        derivative=lambda bar, result, x: (bar * (_TWO_OVER_SQRT_PI * (-(x * x)).call("exp")),),
    ),
    function(
        "erfc",
        ("x",),
        "The complementary error function, 1 - erf(x), accurate where erf(x) is near 1.",
        host=own(_erfc),
        c={Type.REAL: "erfc$f"},
        derivative=lambda bar, result, x: (-(bar * (_TWO_OVER_SQRT_PI * (-(x * x)).call("exp"))),),
    ),
    _FLOOR,
)


# -- debugging calls -------------------------------------------------------------------


def _print_lane(lane: int, values: tuple[Any, ...], scope: Mapping[str, Any]) -> None:
    print(f"lane {lane}:", *values)


def _break_lane(lane: int, values: tuple[Any, ...], scope: Mapping[str, Any]) -> None:
    # the debugger's frame is the exec's: the lane and the kernel's names are its locals
    namespace = {"lane": lane, **scope}
    exec(compile("breakpoint()", "<hawk lane>", "exec"), {"__builtins__": builtins}, namespace)


#: every debugging call, by name
DEBUG_CALLS: dict[str, DebugCall] = {
    call.name: call
    for call in (
        DebugCall(
            "debug_print",
            "Print the values (and texts) given, per lane with its index, on the reference "
            "backend (``eagle.plan.auto(kernel, backend='reference')``); compiled out on "
            "the others. Outside a kernel, print them.",
            _print_lane,
            print,
        ),
        DebugCall(
            "breakpoint",
            "Stop in the debugger (``breakpoint()``) at this point of each lane on the "
            "reference backend, with ``lane`` and the kernel's names as local variables; "
            "compiled out on the other backends. Outside a kernel, call ``breakpoint()``.",
            _break_lane,
            builtins.breakpoint,
            takes_values=False,
        ),
    )
}
