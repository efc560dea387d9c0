"""Kernels written to a file at test time (hawk reads a kernel's source, so a generated
kernel needs a file): a kernel of any name, and one whose output is a long sum."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import hawk

_SCALE = """\
import hawk


@hawk.kernel
def {name}(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = x * 2.0
"""

_SUM = """\
import hawk


@hawk.kernel
def long_sum(x: hawk.Scalar, w: hawk.Table, y: hawk.Mutable[hawk.Scalar]):
    y = {terms}
"""


def load(folder: Path, module: str, source: str, name: str) -> hawk.Kernel:
    """The kernel ``name`` of ``source``, written to ``folder/module.py`` and imported."""
    path = folder / f"{module}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(module, path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    kernel = getattr(loaded, name)
    assert isinstance(kernel, hawk.Kernel)
    return kernel


def scale_kernel(folder: Path, name: str) -> hawk.Kernel:
    """``y = x * 2.0`` as a kernel called ``name``."""
    return load(folder, f"named_{name}", _SCALE.format(name=name), name)


def long_sum(folder: Path, terms: int, *, reads: bool = False) -> hawk.Kernel:
    """One statement of ``terms`` terms: ``y = x * 0.0 + x * 1.0 + ...``, or with
    ``reads``, ``y = w.at(0) * x + w.at(1) * x + ...`` (``w`` unused without)."""
    weights = (f"w.at({i})" if reads else f"{i}.0" for i in range(terms))
    text = " + ".join(f"{weight} * x" for weight in weights)
    module = f"long_sum_{terms}_{'reads' if reads else 'constants'}"
    return load(folder, module, _SUM.format(terms=text), "long_sum")


_HORNER = """\
import hawk


@hawk.kernel
def horner(x: hawk.Scalar, c: hawk.Table, y: hawk.Mutable[hawk.Scalar]):
    p = 0.0
    for t in range({steps}):
        p = p * x + c.at(t)
    y = p
"""


def horner(folder: Path, steps: int, *, into: bool = False) -> hawk.Kernel:
    """Horner's rule over ``steps`` coefficients: a loop whose gradient needs its carry;
    with ``into``, added to the output's value (which the kernel then reads first)."""
    source = _HORNER.format(steps=steps)
    if into:
        source = source.replace("    y = p\n", "    y = y + p\n")
    name = f"horner_{steps}{'_into' if into else ''}"
    return load(folder, name, source, "horner")
