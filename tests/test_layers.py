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
        "hawk.dtypes",
        "hawk.emit",
        "hawk.emit.checks",
        "hawk.emit.cuda",
        "hawk.emit.host",
        "hawk.emit.policy",
        "hawk.emit.reference",
        "hawk.emit.private",
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


# -- no import cycles, lazy ones included ----------------------------------------------------

ROOT = HAWK.parent


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root`` by dotted name (a package by its own name)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _target(name: str, modules: dict[str, Path]) -> str | None:
    """The module of ours that importing ``name`` runs: itself, or the package it is in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _module_graph(
    root: Path = ROOT, packages: tuple[str, ...] = ("eagle", "hawk")
) -> dict[str, set[str]]:
    """Each module -> the modules it imports anywhere: at the top, inside functions and
    under ``if TYPE_CHECKING``. ``from p import x`` imports the submodule ``p.x`` when
    there is one, else the package ``p`` (whose ``__init__`` defines ``x``). Importing
    ``p.q.m`` also runs the ``__init__`` of each package on the way (``p.q``), except
    those the importing module is itself inside, which are running already."""
    modules = _modules(root, packages)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(_target(alias.name, modules) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                for alias in node.names:
                    targets.add(_target(f"{base}.{alias.name}", modules))
        edges = set()
        for target in targets - {None}:
            assert target is not None
            parts = target.split(".")
            for end in range(1, len(parts) + 1):
                step = ".".join(parts[:end])
                running = name == step or name.startswith(step + ".")
                if step in modules and not running:
                    edges.add(step)
        graph[name] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it (the first again at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                return [*path[path.index(imported) :], imported]
            if imported not in state and (found := visit(imported)):
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_no_import_cycles_lazy_imports_included():
    cycle = _cycle(_module_graph())
    assert cycle is None, (
        f"import cycle: {' -> '.join(cycle or [])}; move what both need to a module below "
        f"them (or pass it in) instead of importing inside a function (CONTRIBUTING.md)"
    )


def test_the_cycle_finder_finds_a_lazy_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_module_graph_sees_lazy_relative_and_type_checking_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.low import thing\n")
    (package / "sub" / "low.py").write_text("def f():\n    from ..top import g\n")
    (package / "top.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import sub\n"
    )
    graph = _module_graph(tmp_path, ("pkg",))
    assert graph["pkg.sub"] == {"pkg.sub.low"} and graph["pkg.sub.low"] == {"pkg.top"}
    assert graph["pkg.top"] == {"pkg.sub"}
    assert _cycle(graph) == ["pkg.sub", "pkg.sub.low", "pkg.top", "pkg.sub"]


def test_importing_a_module_runs_the_packages_on_its_way(tmp_path):
    for name in ("a/__init__.py", "a/x.py", "b/__init__.py", "b/y.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "a" / "x.py").write_text("from b.y import thing\nfrom a import x\n")
    (tmp_path / "b" / "__init__.py").write_text("from b.y import thing\n")
    (tmp_path / "b" / "y.py").write_text("def f():\n    import a.x\n")
    graph = _module_graph(tmp_path, ("a", "b"))
    assert graph["a.x"] == {"b", "b.y"}  # b's __init__ runs first; a's is running already
    assert graph["b.y"] == {"a", "a.x"}
    assert _cycle(graph) == ["a.x", "b", "b.y", "a.x"]
