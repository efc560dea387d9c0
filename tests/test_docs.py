"""The documentation: its examples run, its pages are reachable, its API is documented.

Also the ``>>>`` examples in the docstrings of every eagle and hawk module.

Every ```python fence of a page under docs/ (the API pages and the how-to guides too) is
an example. A page's examples run in order in one namespace, as a reader would run them.
A fence right after a ``<!-- gpu -->`` line needs a device: the host test skips it, and
the test marked ``gpu`` runs the page's examples, host and device, in order. A page with a
``<!-- requires torch -->`` line needs that module: where it is not installed (CI), its
tests skip; the same line right before one example (or its ``<!-- gpu -->`` line) skips
that example alone. A ```text fence after an ``<!-- output -->`` line, right after an
example, is what the example prints: the test compares them. Examples are compiled
against the page's own path and line numbers, so a traceback points into the page and
``inspect.getsource`` (which hawk uses) reads the kernel from it.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import doctest
import importlib
import importlib.util
import inspect
import io
import json
import pkgutil
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests._util import importable

DOCS = Path(__file__).resolve().parents[1] / "docs"
# the guide's pages: the top level and the how-to guides
PAGES = sorted(DOCS.glob("*.md")) + sorted((DOCS / "howto").glob("*.md"))
API_PAGES = sorted((DOCS / "api").glob("*.md"))
GPU_MARK = "<!-- gpu -->"
OUTPUT_MARK = "<!-- output -->"
REQUIRES = re.compile(r"^<!-- requires ([\w.]+) -->$")


def shown(page: Path) -> str:
    """``page``'s path under docs/, as test ids and messages name it."""
    return page.relative_to(DOCS).as_posix() if page.is_relative_to(DOCS) else page.name


# The modules whose public names the API pages (docs/api/) document and this file checks.
API_MODULES = (
    "eagle.arrays",
    "eagle.cuda",
    "eagle.gemm",
    "eagle.gemm.dtypes",
    "eagle.gemm.plan",
    "eagle.gemm.contraction",
    "eagle.plan",
    "eagle.diff",
    "eagle.errors",
    "eagle.torch",
    "hawk",
    "hawk.math",
    "hawk.emit.policy",
    "hawk.contraction",
    "hawk.records",
    "hawk.diff",
    "hawk.dtypes",
    "hawk.errors",
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
    output: str | None = None  # what it prints, from the ```text fence after it
    requires: tuple[str, ...] = ()  # modules this example alone needs

    def run(self, namespace: dict[str, Any]) -> None:
        """Run the example in ``namespace``; check what it prints where the page shows it."""
        padded = "\n" * (self.line - 1) + self.source
        code = compile(padded, str(self.page), "exec")
        if self.output is None:
            exec(code, namespace)
            return
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(code, namespace)
        assert _lines(printed.getvalue()) == _lines(self.output), (
            f"docs/{shown(self.page)}:{self.line}: the example prints\n{printed.getvalue()}"
            f"but the page shows\n{self.output}"
        )


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def _fence(lines: list[str], start: int, page: Path) -> int:
    """The index of the line closing the fence opened at ``start``."""
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() == "```"), None)
    if end is None:
        raise ValueError(f"{shown(page)}:{start + 1}: the fence is never closed")
    return end


def examples(page: Path) -> list[Example]:
    """The ```python fences of ``page``, in order; a fence after ``GPU_MARK`` needs a device,
    a ```text fence after ``OUTPUT_MARK`` is the output of the example before it.

    Raises:
        ValueError: an unclosed fence, a ``GPU_MARK`` not right before a python fence, or
            an ``OUTPUT_MARK`` not right before a text fence that follows an example.
    """
    lines = page.read_text().splitlines()
    found: list[Example] = []
    index = 0
    while index < len(lines):
        text = lines[index].strip()
        if text == GPU_MARK and not (
            index + 1 < len(lines) and lines[index + 1].strip() == "```python"
        ):
            raise ValueError(f"{shown(page)}:{index + 1}: {GPU_MARK} must sit right before a fence")
        if text == OUTPUT_MARK:
            raise ValueError(
                f"{shown(page)}:{index + 1}: {OUTPUT_MARK} must sit right before a ```text "
                "fence, after a python example (one blank line between)"
            )
        if text != "```python":
            index += 1
            continue
        end = _fence(lines, index, page)
        gpu = index > 0 and lines[index - 1].strip() == GPU_MARK
        marks = lines[index - 2 if gpu else index - 1] if index > (1 if gpu else 0) else ""
        required = REQUIRES.match(marks.strip())
        source = "\n".join(lines[index + 1 : end]) + "\n"
        output = None
        after = end + 1
        while after < len(lines) and not lines[after].strip():
            after += 1
        if after + 1 < len(lines) and lines[after].strip() == OUTPUT_MARK:
            if lines[after + 1].strip() != "```text":
                raise ValueError(f"{shown(page)}:{after + 1}: {OUTPUT_MARK} needs a ```text fence")
            closing = _fence(lines, after + 1, page)
            output = "\n".join(lines[after + 2 : closing]) + "\n"
            end = closing
        requires = (required.group(1),) if required else ()
        found.append(Example(page, index + 2, source, gpu, output, requires))
        index = end + 1
    return found


def required_modules(page: Path) -> list[str]:
    """The modules the page's ``<!-- requires ... -->`` lines name for the whole page (not
    those right before one example)."""
    lines = page.read_text().splitlines()
    found = []
    for index, line in enumerate(lines):
        match = REQUIRES.match(line.strip())
        following = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if match and following not in (GPU_MARK, "```python"):
            found.append(match.group(1))
    return found


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _run_page(page: Path, *, gpu: bool) -> int:
    """Run the page's examples in order, in one namespace; return how many ran (skip the
    test where a module the page requires is not installed, and an example whose own
    module is not)."""
    for module in required_modules(page):
        if not _installed(module):
            pytest.skip(f"docs/{shown(page)} requires {module}, which is not installed")
    chosen = [
        example
        for example in examples(page)
        if (gpu or not example.gpu) and all(_installed(m) for m in example.requires)
    ]
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    for example in chosen:
        example.run(namespace)
    return len(chosen)


def _runnable(page: Path, *, gpu: bool) -> int:
    return sum(
        (gpu or not e.gpu) and all(_installed(m) for m in e.requires) for e in examples(page)
    )


HOST_PAGES = [page for page in PAGES + API_PAGES if any(not e.gpu for e in examples(page))]
GPU_PAGES = [page for page in PAGES + API_PAGES if any(e.gpu for e in examples(page))]


@pytest.mark.parametrize("page", HOST_PAGES, ids=shown)
def test_host_examples_run(page):
    assert _run_page(page, gpu=False) == _runnable(page, gpu=False)


@pytest.mark.gpu
@pytest.mark.parametrize("page", GPU_PAGES, ids=shown)
def test_all_examples_run_on_a_device(page, collector_paused):
    # the collector paused: an earlier test's object collected inside a page's capture may
    # make a CUDA call that invalidates it (api/cuda.md failed so once in 849 GPU tests)
    assert _run_page(page, gpu=True) == _runnable(page, gpu=True)


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


def test_a_page_that_requires_a_missing_module_skips(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- requires no_such_module_here -->\n\n```python\nraise ValueError\n```\n")
    assert required_modules(page) == ["no_such_module_here"]
    with pytest.raises(pytest.skip.Exception, match="requires no_such_module_here"):
        _run_page(page, gpu=False)


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


def toctree_entries(page: Path) -> set[str]:
    """The documents ``page``'s toctrees list, as paths under docs/ without ``.md``."""
    base = page.parent.relative_to(DOCS)
    found = set()
    for toctree in re.findall(r"```\{toctree\}\n(.*?)```", page.read_text(), re.S):
        for line in toctree.splitlines():
            entry = line.strip()
            if entry and not entry.startswith(":"):
                found.add((base / entry).as_posix())
    return found


def test_every_page_is_in_the_toctree():
    assert toctree_entries(DOCS / "index.md"), "docs/index.md has no toctree"
    listed = {entry for page in PAGES for entry in toctree_entries(page)}
    pages = {shown(page).removesuffix(".md") for page in PAGES} - {"index"}
    assert pages - listed == set(), "pages in no toctree"


def test_the_landing_example_is_short_and_shows_its_output():
    first = examples(DOCS / "index.md")[0]
    code = [line for line in first.source.splitlines() if line.strip()]
    assert len(code) <= 10, "the landing page's first example is over ten lines"
    assert first.output, "the landing page's first example shows no output"


def test_an_example_output_is_checked(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nprint(1 + 1)\n```\n\n<!-- output -->\n```text\n3\n```\n")
    (example,) = examples(page)
    assert example.output == "3\n"
    with pytest.raises(AssertionError, match="the page shows"):
        example.run({})
    page.write_text("```python\nprint(1 + 1)\n```\n\n<!-- output -->\n```text\n2\n```\n")
    examples(page)[0].run({})


def test_a_stray_output_mark_is_an_error(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Some prose.\n\n<!-- output -->\n```text\n2\n```\n")
    with pytest.raises(ValueError, match="must sit right before"):
        examples(page)


def test_an_example_that_requires_a_missing_module_is_skipped_alone(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nx = 1\n```\n\n<!-- requires no_such_module_here -->\n<!-- gpu -->\n"
        "```python\nraise ValueError\n```\n\n<!-- requires no_such_module_here -->\n"
        "```python\nraise ValueError\n```\n"
    )
    first, second, third = examples(page)
    assert (first.requires, second.requires, third.requires) == (
        (),
        ("no_such_module_here",),
        ("no_such_module_here",),
    )
    assert second.gpu and required_modules(page) == []
    assert _run_page(page, gpu=True) == 1


# The widest code line a page shows without scrolling. ruff formats the pages' code at
# 100 characters, so split a longer call with a trailing comma (ruff keeps it split).
CODE_WIDTH = 88


def long_code_lines(page: Path) -> list[str]:
    """``page:line`` of every line in a code fence longer than ``CODE_WIDTH``."""
    found, fence, code = [], None, False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
            code = not stripped[len(fence) :].startswith("{")  # not a directive
        elif fence is not None and stripped == fence:
            fence = None
        elif fence is not None and code and len(line) > CODE_WIDTH:
            found.append(f"{page.name}:{number}")
    return found


@pytest.mark.parametrize("page", PAGES + API_PAGES, ids=shown)
def test_code_lines_fit_the_column(page):
    assert long_code_lines(page) == [], f"code lines over {CODE_WIDTH} characters"


def test_long_code_lines_reads_only_fences(tmp_path):
    page = tmp_path / "page.md"
    wide = "x" * (CODE_WIDTH + 1)
    page.write_text(f"{wide}\n\n```python\nok = 1\n{wide}\n```\n\n```{{note}}\n{wide}\n```\n")
    assert long_code_lines(page) == ["page.md:5"]


def test_a_gpu_example_shows_a_note():
    conf = _sphinx_conf()
    assert conf.GPU_MARK == GPU_MARK
    shown = conf.with_gpu_notes(f"text\n\n{GPU_MARK}\n```python\nx = 1\n```\n")
    assert f"{conf.GPU_NOTE}\n\n{GPU_MARK}\n```python" in shown
    assert "CUDA GPU" in conf.GPU_NOTE


SCRIPTS = DOCS / "_scripts"


def _script(name: str) -> ModuleType:
    """Load docs/_scripts/<name>.py (the scripts import their helper from their folder)."""
    spec = importlib.util.spec_from_file_location(f"docs_script_{name}", SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _numbers(data: Any) -> list[float]:
    if isinstance(data, dict):
        return [n for value in data.values() for n in _numbers(value)]
    if isinstance(data, list):
        return [n for value in data for n in _numbers(value)]
    return [data] if isinstance(data, int | float) and not isinstance(data, bool) else []


def test_recorded_figures_are_those_of_the_results_and_the_page():
    recorded = json.loads((SCRIPTS / "recorded.json").read_text())
    results = (DOCS.parent / "benchmarks" / "RESULTS.md").read_text()
    made = _sphinx_conf().myst_substitutions  # the page as it is shown, headline included
    page = re.sub(
        r"\{\{\s*(\w+)\s*\}\}", lambda m: made[m.group(1)], (DOCS / "benchmarks.md").read_text()
    )
    for number in _numbers(recorded):
        if number in (64, 32, 128, 256, 4096, 2048):  # shapes, not figures
            continue
        text = f"{number:g}"
        assert text in results, f"{text} from recorded.json is not in benchmarks/RESULTS.md"
        assert text in page, f"{text} from recorded.json is not on docs/benchmarks.md"


@pytest.mark.parametrize("name", ["diagrams", "plots"])
def test_the_committed_pictures_are_what_the_scripts_draw(name, tmp_path, monkeypatch):
    script = _script(name)
    if name == "plots":  # from the recorded figures, whatever a local bench run left
        monkeypatch.setattr(script, "MEASURED", tmp_path / "no-bench-run")
    script.main([str(tmp_path)])
    drawn = sorted(path.name for path in tmp_path.glob("*.svg"))
    assert drawn, f"docs/_scripts/{name}.py drew nothing"
    for svg in drawn:
        committed = DOCS / "_static" / svg
        assert committed.is_file(), f"docs/_static/{svg} is not committed"
        assert (tmp_path / svg).read_text() == committed.read_text(), (
            f"docs/_static/{svg} is stale: run python docs/_scripts/{name}.py"
        )


def test_every_picture_is_shown_on_a_page():
    shown = "".join(page.read_text() for page in PAGES)
    for svg in (DOCS / "_static").glob("*.svg"):
        assert f"_static/{svg.name}" in shown, f"docs/_static/{svg.name} is on no page"


# -- the API pages ----------------------------------------------------------------------

# Modules shown on the API pages by their docstring only: how hawk emits code.
INSIDE_MODULES = (
    "hawk.emit.host",
    "hawk.emit.cuda",
    "hawk.emit.checks",
    "hawk.emit.reference",
    "hawk.emit.private",
)
# The compiler's inner layers: reached through hawk's API, not called by users, and not
# listed name by name.
INTERNAL_MODULES = (
    "hawk.emit",
    "hawk.emit.checks",
    "hawk.emit.cuda",
    "hawk.emit.host",
    "hawk.emit.reference",
    "hawk.ir",
    "hawk.ir.build",
    "hawk.ir.expr",
    "hawk.ir.planes",
    "hawk.ir.printing",
    "hawk.ir.rules",
    "hawk.ir.stmt",
    "hawk.kinds",
)

_DIRECTIVE = re.compile(r"^\.\. (automodule|autoclass|autodata|autofunction):: ([\w.]+)", re.M)


@dataclass(frozen=True)
class Directive:
    """One autodoc directive of an API page, with its options."""

    kind: str
    target: str
    options: dict[str, str]

    def names(self) -> list[str]:
        """The dotted names of the objects it documents."""
        if self.kind != "automodule":
            return [self.target]
        if "no-members" in self.options:
            return []
        excluded = {n.strip() for n in self.options.get("exclude-members", "").split(",")}
        module = _api_module(self.target)
        if module is None:
            return []
        return [f"{self.target}.{name}" for name in module.__all__ if name not in excluded]


def api_directives(pages: list[Path]) -> list[Directive]:
    """The autodoc directives of ``pages``, in order."""
    found = []
    for page in pages:
        lines = page.read_text().splitlines()
        for index, line in enumerate(lines):
            match = _DIRECTIVE.match(line)
            if not match:
                continue
            options = {}
            for option in lines[index + 1 :]:
                parsed = re.match(r"^\s+:([\w-]+):\s*(.*)$", option)
                if not parsed:
                    break
                options[parsed.group(1)] = parsed.group(2)
            found.append(Directive(match.group(1), match.group(2), options))
    return found


def _api_module(name: str) -> ModuleType | None:
    """The module, or None for ``eagle.torch`` where torch is not installed."""
    if name == "eagle.torch" and importlib.util.find_spec("torch") is None:
        return None
    return importlib.import_module(name)


def _lookup(dotted: str) -> Any:
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _documented() -> dict[int, list[str]]:
    """Every object the API pages describe, by id, with the names it is described under."""
    described: dict[int, list[str]] = {}
    for directive in api_directives(API_PAGES):
        for name in directive.names():
            described.setdefault(id(_lookup(name)), []).append(name)
    return described


def _public_modules() -> list[str]:
    return [
        name for name in _package_modules() if not any(p.startswith("_") for p in name.split("."))
    ]


def test_api_pages_are_in_the_api_toctree():
    toctree = re.search(r"```\{toctree\}\n(.*?)```", (DOCS / "api.md").read_text(), re.S)
    assert toctree, "docs/api.md has no toctree"
    entries = {line.strip() for line in toctree.group(1).splitlines()}
    assert {f"api/{page.stem}" for page in API_PAGES} <= entries


def test_api_pages_document_every_api_module():
    modules = [d.target for d in api_directives(API_PAGES) if d.kind == "automodule"]
    assert sorted(modules) == sorted({*API_MODULES, *INSIDE_MODULES})
    assert len(modules) == len(set(modules)), "a module is documented twice"


def test_every_public_module_is_documented_or_internal():
    documented = _documented()
    missing = []
    for name in _public_modules():
        if name in API_MODULES or name in INTERNAL_MODULES:
            continue
        module = importlib.import_module(name)
        assert hasattr(module, "__all__"), f"module {name} has no __all__"
        missing.extend(
            f"{name}.{attr}"
            for attr in module.__all__
            if not inspect.ismodule(getattr(module, attr))
            and id(getattr(module, attr)) not in documented
        )
    assert missing == [], "public names on no API page (document them, or make them private)"


def test_every_api_name_is_described_exactly_once():
    documented = _documented()
    twice = {names[0]: names for names in documented.values() if len(names) > 1}
    assert twice == {}, "described on more than one API page entry; exclude the re-exports"
    missing = [
        f"{name}.{attr}"
        for name in API_MODULES
        if (module := _api_module(name)) is not None
        for attr in module.__all__
        if id(getattr(module, attr)) not in documented
    ]
    assert missing == []


def _signature_is_useful(obj: Any) -> bool:
    """True when ``obj``'s signature names its parameters (not only ``*args, **kwargs``)."""
    try:
        parameters = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return False
    kinds = {parameter.kind for parameter in parameters}
    return kinds != {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}


def _sphinx_conf() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_conf", DOCS / "conf.py")
    assert spec and spec.loader
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    return conf


def test_every_api_name_has_a_signature_and_a_summary():
    written = _sphinx_conf().DECLARATION_USAGE  # shown as written, e.g. Table["label":n]
    problems = []
    for names in _documented().values():
        name = names[0]
        obj = _lookup(name)
        members = [(name, obj)]
        if inspect.isclass(obj):
            members += [
                (f"{name}.{attr}", member)
                for attr, member in vars(obj).items()
                if not attr.startswith("_") and inspect.isfunction(member)
            ]
        for member_name, member in members:
            if inspect.isfunction(member) or inspect.isclass(member):
                doc = _own_doc(member) or ""
                if not doc.strip() or not doc.strip().splitlines()[0].strip():
                    problems.append(f"{member_name}: no summary line")
                raised = inspect.isclass(member) and issubclass(member, BaseException)
                if not (member_name in written or raised or _signature_is_useful(member)):
                    problems.append(f"{member_name}: no signature naming its parameters")
    assert problems == []


def test_the_declarations_show_how_they_are_written():
    written = _sphinx_conf().DECLARATION_USAGE
    import hawk

    assert set(written) == {f"hawk.{name}" for name in ("Scalar", "Param", "Table", "Mutable")}
    assert all(not _signature_is_useful(getattr(hawk, n.split(".")[1])) for n in written)


def test_api_directives_read_options(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        "```{eval-rst}\n.. automodule:: hawk.emit.policy\n   :exclude-members: using, current\n"
        "\n.. autodata:: eagle.plan.BLOCK_SIZE\n.. automodule:: hawk.diff\n   :no-members:\n```\n"
    )
    policy, block, diff = api_directives([page])
    assert policy.names() == [
        "hawk.emit.policy.CONTRACTIONS",
        "hawk.emit.policy.INT_OVERFLOWS",
        "hawk.emit.policy.MATH",
        "hawk.emit.policy.TABLE_ADDS",
        "hawk.emit.policy.Contraction",
        "hawk.emit.policy.Policy",
        "hawk.emit.policy.TableAdds",
        "hawk.emit.policy.Using",
    ]
    assert block.names() == ["eagle.plan.BLOCK_SIZE"]
    assert diff.names() == []


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
        if typing.get_origin(obj) is not None:  # a type alias (Literal[...]), as a constant
            if not _constant_has_doc(module, name):
                missing.append(name)
            continue
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
    module = _api_module(name)
    if module is None:
        pytest.skip("eagle.torch needs torch, which is not installed")
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
        if not importable(name):
            continue  # torch is optional: CI has none
        for test in finder.find(importlib.import_module(name)):
            runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries > 0, "no docstring holds a >>> example"


def test_the_internal_fields_the_api_pages_hide_are_fields_of_their_records():
    conf = _sphinx_conf()
    for name, fields in conf.INTERNAL_FIELDS.items():
        record = _lookup(name)
        known = {f.name for f in dataclasses.fields(record)}
        assert set(fields) <= known, f"{name} has no fields {set(fields) - known}"
    for name in conf.MADE_BY_EAGLE:
        assert inspect.isclass(_lookup(name)), name


def test_internal_fields_are_left_out_of_a_docstring():
    conf = _sphinx_conf()
    lines = [
        "A step.",
        "",
        ":ivar name: its name.",
        ":vartype name: str",
        ":ivar device_fn: runs it on the device,",
        "    given the buffers.",
        ":vartype device_fn: Callable",
        ":ivar kind: its kind.",
    ]
    kept = conf.without_internal_fields("eagle.gemm.plan.PlanStep", lines)
    assert kept == [
        "A step.",
        "",
        ":ivar name: its name.",
        ":vartype name: str",
        ":ivar kind: its kind.",
    ]


def test_an_example_that_goes_on_from_earlier_ones_is_marked():
    conf = _sphinx_conf()
    text = (
        "```python\nimport numpy as np\nx = np.ones(3)\n```\n\ntext\n\n"
        "```python\ny = 2 * x  # uses x\n```\n\n<!-- gpu -->\n```python\nz = 1\n```\n"
    )
    assert conf.continued_names(text) == {7: (["x"], False)}
    shown = conf.with_continuation_notes(text)
    assert '<p class="continues">Continues the code above: uses <code>x</code>.</p>' in shown
    assert shown.count('class="continues"') == 1
    scoped = "```python\ny = 1\n```\n\n```python\ndef f(y):\n    return y\n\n\nw = f(y)\n```\n"
    assert conf.continued_names(scoped) == {4: (["y"], False)}  # the call's y, not the param
    inner = "```python\ny = 1\n```\n\n```python\ndef f(y):\n    return y\n```\n"
    assert conf.continued_names(inner) == {}
    imports_only = "```python\nimport numpy as np\n```\n\n```python\nz = np.ones(2)\n```\n"
    assert conf.continued_names(imports_only) == {4: ([], True)}
    assert "Continues the code above: uses its imports." in (
        conf.with_continuation_notes(imports_only)
    )
