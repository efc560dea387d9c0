"""hawk's vectorised erf and erfc on the host against numpy's way of applying Python's.

``hawk.math.erf`` and ``hawk.math.erfc`` (the functions hawk's numpy programs call)
against ``np.vectorize(math.erf)`` and ``np.vectorize(math.erfc)``, over 1e6 float64
values drawn uniformly from [-6, 6] (where erf is not yet +-1) and from a standard normal
(most of them near 0). Each side runs in turn, REPEAT times after a warm-up; the figures
are the medians of wall-clock time and of the process's CPU time, which a machine shared
with other work inflates less (target: hawk at least 10x faster). Host only.

    python benchmarks/bench_erf.py [results.json]    (hawk installed, or PYTHONPATH=.)
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hawk import math as hm

REPEAT = 15
VALUES = 10**6
TARGET = 10.0


def _medians(sides: dict[str, Callable[[], object]]) -> dict[str, tuple[float, float]]:
    """Median wall-clock and CPU milliseconds of each side, the sides run in turn (so a
    busy machine slows every side alike)."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for fn in sides.values():
        fn()
    for _ in range(REPEAT):
        for name, fn in sides.items():
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {
        name: (
            statistics.median(w for w, _ in values) * 1e3,
            statistics.median(c for _, c in values) * 1e3,
        )
        for name, values in times.items()
    }


def main() -> None:
    rng = np.random.default_rng(2026)
    data = {
        "uniform on [-6, 6]": rng.uniform(-6.0, 6.0, VALUES),
        "standard normal": rng.standard_normal(VALUES),
    }
    rows: list[dict[str, Any]] = []
    for function, reference in ((hm.erf, math.erf), (hm.erfc, math.erfc)):
        vectorized = np.vectorize(reference)
        for label, x in data.items():
            sides = {
                "hawk": functools.partial(function, x),
                "vectorize": functools.partial(vectorized, x),
            }
            ms = _medians(sides)
            (hawk_wall, hawk_cpu), (vector_wall, vector_cpu) = ms["hawk"], ms["vectorize"]
            rows.append(
                {
                    "function": function.__name__,
                    "values": label,
                    "hawk_ms": round(hawk_wall, 2),
                    "vectorize_ms": round(vector_wall, 1),
                    "speedup": round(vector_wall / hawk_wall, 1),
                    "hawk_cpu_ms": round(hawk_cpu, 2),
                    "vectorize_cpu_ms": round(vector_cpu, 1),
                    "cpu_speedup": round(vector_cpu / hawk_cpu, 1),
                }
            )
    print(f"{VALUES:.0e} float64 values, medians of {REPEAT}: wall clock (CPU time)")
    for row in rows:
        verdict = "ok" if min(row["speedup"], row["cpu_speedup"]) >= TARGET else "BELOW 10x"
        print(
            f"  {row['function']:5s} {row['values']:19s} hawk {row['hawk_ms']:6.2f} "
            f"({row['hawk_cpu_ms']:6.2f}) ms  np.vectorize {row['vectorize_ms']:6.1f} "
            f"({row['vectorize_cpu_ms']:6.1f}) ms  {row['speedup']:5.1f}x "
            f"({row['cpu_speedup']:5.1f}x)  {verdict}"
        )
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as out:
            json.dump({"date": time.strftime("%Y-%m-%d"), "rows": rows}, out, indent=2)
        print(f"wrote {sys.argv[1]}")


if __name__ == "__main__":
    main()
