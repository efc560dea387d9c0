"""The packages' layering: eagle uses hawk, hawk uses nothing of eagle."""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from pathlib import Path

import eagle
import hawk

HAWK = Path(hawk.__file__).parent
EAGLE = Path(eagle.__file__).parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_hawk_module_imports_eagle():
    offenders = {
        str(path.relative_to(HAWK.parent)): sorted(
            n for n in _imports(path) if n.split(".")[0] == "eagle"
        )
        for path in sorted(HAWK.rglob("*.py"))
    }
    offenders = {path: names for path, names in offenders.items() if names}
    assert not offenders, f"hawk must not import eagle: {offenders}"


#: hawk's compiler API, the modules eagle may import: the IR, the emitters, contraction
#: recognition, its records and reverse mode, and the user's surface; the rest of hawk is
#: private (its module names start with ``_``)
HAWK_API = frozenset(
    {
        "hawk",
        "hawk.contraction",
        "hawk.decl",
        "hawk.diff",
        "hawk.emit",
        "hawk.emit.checks",
        "hawk.emit.cuda",
        "hawk.emit.host",
        "hawk.emit.policy",
        "hawk.errors",
        "hawk.ir",
        "hawk.kinds",
        "hawk.math",
        "hawk.records",
        "hawk.trace",
    }
)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _hawk_modules(path: Path) -> set[str]:
    """The hawk modules ``path`` imports: ``import hawk.x``, ``from hawk.x import y`` (the
    module ``hawk.x.y`` when ``y`` is one) and ``importlib.import_module("hawk...")``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(
                f"{node.module}.{alias.name}"
                for alias in node.names
                if _is_module(f"{node.module}.{alias.name}")
            )
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return {name for name in found if name.split(".")[0] == "hawk"}


def test_eagle_imports_only_hawks_compiler_api():
    offenders = {
        str(path.relative_to(EAGLE.parent)): sorted(_hawk_modules(path) - HAWK_API)
        for path in sorted(EAGLE.rglob("*.py"))
    }
    offenders = {path: names for path, names in offenders.items() if names}
    assert not offenders, f"eagle imports hawk modules outside its compiler API: {offenders}"


def test_the_compiler_api_is_hawks_public_modules():
    public = {
        info.name
        for info in pkgutil.walk_packages(hawk.__path__, "hawk.")
        if not any(part.startswith("_") for part in info.name.split("."))
    }
    hidden = {name for name in public if name.startswith("hawk.ir.")}  # the IR is hawk.ir
    assert public - hidden == HAWK_API - {"hawk"}


def test_the_import_scan_sees_every_form(tmp_path: Path):
    source = tmp_path / "sample.py"
    source.write_text(
        "import hawk._fold\n"
        "from hawk import ir, HawkError\n"
        "from hawk.emit import _batch, DTYPES\n"
        "import importlib\n"
        "importlib.import_module('hawk._scope')\n"
    )
    assert _hawk_modules(source) == {
        "hawk._fold",
        "hawk",
        "hawk.ir",
        "hawk.emit",
        "hawk.emit._batch",
        "hawk._scope",
    }
