"""Errors: one root per package (eagle.EagleError, hawk.HawkError), kinds that are also
their builtin, the public names' builtin bases as documented, and messages as before."""

from __future__ import annotations

import ast
import builtins
import copy
import importlib
import importlib.util
import inspect
import pickle
from pathlib import Path

import pytest

import eagle
import hawk
from eagle import errors as eagle_errors
from eagle.cuda import CompileError, CudaDriverTooOld, CudaError, CudaUnavailable, LifetimeError
from eagle.gemm import errors as gemm_errors
from hawk import errors as hawk_errors
from tests._util import importable

ROOT = Path(hawk.__file__).parents[1]

_BUILTINS = tuple(
    value
    for value in vars(builtins).values()
    if isinstance(value, type) and issubclass(value, BaseException)
)

# Every error class eagle and hawk define, by name, with the builtin exceptions it also
# is (beyond Exception): what their docs promise. A new class gets a row.
BUILTIN_BASES: dict[str, set[type]] = {
    "EagleError": set(),
    "EagleValueError": {ValueError},
    "EagleTypeError": {TypeError},
    "EagleIndexError": {IndexError, LookupError},
    "EagleRuntimeError": {RuntimeError},
    "LifetimeError": {RuntimeError},
    "EagleBufferError": {BufferError},
    "EagleOverflowError": {OverflowError, ArithmeticError},
    "EagleImportError": {ImportError},
    "CudaError": {RuntimeError},
    "CudaUnavailable": {RuntimeError},
    "CudaDriverTooOld": {RuntimeError},
    "CompileError": {RuntimeError},
    "GemmCaptureUnavailable": set(),
    "CublasUnavailable": {RuntimeError},
    "HandleDestroyed": {RuntimeError},
    "CaptureInProgress": {RuntimeError},
    "NotCapturable": {ValueError},
    "GemmMappingUnavailable": {ValueError},
    "LoweringUnavailable": {ValueError},
    "PlanUnavailable": {ValueError},
    "MatmulUnavailable": {ValueError},
    "HawkError": set(),
    "AdjointCostWarning": {UserWarning, Warning},
    "HawkValueError": {ValueError},
    "HawkTypeError": {TypeError},
    "HawkKeyError": {KeyError, LookupError},
    "HawkZeroDivisionError": {ZeroDivisionError, ArithmeticError},
    "HawkOverflowError": {OverflowError, ArithmeticError},
    "PlaneIndexError": {IndexError, LookupError},
    "Unresolved": {LookupError},
}


def _modules() -> list[str]:
    names = []
    for package in ("eagle", "hawk"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[-1] == "__main__":
                continue
            names.append(".".join(parts))
    return names


def _error_classes() -> dict[str, type]:
    """Every exception class defined in a module of eagle or hawk, by qualified name."""
    found = {}
    for name in _modules():
        if not importable(name):
            continue
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
            ):
                found[f"{name}.{value.__qualname__}"] = value
    return found


def test_every_error_class_derives_from_its_package_root():
    classes = _error_classes()
    assert classes
    stray = [
        name
        for name, cls in classes.items()
        if not issubclass(cls, eagle.EagleError if name.startswith("eagle") else hawk.HawkError)
    ]
    assert stray == []


def test_every_error_class_has_the_builtin_bases_its_docs_give():
    classes = _error_classes()
    found = {cls.__name__: {b for b in cls.__mro__ if b in _BUILTINS} for cls in classes.values()}
    found = {name: bases - {Exception, BaseException} for name, bases in found.items()}
    assert found == BUILTIN_BASES


def _made() -> list[BaseException]:
    """Errors as eagle and hawk raise them, with the arguments their kinds take."""
    located = hawk.HawkError("kernel 'k', line 3: bad", 3, 8, "    y = bad(x)")
    located.add_note("in launch 1 of the adjoint")
    return [
        hawk.PlaneIndexError(
            "index 5 out of range", plane="t", axis="row", index=5, extent=3, lane=0
        ),
        located,
        CudaError("cuLaunchKernel", "CUDA_ERROR_LAUNCH_FAILED", "a detail"),
        CudaUnavailable("cudaDriverGetVersion", "cudaErrorNoDevice", "no driver"),
        CudaDriverTooOld(12040),
        CompileError("nvrtcCompileProgram", "NVRTC_ERROR_COMPILATION", "k:\nthe log"),
        eagle.EagleError("plain"),
    ]


@pytest.mark.parametrize("error", _made(), ids=lambda error: type(error).__name__)
def test_an_error_pickles_and_copies_whole(error):
    """A worker process's error reaches its parent (a multiprocessing Pool hung on one
    whose kind takes more than its message)."""
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
        assert type(again) is type(error) and again.args == error.args
        assert str(again) == str(error) and vars(again) == vars(error)


def test_every_error_class_pickles_whatever_its_init_takes():
    for cls in _error_classes().values():
        error = cls.__new__(cls, "a message")
        error.extra = 7
        again = pickle.loads(pickle.dumps(error))
        assert (type(again), again.args, again.extra) == (cls, ("a message",), 7)


def test_a_warning_names_the_line_that_called_into_eagle():
    """eagle's warnings pass over its own frames (and torch's, which calls eagle from a
    backward): the deterministic-algorithms warning named a line of eagle's."""
    namespace = {"__name__": "eagle._called", "_warn_user": eagle_errors._warn_user}
    exec(
        "def inner():\n    _warn_user('m', UserWarning)\n\n\ndef outer():\n    inner()\n", namespace
    )
    with pytest.warns(UserWarning, match="^m$") as caught:
        namespace["outer"]()
    line = inspect.currentframe().f_lineno - 1
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_the_roots_are_reached_lazily_and_import_only_the_standard_library():
    assert eagle.EagleError is eagle_errors.EagleError and "EagleError" in eagle.__all__
    assert hawk.HawkError is hawk_errors.HawkError
    for module in (eagle_errors, hawk_errors):  # the standard library only
        tree = ast.parse(Path(module.__file__).read_text())
        imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        assert {i.module for i in imports if isinstance(i, ast.ImportFrom)} <= {
            "__future__",
            "typing",
        }


def test_the_seed_names_keep_their_bases():
    assert issubclass(gemm_errors.GemmMappingUnavailable, gemm_errors.GemmCaptureUnavailable)
    assert issubclass(gemm_errors.PlanUnavailable, gemm_errors.LoweringUnavailable)
    assert issubclass(gemm_errors.MatmulUnavailable, gemm_errors.LoweringUnavailable)
    assert issubclass(CudaUnavailable, CudaError) and issubclass(CompileError, CudaError)
    assert issubclass(CudaDriverTooOld, CudaUnavailable)
    for kind in ("CublasUnavailable", "HandleDestroyed", "CaptureInProgress", "NotCapturable"):
        assert issubclass(getattr(gemm_errors, kind), gemm_errors.GemmCaptureUnavailable)
        assert getattr(eagle.gemm, kind) is getattr(gemm_errors, kind)
    assert issubclass(gemm_errors.HandleDestroyed, LifetimeError)


@pytest.mark.parametrize(
    ("kind", "builtin"),
    [
        (eagle_errors.EagleValueError, ValueError),
        (eagle_errors.EagleTypeError, TypeError),
        (eagle_errors.EagleIndexError, IndexError),
        (eagle_errors.EagleRuntimeError, RuntimeError),
        (eagle_errors.EagleBufferError, BufferError),
        (eagle_errors.EagleOverflowError, OverflowError),
        (eagle_errors.EagleImportError, ImportError),
        (hawk_errors.HawkValueError, ValueError),
        (hawk_errors.HawkTypeError, TypeError),
        (hawk_errors.HawkKeyError, KeyError),
        (hawk_errors.HawkZeroDivisionError, ZeroDivisionError),
        (hawk_errors.HawkOverflowError, OverflowError),
    ],
)
def test_a_kind_reads_as_its_builtin(kind, builtin):
    message = "plane 'x' is int16; pass float32"
    assert str(kind(message)) == str(builtin(message)) and isinstance(kind(message), builtin)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("contraction", "GEMM"),
        ("math", "x"),
        ("host_route", 1),
        ("int_overflow", "x"),
        ("adds", "bogus"),
    ],
)
def test_an_option_of_eagle_plan_auto_outside_its_vocabulary_is_an_eagle_error(option, value):
    """``except eagle.EagleError`` catches it, as it does eagle.torch.function's."""
    import eagle.plan
    from tests._hawk_kernels import saxpy

    with pytest.raises(eagle_errors.EagleValueError, match=f"^{option} must be "):
        eagle.plan.auto(saxpy, **{option: value})


def test_messages_are_as_before():
    assert str(CudaError("cudaFree", "cudaErrorInvalidValue", "bad")) == (
        "cudaFree failed with cudaErrorInvalidValue: bad"
    )
    located = hawk.HawkError("not in hawk", line=3, column=4, source="y = x @ w")
    assert str(located) == "not in hawk\n    y = x @ w\n        ^"
    index = hawk.PlaneIndexError("table 't': out", plane="t", axis="i", index=9, extent=4, lane=0)
    assert str(index) == "table 't': out" and index.extent == 4


def _bare_builtin_raises(path: Path, base: Path = ROOT) -> list[str]:
    """``raise ValueError(...)`` and the like: a builtin raised where the package's
    kind belongs (AttributeError stays: Python reads it as 'no such attribute'; so does
    NotImplementedError, an abstract method's body)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        # a chosen kind, ``raise (error or ValueError)(...)``, counts its fallback too
        kinds = raised.values if isinstance(raised, ast.BoolOp) else [raised]
        for kind in kinds:
            if (
                isinstance(kind, ast.Name)
                and kind.id in vars(builtins)
                and kind.id not in ("AttributeError", "NotImplementedError")
                and isinstance(getattr(builtins, kind.id), type)
            ):
                found.append(f"{path.relative_to(base)}:{node.lineno} raises {kind.id}")
    return found


def test_gemm_capture_unavailable_is_raised_only_as_one_of_its_kinds():
    raised = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((ROOT / "eagle").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Raise)
        and isinstance(node.exc, ast.Call)
        and isinstance(node.exc.func, ast.Name)
        and node.exc.func.id == "GemmCaptureUnavailable"
    ]
    assert raised == [], (
        "raise CublasUnavailable, HandleDestroyed, CaptureInProgress or NotCapturable"
    )


def test_eagle_and_hawk_raise_their_own_kinds_not_bare_builtins():
    found = [
        where
        for package in ("eagle", "hawk")
        for path in sorted((ROOT / package).rglob("*.py"))
        for where in _bare_builtin_raises(path)
    ]
    assert found == [], "raise the package's kind (eagle.errors / hawk.errors) instead"


def test_the_raise_check_finds_a_bare_builtin(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f():\n    raise ValueError('x')\n\ndef g():\n    raise AttributeError\n"
        "\ndef h(error=None):\n    raise (error or TypeError)('x')\n"
    )
    assert _bare_builtin_raises(probe, tmp_path) == [
        "probe.py:2 raises ValueError",
        "probe.py:8 raises TypeError",
    ]
