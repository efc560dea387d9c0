"""The documentation: its examples run, its pages are reachable, its API is documented.

Also the ``>>>`` examples in the docstrings of every eagle and hawk module.

Every ```python fence of a page under docs/ is an example. A page's examples run in
order in one namespace, as a reader would run them. A fence right after a
``<!-- gpu -->`` line needs a device: the host test skips it, and the test marked
``gpu`` runs the page's examples, host and device, in order. Examples are compiled
against the page's own path and line numbers, so a traceback points into the page
and ``inspect.getsource`` (which hawk uses) reads the kernel from it.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
GPU_MARK = "<!-- gpu -->"

# The modules whose public names the API page documents and this file checks.
API_MODULES = (
    "eagle.arrays",
    "eagle.cuda",
    "eagle.gemm",
    "eagle.gemm.plan",
    "eagle.plan",
    "eagle.diff",
    "hawk",
    "hawk.math",
    "hawk.emit.policy",
    "hawk.contraction",
    "hawk.diff",
)


def _assigns(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return False
    return any(isinstance(target, ast.Name) and target.id == name for target in targets)


@dataclass(frozen=True)
class Example:
    """One ```python fence of a page."""

    page: Path
    line: int  # the line of the fence's first code line, 1-based
    source: str
    gpu: bool

    def run(self, namespace: dict[str, Any]) -> None:
        padded = "\n" * (self.line - 1) + self.source
        exec(compile(padded, str(self.page), "exec"), namespace)


def examples(page: Path) -> list[Example]:
    """The ```python fences of ``page``, in order; a fence after ``GPU_MARK`` needs a device.

    Raises:
        ValueError: an unclosed fence, or a ``GPU_MARK`` not right before a python fence.
    """
    lines = page.read_text().splitlines()
    found: list[Example] = []
    index = 0
    while index < len(lines):
        text = lines[index].strip()
        if text == GPU_MARK and not (
            index + 1 < len(lines) and lines[index + 1].strip() == "```python"
        ):
            raise ValueError(f"{page.name}:{index + 1}: {GPU_MARK} must sit right before a fence")
        if text != "```python":
            index += 1
            continue
        end = next((i for i in range(index + 1, len(lines)) if lines[i].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{page.name}:{index + 1}: the python fence is never closed")
        gpu = index > 0 and lines[index - 1].strip() == GPU_MARK
        source = "\n".join(lines[index + 1 : end]) + "\n"
        found.append(Example(page, index + 2, source, gpu))
        index = end + 1
    return found


def _run_page(page: Path, *, gpu: bool) -> int:
    """Run the page's examples in order, in one namespace; return how many ran."""
    chosen = [example for example in examples(page) if gpu or not example.gpu]
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    for example in chosen:
        example.run(namespace)
    return len(chosen)


HOST_PAGES = [page for page in PAGES if any(not e.gpu for e in examples(page))]
GPU_PAGES = [page for page in PAGES if any(e.gpu for e in examples(page))]


@pytest.mark.parametrize("page", HOST_PAGES, ids=lambda page: page.name)
def test_host_examples_run(page):
    ran = _run_page(page, gpu=False)
    assert ran == sum(not example.gpu for example in examples(page))


@pytest.mark.gpu
@pytest.mark.parametrize("page", GPU_PAGES, ids=lambda page: page.name)
def test_all_examples_run_on_a_device(page):
    assert _run_page(page, gpu=True) == len(examples(page))


def test_the_user_pages_have_examples():
    for name in ("quickstart.md", "gemm.md", "hawk.md", "capture.md"):
        assert examples(DOCS / name), f"docs/{name} has no ```python example"


def test_examples_reads_fences_and_gpu_marks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# T\n\n```python\nx = 1\n```\n\n<!-- gpu -->\n```python\ny = x\n```\n")
    first, second = examples(page)
    assert (first.line, first.source, first.gpu) == (4, "x = 1\n", False)
    assert (second.line, second.source, second.gpu) == (9, "y = x\n", True)
    namespace: dict[str, Any] = {}
    first.run(namespace)
    assert namespace["x"] == 1


def test_a_stray_gpu_mark_is_an_error(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- gpu -->\n\nsome prose\n")
    with pytest.raises(ValueError, match="must sit right before a fence"):
        examples(page)


def test_an_example_error_points_into_the_page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nx = 1\nraise KeyError(x)\n```\n")
    (example,) = examples(page)
    with pytest.raises(KeyError) as info:
        example.run({})
    assert (info.traceback[-1].path, info.traceback[-1].lineno + 1) == (page, 5)


def test_every_page_is_in_the_toctree():
    index = (DOCS / "index.md").read_text()
    toctree = re.search(r"```\{toctree\}\n(.*?)```", index, re.S)
    assert toctree, "docs/index.md has no toctree"
    entries = {line.strip() for line in toctree.group(1).splitlines()}
    assert {page.stem for page in PAGES} - {"index"} <= entries


def test_benchmarks_page_includes_the_recorded_results():
    page = (DOCS / "benchmarks.md").read_text()
    included = re.search(r"```\{include\} (\S+)", page)
    assert included and included.group(1) == "../benchmarks/RESULTS.md"
    assert (DOCS / included.group(1)).is_file()


def test_api_page_documents_every_module():
    page = (DOCS / "api.md").read_text()
    documented = re.findall(r"^\.\. automodule:: (\S+)$", page, re.M)
    assert sorted(documented) == sorted(API_MODULES)


def test_api_page_lists_the_plan_names_once():
    page = (DOCS / "api.md").read_text()
    excluded = re.search(r"^\.\. automodule:: eagle\.gemm\n\s+:exclude-members: (.+)$", page, re.M)
    assert excluded, "the eagle.gemm section should exclude the names of eagle.gemm.plan"
    plan = importlib.import_module("eagle.gemm.plan")
    assert {name.strip() for name in excluded.group(1).split(",")} == set(plan.__all__)


# -- docstrings -------------------------------------------------------------------------


def _own_doc(obj: Any) -> str | None:
    """The docstring ``obj`` itself carries (a class's is not inherited, and the
    signature a dataclass or NamedTuple writes for itself does not count)."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__")
        if doc and doc.startswith(f"{obj.__name__}("):
            return None
        return doc
    if isinstance(obj, classmethod | staticmethod):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    return getattr(obj, "__doc__", None)


def _module_source(module: ModuleType) -> ast.Module | None:
    try:
        return ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return None


def _constant_has_doc(module: ModuleType, name: str, seen: frozenset[str] = frozenset()) -> bool:
    """True when ``name`` is assigned in ``module`` (or the module it is imported from)
    with a string literal after it or a ``#:`` comment before it."""
    tree = _module_source(module)
    if tree is None or module.__name__ in seen:
        return False
    lines = inspect.getsource(module).splitlines()
    body = tree.body
    for position, node in enumerate(body):
        if isinstance(node, ast.ImportFrom) and any(
            (alias.asname or alias.name) == name for alias in node.names
        ):
            base = importlib.util.resolve_name(
                "." * node.level + (node.module or ""), module.__package__ or ""
            )
            source = importlib.import_module(base)
            return _constant_has_doc(source, name, seen | {module.__name__})
        if not _assigns(node, name):
            continue
        after = body[position + 1] if position + 1 < len(body) else None
        if (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            return True
        return node.lineno > 1 and lines[node.lineno - 2].strip().startswith("#:")
    return False


def _is_routine(member: Any) -> bool:
    return inspect.isfunction(member) or isinstance(member, classmethod | staticmethod | property)


def undocumented(module: ModuleType) -> list[str]:
    """The public names of ``module`` (its ``__all__``, and the public methods and
    properties their classes define) that carry no docstring."""
    missing: list[str] = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj):
            if not _own_doc(obj):
                missing.append(name)
        elif not _constant_has_doc(module, name):
            missing.append(name)
        if not inspect.isclass(obj):
            continue
        missing.extend(
            f"{name}.{attr}"
            for attr, member in vars(obj).items()
            if not attr.startswith("_") and _is_routine(member) and not _own_doc(member)
        )
    return missing


@pytest.mark.parametrize("name", API_MODULES)
def test_public_names_have_docstrings(name):
    module = importlib.import_module(name)
    assert _own_doc(module), f"module {name} has no docstring"
    assert hasattr(module, "__all__"), f"module {name} has no __all__ naming its public names"
    assert undocumented(module) == [], f"{name}: public names without a docstring"


def test_undocumented_finds_what_lacks_a_docstring(tmp_path, monkeypatch):
    (tmp_path / "probe_docs.py").write_text(
        '"""A probe."""\n'
        "from dataclasses import dataclass\n"
        '__all__ = ["LIMIT", "SIZE", "Rec", "bare", "told"]\n'
        "#: documented before\n"
        "LIMIT = 3\n"
        "SIZE = 4\n"
        "@dataclass\n"
        "class Rec:\n"
        "    x: int\n"
        "    def method(self):\n"
        "        return self.x\n"
        "    @property\n"
        "    def prop(self):\n"
        '        """Documented."""\n'
        "def bare():\n"
        "    pass\n"
        "def told():\n"
        '    """Told."""\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("probe_docs")
    assert undocumented(module) == ["SIZE", "Rec", "Rec.method", "bare"]


# -- docstring examples -----------------------------------------------------------------


def _package_modules() -> list[str]:
    names = []
    for package in ("eagle", "hawk"):
        names.append(package)
        path = importlib.import_module(package).__path__
        names.extend(
            info.name
            for info in pkgutil.walk_packages(path, f"{package}.")
            if not info.name.endswith(".__main__")
        )
    return names


def test_docstring_examples_run():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for name in _package_modules():
        for test in finder.find(importlib.import_module(name)):
            runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries > 0, "no docstring holds a >>> example"
