"""Sessions: tests (host suite, fresh venv), gpu and memcheck (device tests, current
interpreter), docs, lint (ruff and mypy), bench."""

from __future__ import annotations

import shutil
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.default_venv_backend = "venv"

RUFF = "ruff==0.17.6"  # the same pin as .pre-commit-config.yaml
MYPY = "mypy==2.4.1"
GPU_TESTS = ("python", "-m", "pytest", "-q", "-m", "gpu", "tests")


@nox.session
def tests(session: nox.Session) -> None:
    """Everything that runs without a GPU, including NVRTC compiles for sm_90 and doctests."""
    session.install(".[test]")
    session.run("python", "-m", "pytest", "-q", *session.posargs)


@nox.session(python=False)
def gpu(session: nox.Session) -> None:
    """Tests marked ``gpu``, with the current interpreter (works on an offline GPU box)."""
    session.run(*GPU_TESTS, *session.posargs)


@nox.session(python=False)
def memcheck(session: nox.Session) -> None:
    """The ``gpu`` tests under compute-sanitizer's memcheck, with the current interpreter.

    Calls that return an error code are not reported (eagle checks those codes itself);
    any memory error fails the session.
    """
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not Path(sanitizer).is_file():
        session.error(
            "compute-sanitizer is neither on PATH nor in /usr/local/cuda/bin: "
            "install the CUDA toolkit or put its bin directory on PATH"
        )
    session.run(
        sanitizer,
        "--tool",
        "memcheck",
        "--report-api-errors",
        "no",
        "--error-exitcode",
        "1",
        *GPU_TESTS,
        *session.posargs,
    )


@nox.session
def docs(session: nox.Session) -> None:
    """Build the Sphinx site; warnings and unresolved cross-references (``-n``) are errors."""
    session.install(".[docs]")
    session.run(
        "sphinx-build", "-W", "-n", "--keep-going", "-b", "html", "docs", "docs/_build/html"
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and mypy on the files pyproject's [tool.mypy] names."""
    session.install(RUFF, MYPY, ".")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


BENCHMARKS = (
    "launch", "gemm", "precision", "hawk", "route", "diff", "param_grad",
    "checks", "rebind", "loops", "torch", "kan", "fp8", "ints", "scatter", "user_paths",
)  # fmt: skip


@nox.session(python=False)
def bench(session: nox.Session) -> None:
    """The benchmark scripts, on the current interpreter (needs a GPU); each writes its
    figures to benchmarks/out/<script>.json."""
    Path("benchmarks/out").mkdir(exist_ok=True)
    env = {"PYTHONPATH": str(Path.cwd())}  # the checkout's eagle and hawk, installed or not
    for script in BENCHMARKS:
        out = f"benchmarks/out/{script}.json"
        session.run("python", f"benchmarks/bench_{script}.py", out, env=env)
