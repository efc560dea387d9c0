"""Print the polynomial coefficients of hawk's vectorised ``erf`` and ``erfc``.

hawk's host forms of ``hawk.math.erf`` and ``hawk.math.erfc`` (``hawk/_registry/
functions.py``) evaluate, on each interval of ``a = |x|``, a polynomial in
``w = v - mid``, ``v`` the interval's variable and ``mid`` its middle:

* ``erf(x) / x`` as a function of ``v = x**2``, for ``a < 1`` (both);
* ``1 / G(a)``, where ``G(a) = erfc(a) * exp(a**2)``, then
  ``erfc(a) = exp(-a**2) / (1 / G(a))``: for ``erfc`` on ``[0.5, 2)`` and ``[2, 4)``;
  for ``erf`` (which needs ``erfc(a)`` only to an absolute 1e-17, as ``1 - erfc(a)``) on
  ``[1, 2)``, ``[2, 3)``, ``[3, 4)`` and ``[4, 6)``;
* ``a * G(a)`` as a function of ``v = 1 / a``, for ``erfc`` on ``[4, 28)`` (then
  ``erfc(a) = exp(-a**2) * v * (a * G(a))``).

Each polynomial interpolates its function at the Chebyshev points of the interval, in
50-digit arithmetic (``mpmath``); the degree is the least whose largest relative error,
on a dense grid, is below the fit's target: 3e-17 for the fits of ``erf(x) / x`` and
``erfc`` (rounding the coefficients to float64 adds about half an ulp), ``1e-17 /
erfc(lo)`` for those of ``erf``'s tail. The output is the Python text pasted into
``functions.py``. Needs ``mpmath`` (not a dependency of hawk: run it by hand)::

    python tools/erf_coefficients.py
"""

from __future__ import annotations

from collections.abc import Callable

import mpmath as mp

mp.mp.dps = 50


def _chebyshev(f: Callable[[mp.mpf], mp.mpf], lo: mp.mpf, hi: mp.mpf, n: int) -> list[mp.mpf]:
    """The Chebyshev coefficients of the degree-``n`` interpolant of ``f`` on [lo, hi]."""
    angles = [mp.pi * (k + mp.mpf(1) / 2) / (n + 1) for k in range(n + 1)]
    values = [f((hi + lo) / 2 + (hi - lo) / 2 * mp.cos(angle)) for angle in angles]
    coefficients = [
        2
        * mp.fsum(v * mp.cos(j * angle) for v, angle in zip(values, angles, strict=True))
        / (n + 1)
        for j in range(n + 1)
    ]
    coefficients[0] /= 2
    return coefficients


def _powers(chebyshev: list[mp.mpf], half: mp.mpf) -> list[mp.mpf]:
    """The same polynomial in powers of ``w = u * half`` (lowest first)."""
    n = len(chebyshev)
    previous, current = [mp.mpf(1)] + [mp.mpf(0)] * (n - 1), [mp.mpf(0), mp.mpf(1)] + [0] * (n - 2)
    result = [chebyshev[0] * p for p in previous]
    if n > 1:
        result = [r + chebyshev[1] * c for r, c in zip(result, current, strict=True)]
    for j in range(2, n):  # T_j = 2 u T_(j-1) - T_(j-2)
        following = [2 * (current[k - 1] if k else 0) - previous[k] for k in range(n)]
        result = [r + chebyshev[j] * t for r, t in zip(result, following, strict=True)]
        previous, current = current, following
    return [c / half**k for k, c in enumerate(result)]


def _fit(
    f: Callable[[mp.mpf], mp.mpf], lo: mp.mpf, hi: mp.mpf, target: mp.mpf
) -> tuple[int, mp.mpf, mp.mpf, list[float]]:
    """The least degree whose interpolant's largest relative error is below ``target``,
    that error, the error once its coefficients in ``w`` are rounded to float64 (at least
    half a float64 ulp), and those coefficients."""
    mid, half = (hi + lo) / 2, (hi - lo) / 2
    grid = [lo + (hi - lo) * mp.mpf(i) / 1000 for i in range(1001)]
    exact = [f(x) for x in grid]
    for n in range(4, 40):
        powers = _powers(_chebyshev(f, lo, hi, n), half)
        rounded = [float(c) for c in powers]
        errors = [mp.mpf(0), mp.mpf(0)]
        for x, value in zip(grid, exact, strict=True):
            for slot, coefficients in enumerate((powers, rounded)):
                approx = mp.fsum(mp.mpf(c) * (x - mid) ** k for k, c in enumerate(coefficients))
                errors[slot] = max(errors[slot], abs(approx / value - 1))
        if errors[0] < target:
            return n, errors[0], errors[1], rounded
    raise ValueError(f"no degree below 40 reaches {target} on [{lo}, {hi}]")


def _g(a: mp.mpf) -> mp.mpf:
    return mp.erfc(a) * mp.exp(a * a)


def _erf_over_x(t: mp.mpf) -> mp.mpf:
    return mp.erf(mp.sqrt(t)) / mp.sqrt(t) if t else 2 / mp.sqrt(mp.pi)


def _inverse_g(a: mp.mpf) -> mp.mpf:
    return 1 / _g(a)


def _a_g(v: mp.mpf) -> mp.mpf:
    return _g(1 / v) / v


_TIGHT = mp.mpf("3e-17")

#: name: (function, interval of its variable, the largest relative error wanted)
FITS = {
    "_ERF_NEAR": (_erf_over_x, (0, 1), _TIGHT),
    "_ERF_TAIL_1": (_inverse_g, (1, 2), mp.mpf("1e-17") / mp.erfc(1)),
    "_ERF_TAIL_2": (_inverse_g, (2, 3), mp.mpf("1e-17") / mp.erfc(2)),
    "_ERF_TAIL_3": (_inverse_g, (3, 4), mp.mpf("1e-17") / mp.erfc(3)),
    "_ERF_TAIL_4": (_inverse_g, (4, 6), mp.mpf("1e-17") / mp.erfc(4)),
    "_ERFC_TAIL_1": (_inverse_g, (mp.mpf("0.5"), 2), _TIGHT),
    "_ERFC_TAIL_2": (_inverse_g, (2, 4), _TIGHT),
    "_ERFC_FAR": (_a_g, (mp.mpf(1) / 28, mp.mpf(1) / 4), _TIGHT),
}


def main() -> None:
    for name, (f, (lo, hi), target) in FITS.items():
        lo, hi = mp.mpf(lo), mp.mpf(hi)
        degree, error, rounded, coefficients = _fit(f, lo, hi, target)
        print(
            f"# degree {degree}: largest relative error {mp.nstr(error, 2)}, "
            f"{mp.nstr(rounded, 2)} with float64 coefficients"
        )
        print(f"{name} = _Fit(")
        print(f"    {float((lo + hi) / 2)!r},")
        print("    (")
        for c in coefficients:
            print(f"        {c!r},")
        print("    ),")
        print(")")


if __name__ == "__main__":
    main()
