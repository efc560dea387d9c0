"""The printed table and the JSON record the benchmark scripts share."""

from __future__ import annotations

import cProfile
import json
import pstats
import time
from collections.abc import Callable, Sequence
from typing import Any

import eagle.cuda
from eagle.cuda._runtime import cudart


def probe_ready(argv: Sequence[str], usage: str | None) -> int | None:
    """None when a probe script may run: ``argv`` is the script and one output path, and
    a CUDA device is usable; else the exit status, after printing ``usage`` or why."""
    if len(argv) != 2 or argv[1].startswith("-"):  # (--help: the usage, not a file)
        print(usage)
        return 2
    if not eagle.cuda.is_available():
        print("no CUDA device: nothing to probe")
        return 0
    return None


def device_name() -> str:
    """The name of CUDA device 0, as its properties give it."""
    name = cudart.cudaGetDeviceProperties(0).name
    return name.decode().rstrip("\0") if isinstance(name, bytes) else str(name)


def print_profile(
    fn: Callable[[], object],
    calls: int,
    sync: Callable[[], object],
    rows: int,
    orders: Sequence[str] = ("tottime",),
) -> None:
    """Run ``fn()`` ``calls`` times under cProfile (``sync()`` after them, so the device's
    work is inside) and print the ``rows`` functions first by each of ``orders``."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        fn()
    sync()
    profile.disable()
    stats = pstats.Stats(profile).strip_dirs()
    for order in orders:
        stats.sort_stats(order).print_stats(rows)


def print_table(table: Sequence[Sequence[str]]) -> None:
    """Print rows of cells (the header first) in left-aligned columns two spaces apart."""
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)))


def write_record(path: str, fields: dict[str, Any]) -> None:
    """Write ``fields`` to ``path`` as JSON after the device's name and today's date, and
    say so."""
    record = {"device": device_name(), "date": time.strftime("%Y-%m-%d"), **fields}
    with open(path, "w") as out:
        json.dump(record, out, indent=2)
    print(f"wrote {path}")
