"""The ``rng`` fixture: fresh data per test, reproducible from the seed a run prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py").read_text()
TESTS = """
def test_first(rng):
    print("draw", rng.random())
    assert False

def test_second(rng):
    print("draw", rng.random())
    assert False
"""


def _run(pytester: pytest.Pytester, *args: str, failed: int = 2) -> tuple[str, list[str]]:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_data=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    result.assert_outcomes(failed=failed)
    text = result.stdout.str()
    return text, re.findall(r"^draw (\S+)$", text, re.MULTILINE)


def test_seed_from_the_environment_reproduces_each_test(pytester, monkeypatch):
    monkeypatch.setenv("EAGLE_TEST_SEED", "1234")
    text, draws = _run(pytester)
    assert "EAGLE_TEST_SEED=1234 (set it to reproduce" in text
    assert len(draws) == 2 and draws[0] != draws[1]
    assert text.count("rerun with EAGLE_TEST_SEED=1234 python -m pytest") == 2
    assert "'test_data.py::test_second'" in text
    _, again = _run(pytester, "-k", "test_second", failed=1)
    assert again == draws[1:]


def test_without_a_seed_each_run_draws_afresh_and_prints_its_seed(pytester, monkeypatch):
    monkeypatch.delenv("EAGLE_TEST_SEED", raising=False)
    first, first_draws = _run(pytester)
    _, second_draws = _run(pytester)
    assert first_draws != second_draws
    seed = re.search(r"EAGLE_TEST_SEED=(\d+) \(set it", first).group(1)
    monkeypatch.setenv("EAGLE_TEST_SEED", seed)
    _, replayed = _run(pytester)
    assert replayed == first_draws


def test_a_seed_that_is_not_a_number_is_refused(pytester, monkeypatch):
    monkeypatch.setenv("EAGLE_TEST_SEED", "abc")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_data=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "EAGLE_TEST_SEED='abc' is not a non-negative integer" in result.stderr.str()
