"""Sessions: tests (host suite, fresh venv), gpu (device tests, current interpreter),
docs, lint, bench."""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.default_venv_backend = "venv"


@nox.session
def tests(session: nox.Session) -> None:
    """Everything that runs without a GPU, including NVRTC compiles for sm_90 and doctests."""
    session.install(".[test]")
    session.run("python", "-m", "pytest", "-q", *session.posargs)


@nox.session(python=False)
def gpu(session: nox.Session) -> None:
    """Tests marked ``gpu``, with the current interpreter (works on an offline GPU box)."""
    session.run("python", "-m", "pytest", "-q", "-m", "gpu", "tests", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the Sphinx site with warnings as errors."""
    session.install(".[docs]")
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=False)
def bench(session: nox.Session) -> None:
    """The benchmark scripts, on the current interpreter (needs a GPU); each writes its
    figures to benchmarks/out/<script>.json."""
    Path("benchmarks/out").mkdir(exist_ok=True)
    env = {"PYTHONPATH": str(Path.cwd())}  # the checkout's eagle and hawk, installed or not
    for script in ("gemm", "hawk", "route", "diff", "param_grad", "checks"):
        out = f"benchmarks/out/{script}.json"
        session.run("python", f"benchmarks/bench_{script}.py", out, env=env)
