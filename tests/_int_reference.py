"""A Python reference of ``tests/_int_kernels.edges``: Python ints, each operation
wrapped to int64 explicitly, and random inputs that reach int64's edges."""

from __future__ import annotations

import numpy as np

from tests._int_kernels import WORD

OUTPUTS = ("mul", "sum", "neg", "div", "pow", "carry")


def wrap(value: int) -> int:
    """``value`` modulo 2**64 as an int64."""
    return (value + 2**63) % 2**64 - 2**63


def _floordiv(a: int, b: int) -> int:
    return wrap(a // b)


def edges_reference(xa: float, xb: float, xc: float, xe: float) -> dict[str, int]:
    """The int results of ``edges`` for one lane."""
    a = wrap(wrap(int(xa) * 1048576) + int(xb))
    b, e = int(xc), int(xe)
    acc = 1
    for i in range(70):
        acc = wrap(wrap(acc * 3) + i)
    return {
        "mul": wrap(a * b),
        "sum": wrap(wrap(a + wrap(b * 1099511627776)) - 9223372036854775807),
        "neg": wrap(-wrap(a - b)),
        "div": _floordiv(a, b),
        "pow": wrap(pow(b, e, 2**64)),
        "carry": wrap(acc + a),
    }


def edges_inputs(rng: np.random.Generator, lanes: int) -> dict[str, np.ndarray]:
    """Inputs of ``edges``: ``a`` near +-2**63 and 0, divisors including -1, exponents to
    70, in float64 (every value an exact integer)."""
    xa = rng.integers(-(2**43), 2**43, lanes).astype(np.float64)
    xa[:6] = [2.0**43 - 1, -(2.0**43), 0.0, 1.0, -1.0, -(2.0**43)]
    xb = rng.integers(0, 2**20, lanes).astype(np.float64)
    xb[:6] = [2.0**20 - 1, 0.0, 0.0, 0.0, 0.0, 0.0]
    xc = rng.integers(-(2**31), 2**31, lanes).astype(np.float64)
    xc[xc == 0] = 3.0
    xc[:6] = [-1.0, -1.0, 7.0, 2.0**31 - 1, 3.0, 2.0]
    xe = rng.integers(0, 71, lanes).astype(np.float64)
    xe[:6] = [0.0, 1.0, 63.0, 2.0, 40.0, 64.0]
    return {"xa": xa, "xb": xb, "xc": xc, "xe": xe}


def edges_expected(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The output planes ``edges`` must write for ``inputs``: each result's quotient and
    remainder by 2**32."""
    lanes = len(inputs["xa"])
    out = {f"{name}_{part}": np.zeros(lanes) for name in OUTPUTS for part in ("hi", "lo")}
    for lane in range(lanes):
        values = edges_reference(*(float(inputs[k][lane]) for k in ("xa", "xb", "xc", "xe")))
        for name, value in values.items():
            out[f"{name}_hi"][lane] = value // WORD
            out[f"{name}_lo"][lane] = value % WORD
    return out


def widths_expected(x: np.ndarray, t: np.ndarray) -> dict[str, np.ndarray]:
    """The outputs of ``tests/_int_kernels.widths`` for inputs ``x`` and a 5 x 7 table
    ``t``, lane by lane in Python ints."""
    out: dict[str, list[float]] = {"quot": [], "cell": [], "mixed": [], "looped": []}
    for lane, value in enumerate(x.tolist()):
        j = int(np.floor(value))
        d = lane % 1000 - 500
        jc = min(max(j, -2), 6)
        out["quot"].append(float(d // 7 * 1000 + d % 7))
        out["cell"].append(float(jc * 1000 + j % 13) + float(t[min(max(jc, 0), 4), lane % 7]))
        far = lane * 3000000 + 2147483000
        out["mixed"].append(float(far % 1000003 - d * jc) + float(wrap(j - jc)))
        acc = sum((k - d) // 3 * k + jc % (k + 4) for k in range(-3, 9, 2))
        out["looped"].append(float(acc))
    return {name: np.array(values) for name, values in out.items()}


def picks_expected(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``y`` of ``tests/_int_kernels.picks`` for ``x`` in [0, 1) and a table ``t`` of at
    least 3 values, lane by lane in Python ints."""
    y = []
    for lane, value in enumerate(x.tolist()):
        a = lane % 7 - 3
        b = (lane % 5 if t[int(value * 3.0)] > 0.0 else -2) if value > 0.5 else a * 3
        y.append(float(max(a, b) * 100 + b))
    return np.array(y)


def widths_inputs(rng: np.random.Generator, lanes: int) -> dict[str, np.ndarray]:
    """Inputs of ``widths``: ``x`` mostly in -4 .. 10 (the clamp's both sides), with
    reals beyond 32 bits up to int64's least value among them (``floor`` raises beyond,
    as ``tests/test_floor.py`` checks)."""
    x = rng.uniform(-4.0, 10.0, lanes)
    specials = [3e9, -3e9, 2.0**31, -(2.0**31) - 0.5, 9e18, -9e18, -(2.0**63), 0.5 - 2.0**31]
    x[rng.choice(lanes, len(specials), replace=False)] = specials
    return {"x": x, "t": rng.standard_normal(35)}
