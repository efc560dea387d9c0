"""int64 arithmetic in the hawk language: the printers of the int operations that may
leave int64, and of the int operations that check their operands.

hawk's ints are int64 and wrap two's complement, on every backend: ``+``, ``-``, ``*``,
unary ``-``, ``//`` (at ``-2**63 // -1``), ``**`` and ``abs`` (at ``-2**63``) give their
value modulo ``2**64``.
An emitter asks its ``out`` whether an operation may leave int64 at all
(``out.wraps(node)``, from what it proves of the operands); only such an operation is
written in wrapping form:

* in C, through unsigned 64-bit arithmetic (a signed overflow is undefined in C and
  C++, an unsigned one wraps), in the helpers ``hawk_wrap_<name>``;
* in numpy, through ``_wrap``: numpy's int64 arrays wrap already, a Python int (a
  uniform value) is brought back into int64.

With ``int_overflow="check"`` such an operation is checked instead (``hawk_checked_<name>``
in C, ``_checked`` on the host): the first lane whose value leaves int64 is reported, with
the wrapped value. ``int()`` of a real checks that it is finite and within int64, and an
int ``**`` that its exponent is not negative, whenever the kernel makes its checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from hawk._registry.entry import COut, HostOut

__all__ = [
    "EXACT",
    "abs_operand_c",
    "abs_operand_host",
    "binary_c",
    "binary_host",
    "c_identifiers",
    "int_pow_c",
    "int_pow_host",
    "int_power",
    "negate_c",
    "negate_host",
    "wrapped",
]

#: the C text of int64's least value (its literal would be an unsigned overflow)
_INT_MIN = "(-9223372036854775807LL - 1LL)"

_WRAP = """\
$inline long long hawk_wrap_$name(long long a, long long b)
{
    return (long long)((unsigned long long)a $op (unsigned long long)b);  // modulo 2**64
}"""

#: the key of ``hawk_mul_overflows``, sorting before the helpers that call it
_MUL_KEY = ("int", "mul overflows")

_MUL_OVERFLOWS = f"""\
$inline bool hawk_mul_overflows(long long a, long long b)
{{
    // a * b leaves int64 (found without a signed overflow)
    if (a == 0LL || b == 0LL) return false;
    const long long r = (long long)((unsigned long long)a * (unsigned long long)b);
    return a == -1LL ? b == {_INT_MIN} : r / a != b;
}}"""

# the checked forms: the wrapped value, the lane's failure recorded when it left int64
_CHECKED = {
    "add": "((a ^ r) & (b ^ r)) < 0LL",
    "sub": "((a ^ b) & (a ^ r)) < 0LL",
    "mul": "hawk_mul_overflows(a, b)",
    "floordiv": f"a == {_INT_MIN} && b == -1LL",
}
_CHECKED_VALUE = {
    "add": "(long long)((unsigned long long)a + (unsigned long long)b)",
    "sub": "(long long)((unsigned long long)a - (unsigned long long)b)",
    "mul": "(long long)((unsigned long long)a * (unsigned long long)b)",
    "floordiv": "hawk_floordiv(a, b)",
}
_CHECKED_FORM = """\
$inline long long hawk_checked_$name(
    long long a, long long b, unsigned long long* rec, long long site, long long lane)
{
    const long long r = $value;
    if ($test) hawk_fail(rec, site, lane, r, 0);
    return r;
}"""

_NEGATE = {
    "wrap": """\
$inline long long hawk_wrap_neg(long long a)
{
    return (long long)(0ULL - (unsigned long long)a);  // modulo 2**64
}""",
    "check": f"""\
$inline long long hawk_checked_neg(
    long long a, unsigned long long* rec, long long site, long long lane)
{{
    const long long r = (long long)(0ULL - (unsigned long long)a);
    if (a == {_INT_MIN}) hawk_fail(rec, site, lane, r, 0);
    return r;
}}""",
}

_POW = """\
$inline long long hawk_ipow(long long a, long long b)
{
    // a ** b for b >= 0 by squaring, modulo 2**64
    unsigned long long r = 1ULL, x = (unsigned long long)a;
    for (unsigned long long e = (unsigned long long)b; e != 0ULL; e >>= 1) {
        if (e & 1ULL) r *= x;
        x *= x;
    }
    return (long long)r;
}"""

_POW_CHECKED = """\
$inline long long hawk_ipow_checked(long long a, long long b, unsigned long long* rec,
    long long negative, long long overflow, long long lane)
{
    // hawk_ipow, a negative exponent recorded at site `negative` (giving 0) and, when
    // `overflow` is a site, a power beyond int64 there
    if (b < 0LL) {
        if (negative >= 0LL) hawk_fail(rec, negative, lane, b, 0);
        return 0LL;
    }
    long long r = 1LL, x = a;
    bool beyond = false;
    for (long long e = b; e != 0LL; e >>= 1) {
        if (e & 1LL) {
            beyond = beyond || hawk_mul_overflows(r, x);
            r = (long long)((unsigned long long)r * (unsigned long long)x);
        }
        if (e >> 1) {
            beyond = beyond || hawk_mul_overflows(x, x);
            x = (long long)((unsigned long long)x * (unsigned long long)x);
        }
    }
    if (beyond && overflow >= 0LL) hawk_fail(rec, overflow, lane, r, 0);
    return r;
}"""


def binary_c(name: str, plain: Callable[..., str]) -> Callable[..., str]:
    """The C printer of the int-or-real operator ``name`` (``add``, ``sub``, ``mul``,
    ``floordiv``), whose text is ``plain`` where it stays in int64."""

    def form(out: COut, node: Any, a: str, b: str) -> str:
        if not out.wraps(node):
            return plain(out, node, a, b)
        site = out.check_site(node, "overflow")
        if site is None:
            if name == "floordiv":  # hawk_floordiv wraps already
                return plain(out, node, a, b)
            out.helper((name, "wrap"), _WRAP.replace("$name", name).replace("$op", node.op))
            return f"hawk_wrap_{name}({a}, {b})"
        if name == "mul":
            out.helper(_MUL_KEY, _MUL_OVERFLOWS)
        if name == "floordiv":
            plain(out, node, a, b)  # its helper, which the checked form calls
        out.helper(
            (name, "int, checked"),  # after the plain helper it calls (helpers sort by key)
            _CHECKED_FORM.replace("$name", name)
            .replace("$value", _CHECKED_VALUE[name])
            .replace("$test", _CHECKED[name]),
        )
        return f"hawk_checked_{name}({a}, {b}, hawk_rec, {site}, lane)"

    return form


def binary_host(plain: Callable[..., str]) -> Callable[..., str]:
    """The numpy printer of an int-or-real operator whose text is ``plain`` where it stays
    in int64."""

    def form(out: HostOut, node: Any, a: str, b: str) -> str:
        if not out.wraps(node):
            return plain(out, node, a, b)
        site = out.check_site(node, "overflow")
        if site is None:
            return f"_wrap({plain(out, node, a, b)})"
        return f"_checked({node.op!r}, {a}, {b}, {site}, {out.lanes()})"

    return form


def negate_c(out: COut, node: Any, a: str) -> str:
    """The C printer of unary ``-``."""
    if not out.wraps(node):
        return f"(-{a})"
    site = out.check_site(node, "overflow")
    kind = "wrap" if site is None else "check"
    out.helper(("neg", kind), _NEGATE[kind])
    if site is None:
        return f"hawk_wrap_neg({a})"
    return f"hawk_checked_neg({a}, hawk_rec, {site}, lane)"


def negate_host(out: HostOut, node: Any, a: str) -> str:
    """The numpy printer of unary ``-``."""
    if not out.wraps(node):
        return f"(-{a})"
    site = out.check_site(node, "overflow")
    return f"_wrap((-{a}))" if site is None else f"_checked('neg', {a}, 0, {site}, {out.lanes()})"


def abs_operand_c(out: COut, node: Any, a: str) -> str:
    """The C text of an int ``abs``'s operand: itself, or where ``abs`` is checked, its
    checked negation (``abs(a)`` leaves int64 exactly where ``-a`` does, at ``-2**63``)."""
    site = out.check_site(node, "overflow")
    if site is None:
        return a
    out.helper(("neg", "check"), _NEGATE["check"])
    return f"hawk_checked_neg({a}, hawk_rec, {site}, lane)"


def abs_operand_host(out: HostOut, node: Any, a: str) -> str:
    """The numpy text of an int ``abs``'s operand, as :func:`abs_operand_c`."""
    site = out.check_site(node, "overflow")
    return a if site is None else f"_checked('neg', {a}, 0, {site}, {out.lanes()})"


def int_pow_c(out: COut, node: Any, a: str, b: str) -> str:
    """The C printer of an int ``**``."""
    negative, overflow = out.check_site(node, "exponent"), out.check_site(node, "overflow")
    if negative is None and overflow is None:
        out.helper(("pow", "int"), _POW)
        return f"hawk_ipow({a}, {b})"
    out.helper(_MUL_KEY, _MUL_OVERFLOWS)
    out.helper(("pow", "checked"), _POW_CHECKED)
    sites = ", ".join(site or "-1LL" for site in (negative, overflow))
    return f"hawk_ipow_checked({a}, {b}, hawk_rec, {sites}, lane)"


def int_pow_host(out: HostOut, node: Any, a: str, b: str) -> str:
    """The numpy printer of an int ``**``."""
    sites = ", ".join(out.check_site(node, kind) or "None" for kind in ("exponent", "overflow"))
    return f"_ipow({a}, {b}, {sites}, {out.lanes()})"


def int_power(base: int, exponent: int) -> int:
    """``base ** exponent`` (``exponent`` >= 0) where it may fit int64. Where it cannot
    (``|base| >= 2`` and ``exponent >= 64``) a stand-in beyond int64 with the same value
    modulo ``2**64``, so that it wraps to the power's int64 and is seen to leave int64,
    found without the exact power's ``exponent * log2(|base|)`` bits."""
    if exponent < 64 or base in (-1, 0, 1):
        return base**exponent
    return pow(base, exponent, 2**64) + 2**64


#: an int operation's exact value (``neg`` negates ``a``), on Python ints or numpy arrays
#: (floor division and modulo as Python's; ``**`` on Python ints, as :func:`int_power`)
EXACT: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
    "**": int_power,
    "neg": lambda a, b: -a,
}


def wrapped(value: int) -> int:
    """``value`` modulo ``2**64``, as an int64 (two's complement)."""
    return (value + 2**63) % 2**64 - 2**63


def c_identifiers() -> frozenset[str]:
    """Every ``hawk_...`` C identifier the int helpers above may emit (their templates'
    ``$name`` expanded for each operation), which a kernel's own symbol must avoid."""
    texts = [value for value in globals().values() if isinstance(value, str)]
    texts += [t for value in (_CHECKED, _NEGATE) for t in value.values()]
    found = set()
    for text in texts:
        for name in _CHECKED:
            found.update(re.findall(r"\bhawk_\w+", text.replace("$name", name)))
    return frozenset(name for name in found if not name.endswith("_"))
