"""The operators of the hawk language, one :class:`~hawk._registry.entry.Builtin` each:
arithmetic, comparisons, ``and``/``or``/``not``, the casts ``int()``/``float()`` and the
select ``x if c else y``.

Each entry's numpy and C printers write it as the emitters always have; its derivative
rule gives the gradient of each operand (``//``, ``int()``, the comparisons and the
logic have none).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from hawk._registry import integers
from hawk._registry.entry import INT32, Builtin, COut, Form, HostOut, definition_key
from hawk.kinds import Type

__all__ = ["OPERATORS"]


def _prefix(out: HostOut | COut, node: Any, a: str) -> str:
    return f"({node.op}{a})"


def _infix(out: HostOut | COut, node: Any, a: str, b: str) -> str:
    return f"({a} {node.op} {b})"


def _unary(
    name: str,
    spelling: str,
    syntax: type[ast.AST],
    doc: str,
    evaluate: Callable[[Any], Any],
    host: Callable[..., str] = _prefix,
    c: Callable[..., str] = _prefix,
) -> Builtin:
    return Builtin(
        name,
        Form.UNARY,
        spelling,
        ("x",),
        doc,
        evaluate,
        host,
        c,
        (lambda bar, result, x: (bar,)) if spelling == "+" else lambda bar, result, x: (-bar,),
        syntax=syntax,
    )


_UNARY = (
    _unary("pos", "+", ast.UAdd, "+x, of a number.", operator.pos),
    _unary(
        "neg",
        "-",
        ast.USub,
        "-x, of a number (an int wraps at -2**63).",
        operator.neg,
        integers.negate_host,
        integers.negate_c,
    ),
)

# -- arithmetic ------------------------------------------------------------------------

# C helpers of Python's floor division and remainder, by operand type; the int ones divide
# in 32 bits (unsigned) where both operands allow it, and by -1 without a signed overflow
# (-2**63 // -1 wraps to -2**63, as int64 arithmetic does). The INT32 ones take ints
# written in 32 bits, whose divisor is proved positive (hawk.emit.checks.Ranges.int32): a
# negative a is divided as -1 - (-1 - a), which cannot overflow.
_FLOORDIV: dict[Type | str, str] = {
    INT32: """\
$inline int hawk_floordiv(int a, int b)
{
    return a >= 0 ? (int)((unsigned int)a / (unsigned int)b)
                  : -1 - (int)((unsigned int)(-1 - a) / (unsigned int)b);
}""",
    Type.INT: """\
$inline long long hawk_floordiv(long long a, long long b)
{
    if (0 <= a && a <= 0xffffffffLL && 0 < b && b <= 0xffffffffLL)  // as 32-bit unsigned
        return (long long)((unsigned int)a / (unsigned int)b);
    if (b == -1LL) return (long long)(0ULL - (unsigned long long)a);
    const long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}""",
    Type.REAL: """\
$inline $R hawk_floordiv($R a, $R b)
{
    if (b == 0) return a / b;
    const $R m = fmod$f(a, b);
    $R d = (a - m) / b;
    if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
    if (d == 0) return copysign$f(($R)0, a / b);
    $R q = floor$f(d);
    if (d - q > ($R)0.5) q += 1;
    return q;
}""",
}
_MOD: dict[Type | str, str] = {
    INT32: """\
$inline int hawk_mod(int a, int b)
{
    return a >= 0 ? (int)((unsigned int)a % (unsigned int)b)
                  : b - 1 - (int)((unsigned int)(-1 - a) % (unsigned int)b);
}""",
    Type.INT: """\
$inline long long hawk_mod(long long a, long long b)
{
    if (0 <= a && a <= 0xffffffffLL && 0 < b && b <= 0xffffffffLL)  // as 32-bit unsigned
        return (long long)((unsigned int)a % (unsigned int)b);
    if (b == -1LL) return 0LL;
    const long long r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}""",
    Type.REAL: """\
$inline $R hawk_mod($R a, $R b)
{
    $R m = fmod$f(a, b);
    if (b == 0) return m;
    if (m != 0) { if ((b < 0) != (m < 0)) m += b; }
    else m = copysign$f(($R)0, b);
    return m;
}""",
}


def _c_helper(name: str, definitions: dict[Type | str, str]) -> Callable[..., str]:
    """The C printer of an operator hawk defines as the helper ``hawk_<name>``."""

    def form(out: COut, node: Any, a: str, b: str) -> str:
        key = definition_key(out, node)
        out.helper((name, key), definitions[key])
        return f"hawk_{name}({a}, {b})"

    return form


def _arithmetic(
    name: str,
    spelling: str,
    syntax: type[ast.AST],
    doc: str,
    evaluate: Callable[[Any, Any], Any],
    derivative: Callable[..., tuple[Any, ...]] | None,
    c: Callable[..., str] = _infix,
    host: Callable[..., str] = _infix,
) -> Builtin:
    return Builtin(
        name,
        Form.BINARY,
        spelling,
        ("x", "y"),
        doc,
        evaluate,
        host,
        c,
        derivative,
        syntax=syntax,
    )


def _wrapping(
    name: str,
    spelling: str,
    syntax: type[ast.AST],
    doc: str,
    evaluate: Callable[[Any, Any], Any],
    derivative: Callable[..., tuple[Any, ...]] | None,
    c: Callable[..., str] = _infix,
) -> Builtin:
    """An arithmetic operator whose int value may leave int64 (and then wraps)."""
    return _arithmetic(
        name,
        spelling,
        syntax,
        doc,
        evaluate,
        derivative,
        integers.binary_c(name, c),
        integers.binary_host(_infix),
    )


_ARITHMETIC = (
    _wrapping(
        "add",
        "+",
        ast.Add,
        "x + y (ints wrap).",
        operator.add,
        lambda bar, result, x, y: (bar, bar),
    ),
    _wrapping(
        "sub",
        "-",
        ast.Sub,
        "x - y (ints wrap).",
        operator.sub,
        lambda bar, result, x, y: (bar, -bar),
    ),
    _wrapping(
        "mul",
        "*",
        ast.Mult,
        "x * y (ints wrap).",
        operator.mul,
        lambda bar, result, x, y: (bar * y, bar * x),
    ),
    _arithmetic(
        "truediv",
        "/",
        ast.Div,
        "x / y, of reals (IEEE: a division by zero gives an infinity or NaN).",
        operator.truediv,
        lambda bar, result, x, y: (bar / y, -((bar * x) / (y * y))),
    ),
    _wrapping(
        "floordiv",
        "//",
        ast.FloorDiv,
        "Python's floor division, of ints or reals; an int divided by zero raises "
        "(-2**63 // -1 wraps).",
        operator.floordiv,
        None,
        _c_helper("floordiv", _FLOORDIV),
    ),
    _arithmetic(
        "mod",
        "%",
        ast.Mod,
        "Python's remainder (the divisor's sign), of ints or reals; an int by zero raises.",
        operator.mod,
        lambda bar, result, x, y: (bar, -(bar * (x // y))),  # x % y = x - y * (x // y)
        _c_helper("mod", _MOD),
    ),
)

# -- comparisons and logic -------------------------------------------------------------


def _compare(
    name: str, spelling: str, syntax: type[ast.AST], evaluate: Callable[[Any, Any], bool]
) -> Builtin:
    return Builtin(
        name,
        Form.COMPARE,
        spelling,
        ("x", "y"),
        f"x {spelling} y, of two numbers of one type (a bool).",
        evaluate,
        _infix,
        _infix,
        syntax=syntax,
    )


_COMPARISONS = (
    _compare("lt", "<", ast.Lt, operator.lt),
    _compare("le", "<=", ast.LtE, operator.le),
    _compare("gt", ">", ast.Gt, operator.gt),
    _compare("ge", ">=", ast.GtE, operator.ge),
    _compare("eq", "==", ast.Eq, operator.eq),
    _compare("ne", "!=", ast.NotEq, operator.ne),
)


def _logic_host(out: HostOut, node: Any, a: str, b: str) -> str:
    if node.varying:
        return f"_np.logical_{node.op}({a}, {b})"
    return f"({a} {node.op} {b})"


def _logic(name: str, syntax: type[ast.AST], evaluate: Callable[[Any, Any], Any]) -> Builtin:
    c_op = "&&" if name == "and" else "||"
    return Builtin(
        name,
        Form.LOGIC,
        name,
        ("a", "b"),
        f"a {name} b, of two bools; b is evaluated only where it decides the result.",
        evaluate,
        _logic_host,
        lambda out, node, a, b: f"({a} {c_op} {b})",
        lazy=(1,),
        syntax=syntax,
    )


def _not_host(out: HostOut, node: Any, a: str) -> str:
    return f"_np.logical_not({a})" if node.varying else f"(not {a})"


_LOGIC = (
    _logic("and", ast.And, lambda a, b: a and b),
    _logic("or", ast.Or, lambda a, b: a or b),
    Builtin(
        "not",
        Form.NOT,
        "not",
        ("a",),
        "not a, of a bool.",
        operator.not_,
        _not_host,
        lambda out, node, a: f"(!{a})",
        syntax=ast.Not,
    ),
)

# -- casts and the select --------------------------------------------------------------


def _int_host(out: HostOut, node: Any, a: str) -> str:
    if node.operand.type == Type.INT:
        return a
    site = out.check_site(node, "int")
    if site is None:
        return f"{a}.astype(_np.int64)" if node.varying else f"int({a})"
    return f"_to_int({a}, {site}, {out.lanes()})"


def _cast_c(out: COut, node: Any, a: str) -> str:
    site = out.check_site(node, "int") if node.to == Type.INT else None
    if site is not None:
        return f"hawk_to_int({a}, hawk_rec, {site}, lane)"  # a helper of the checks
    return f"(({out.ctype(node.to)})({a}))"


def _float_host(out: HostOut, node: Any, a: str) -> str:
    # a varying value chosen by a uniform condition may be a Python scalar at run time
    # (the side it took was uniform): asarray takes both. An int goes through int64, which
    # rounds once to the real, as C does (numpy rounds a Python int through float64 first)
    if node.operand.type == Type.INT:
        a = f"_np.asarray({a}, _np.int64)" if node.varying else f"_np.int64({a})"
    return f"_np.asarray({a}, _real)" if node.varying else f"_real({a})"


def _select_host(out: HostOut, node: Any, cond: str, a: str, b: str) -> str:
    return f"_np.where({cond}, {a}, {b})" if node.cond.varying else f"({a} if {cond} else {b})"


_CASTS_AND_SELECT = (
    Builtin(
        "int",
        Form.CAST,
        Type.INT,
        ("x",),
        "int(x): a real toward zero (NaN, +-inf and reals beyond int64 raise); an int unchanged.",
        int,
        _int_host,
        _cast_c,
    ),
    Builtin(
        "float",
        Form.CAST,
        Type.REAL,
        ("x",),
        "float(x): an int as a real (exact below 2**24 in float32).",
        float,
        _float_host,
        _cast_c,
        lambda bar, result, x: (bar,),
    ),
    Builtin(
        "select",
        Form.SELECT,
        "select",
        ("cond", "a", "b"),
        "a if cond else b (both of one type); only the side taken is evaluated.",
        lambda cond, a, b: a if cond else b,
        _select_host,
        lambda out, node, cond, a, b: f"({cond} ? {a} : {b})",
        lambda bar, result, cond, a, b: (None, cond.select(bar, 0.0), cond.select(0.0, bar)),
        lazy=(1, 2),
    ),
)

#: every operator of the hawk language
OPERATORS: tuple[Builtin, ...] = (
    *_UNARY,
    *_ARITHMETIC,
    *_COMPARISONS,
    *_LOGIC,
    *_CASTS_AND_SELECT,
)
