"""Medians of repeated timings, shared by the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from eagle import cuda


def host_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median wall-clock milliseconds of ``fn()`` over ``repeat`` calls, after one warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def loop_ms(fn: Callable[[], object], repeat: int, sync: Callable[[], object]) -> float:
    """Wall-clock milliseconds per call of a loop of ``repeat`` calls of ``fn()``, with
    ``sync()`` before and after it (work the calls queue on a device counts)."""
    sync()
    began = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync()
    return (time.perf_counter() - began) * 1e3 / repeat


def device_ms(launch: Callable[[], object], stream: Any, repeat: int) -> float:
    """Median CUDA-event milliseconds of ``launch()`` on ``stream`` (a Stream or a raw
    pointer) over ``repeat`` launches, after one warm-up launch."""
    start, end = cuda.Event(), cuda.Event()
    launch()
    cuda.Event().record(stream).synchronize()
    times = []
    for _ in range(repeat):
        start.record(stream)
        launch()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_ms(end))
    return statistics.median(times)
