"""Shared pytest setup: tests marked ``gpu`` skip cleanly where no device is present, and
the ``rng`` fixture draws reproducible random data.

Each run has a session seed, ``EAGLE_TEST_SEED`` from the environment or a fresh random
one, printed in the header. A test's generator is seeded by the session seed and the test's
id, so tests get different data, and a failure reports the seed that reproduces it.
"""

from __future__ import annotations

import gc
import os
import secrets
import zlib
from collections.abc import Generator

import numpy as np
import pytest

import eagle.cuda

pytest_plugins = ("pytester",)

SEED_ENV = "EAGLE_TEST_SEED"
_SESSION_SEED = pytest.StashKey[int]()
_TEST_SEED = pytest.StashKey[tuple[int, int]]()


def _session_seed() -> int:
    text = os.environ.get(SEED_ENV)
    if text is None:
        return secrets.randbits(32)
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if seed < 0:
        raise pytest.UsageError(
            f"{SEED_ENV}={text!r} is not a non-negative integer; "
            "set it to the seed printed in the header of the run to reproduce"
        )
    return seed


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SESSION_SEED] = _session_seed()


def pytest_report_header(config: pytest.Config) -> str:
    return f"{SEED_ENV}={config.stash[_SESSION_SEED]} (set it to reproduce this run's data)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if eagle.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and _TEST_SEED in item.stash:
        session_seed, test_key = item.stash[_TEST_SEED]
        report.sections.append(
            (
                "random data",
                f"rng = numpy.random.default_rng([{session_seed}, {test_key}]); "
                f"rerun with {SEED_ENV}={session_seed} python -m pytest '{item.nodeid}'",
            )
        )
    return report


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A fresh random generator per test (never zeros for GPU checks), seeded by the session
    seed and the test's id."""
    session_seed = request.config.stash[_SESSION_SEED]
    test_key = zlib.crc32(request.node.nodeid.encode())
    request.node.stash[_TEST_SEED] = (session_seed, test_key)
    request.node.user_properties.append((SEED_ENV, session_seed))
    return np.random.default_rng([session_seed, test_key])


@pytest.fixture
def collector_paused() -> Generator[None]:
    """Collect garbage now, then keep the garbage collector off for the test.

    For tests that capture: another framework's object found by the collector inside a
    capture (a CuPy graph, say) may make a CUDA call that invalidates it, then torch's RNG
    state stays broken for every later test of the process.
    """
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture(autouse=True)
def _no_shared_bindings() -> None:
    """Each test starts without the bindings and products plans share by address (those of
    an earlier test may hold its fakes, at the fake addresses this test uses too)."""
    from eagle import _cache

    for cache in list(_cache._caches):
        if cache.name in ("shared plan bindings", "routed products"):
            cache.clear()
