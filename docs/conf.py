"""Sphinx configuration for the eagle + hawk documentation.

Build with ``nox -s docs`` (``sphinx-build -W -n --keep-going -b html docs docs/_build/html``):
warnings are errors, and so is a cross-reference that does not resolve (nitpicky mode).
Nothing here reaches the network: no intersphinx, no remote images.
"""

from __future__ import annotations

import ast
import builtins
import html
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from sphinx import addnodes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document the checkout even when the package is not installed
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import facts  # noqa: E402  (docs/_ext/facts.py: what the pages state, read from the code)

project = "eagle + hawk"
author = "the eagle + hawk authors"
copyright = "2026, the eagle + hawk authors"
release = importlib.import_module("eagle").__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",  # [source] links to highlighted module sources, made offline
]

exclude_patterns = ["_build", "_scripts", "_ext"]

myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist", "substitution"]
# ``{{ name }}`` on a page: a table or a phrase generated from the code and the recorded
# benchmark figures when the site is built (docs/_ext/facts.py), never typed by hand.
myst_substitutions = facts.substitutions()

autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# eagle.torch imports torch at the top; document it from its docstrings where torch is absent.
autodoc_mock_imports = [] if importlib.util.find_spec("torch") else ["torch"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# Attributes sections become field lists, so a documented attribute is not described twice.
napoleon_use_ivar = True

# Every cross-reference must resolve, except to the standard library and third-party
# packages, which this offline build does not link (no intersphinx).
nitpicky = True
_THIRD_PARTY = (
    r"(collections|contextlib|pathlib|typing|types|enum|numpy|np|ml_dtypes|torch|cuda|nvmath)"
)
nitpick_ignore_regex = [
    (r"py:(class|obj|data|exc)", _THIRD_PARTY + r"(\..+)?"),
    (r"py:mod", r"ast|inspect|linecache"),
    # private records in the signatures of objects eagle makes (never user-constructed),
    # and bases kept in private modules (the bound launches' ``_bound.Bound``)
    (r"py:class", r"(eagle|hawk)(\.\w+)*\._\w+(\.\w+)*"),
]

html_theme = "furo"
html_title = f"eagle + hawk {release}"
html_static_path = ["_static"]
html_css_files = ["eagle.css"]
# copy buttons on code, scroll cues on wide tables (docs/_static/eagle.js: no network)
html_js_files = ["eagle.js"]

# The hawk declarations are annotations, never called: their entries show how they are
# written instead of ``(*args, **kwargs)``.
DECLARATION_USAGE = {
    "hawk.Scalar": "",
    "hawk.Param": "",
    "hawk.Table": '["label":extent, ...]',
    "hawk.Mutable": "[hawk.Scalar | hawk.Table...]",
}


# An example right after this marker needs a device (tests/test_docs.py reads it); the
# rendered page shows a note in its place.
GPU_MARK = "<!-- gpu -->"
GPU_NOTE = '<p class="needs-gpu">Needs a CUDA GPU</p>'
# A ```text fence after this marker is what the example before it prints (the tests check
# it); the rendered page labels it.
OUTPUT_MARK = "<!-- output -->"
OUTPUT_NOTE = '<p class="example-output">Output</p>'
# ``<!-- requires cupy -->`` right before an example (or its GPU marker) makes the tests
# skip that example where the module is not installed; the page says so.
REQUIRES_MARK = re.compile(r"^<!-- requires ([\w.]+) -->$")
MODULE_NAMES = {"cupy": "CuPy", "torch": "PyTorch"}


def _requires_note(module: str) -> str:
    return f'<p class="needs-gpu">Needs {MODULE_NAMES.get(module, module)}</p>'


def with_gpu_notes(text: str) -> str:
    """``text`` with a visible note before each line that is the GPU marker, the output
    marker, or an example's module requirement."""
    lines = text.split("\n")
    shown = []
    for index, line in enumerate(lines):
        stripped = line.strip()
        following = lines[index + 1].strip() if index + 1 < len(lines) else ""
        required = REQUIRES_MARK.match(stripped)
        if stripped == GPU_MARK:
            shown.append(f"{GPU_NOTE}\n\n{line}")
        elif stripped == OUTPUT_MARK:
            shown.append(f"{OUTPUT_NOTE}\n\n{line}")
        elif required and following in (GPU_MARK, "```python"):
            shown.append(f"{_requires_note(required.group(1))}\n\n{line}")
        else:
            shown.append(line)
    return "\n".join(shown)


def _scan(tree: ast.Module) -> tuple[set[str], set[str], list[str]]:
    """What a piece of code binds at its top level (assignments, definitions), what its
    imports bind, and the names it reads from outside itself, in order of first use. A
    function's parameters and locals stay inside it."""
    bound: set[str] = set()
    imported: set[str] = set()
    reads: list[tuple[int, int, str]] = []

    def stored(node: ast.AST) -> set[str]:
        return {
            n.id
            for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del)
        }

    def visit(node: ast.AST, local: frozenset[str]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
            params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
            for default in [*args.defaults, *args.kw_defaults]:
                if default is not None:
                    visit(default, local)
            if not isinstance(node, ast.Lambda):
                for decorator in node.decorator_list:
                    visit(decorator, local)
                if not local:
                    bound.add(node.name)
            body = node.body if isinstance(node.body, list) else [node.body]
            inner = local | params | {n for part in body for n in stored(part)}
            for part in body:
                visit(part, frozenset(inner))
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id not in local:
                reads.append((node.lineno, node.col_offset, node.id))
            elif not local:
                bound.add(node.id)
            return
        if isinstance(node, ast.ExceptHandler) and node.name and not local:
            bound.add(node.name)
        for child in ast.iter_child_nodes(node):
            visit(child, local)

    visit(tree, frozenset())
    order = list(dict.fromkeys(name for _, _, name in sorted(reads)))
    return bound, imported, order


CONTINUES_SHOWN = 5  # names listed in a continuation note; more are counted


def continued_names(text: str) -> dict[int, tuple[list[str], bool]]:
    """For each ```python fence of a page (by the line index of its opening) that reads
    names earlier fences bound: those names (the imported ones left out), and whether it
    also reads names they imported."""
    lines = text.split("\n")
    earlier: set[str] = set()
    imports: set[str] = set()
    found: dict[int, tuple[list[str], bool]] = {}
    index = 0
    while index < len(lines):
        if lines[index].strip() != "```python":
            index += 1
            continue
        end = next((i for i in range(index + 1, len(lines)) if lines[i].strip() == "```"), None)
        if end is None:
            break
        try:
            tree = ast.parse("\n".join(lines[index + 1 : end]))
        except SyntaxError:
            index = end + 1
            continue
        names, imported, loaded = _scan(tree)
        mine = names | imported
        read = [n for n in loaded if n not in mine and n not in vars(builtins)]
        values = [n for n in read if n in earlier]
        modules = any(n in imports for n in read)
        if values or modules:
            found[index] = (values, modules)
        earlier |= names - imported
        imports |= imported
        earlier -= imported
        index = end + 1
    return found


def with_continuation_notes(text: str) -> str:
    """``text`` with a note before each example that goes on from earlier ones, naming what
    it uses from them (before the example's own markers)."""
    lines = text.split("\n")
    for index, (names, modules) in sorted(continued_names(text).items(), reverse=True):
        if names:
            shown = ", ".join(f"<code>{html.escape(n)}</code>" for n in names[:CONTINUES_SHOWN])
            if len(names) > CONTINUES_SHOWN:
                shown += f" and {len(names) - CONTINUES_SHOWN} more"
            uses = f"uses {shown}" + (" and its imports" if modules else "")
        else:
            uses = "uses its imports"
        note = f'<p class="continues">Continues the code above: {uses}.</p>\n'
        at = index
        while at > 0 and (
            lines[at - 1].strip() == GPU_MARK or REQUIRES_MARK.match(lines[at - 1].strip())
        ):
            at -= 1
        lines.insert(at, note)
    return "\n".join(lines)


def _gpu_notes(app, docname, source):
    source[0] = with_gpu_notes(with_continuation_notes(source[0]))


def _skip_field_aliases(app, what, name, obj, skip, options):
    """Leave out a NamedTuple's field accessors: the class's Attributes section names them."""
    doc = getattr(obj, "__doc__", None) or ""
    return True if doc.startswith("Alias for field number") else None


# Classes only eagle and hawk make (bound work, and the records a call returns): their
# constructors are not yours to call, so their entries show no signature.
MADE_BY_EAGLE = {
    "eagle.plan.BoundPlan",
    "eagle.gemm.capture.BoundGemm",
    "eagle.gemm.BoundGemm",
    "eagle.gemm.plan.LoweredPlan",
    "eagle.gemm.plan.CapturedCall",
    "eagle.gemm.plan.CapturedGemmCall",
    "hawk.records.RecognizedContraction",
    "hawk.records.ContractionOperand",
}

# Fields of public records that eagle and hawk fill in for their own use (how a step runs,
# how the recogniser traced the fold): the API pages leave them out.
INTERNAL_FIELDS = {
    "eagle.gemm.plan.PlanStep": ("device_fn", "host_fn"),
    "hawk.records.RecognizedContraction": (
        "carry",
        "reduce_var",
        "staged_fanin",
        "fanin_source",
        "adjoint_accumulates",
    ),
    "hawk.records.ContractionOperand": ("reads", "reduce_stride", "stride_labels"),
}


def without_internal_fields(name: str, lines: list[str]) -> list[str]:
    """``lines`` of ``name``'s docstring (as napoleon writes it) without the ``:ivar:`` and
    ``:vartype:`` entries of its internal fields."""
    hidden = INTERNAL_FIELDS.get(name, ())
    kept: list[str] = []
    skipping = False
    for line in lines:
        field = re.match(r"^:(?:ivar|vartype) (?:[^:]* )?(\w+):", line)
        if field:
            skipping = field.group(1) in hidden
        elif not line.startswith((" ", "\t")) or not line.strip():
            skipping = False
        if not skipping:
            kept.append(line)
    return kept


def _hide_internal_fields(app, what, name, obj, options, lines):
    lines[:] = without_internal_fields(name, lines)


def _declaration_signature(app, what, name, obj, options, signature, return_annotation):
    """Drop the constructor signature of the hawk declarations (never called) and of the
    classes only eagle makes."""
    return ("", None) if name in DECLARATION_USAGE or name in MADE_BY_EAGLE else None


def _declaration_usage(app, doctree):
    """Write how each hawk declaration is subscripted after its name."""
    for signature in doctree.findall(addnodes.desc_signature):
        usage = DECLARATION_USAGE.get(f"{signature.get('module')}.{signature.get('fullname')}")
        if usage:
            signature += addnodes.desc_sig_name(usage, usage)


def _import(dotted: str) -> Any:
    """The object a dotted name refers to, or None when it does not import."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except Exception:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _documented_names(env) -> dict[int, str]:
    """The documented name of every object the API pages describe, by the object's id."""
    objects = env.get_domain("py").objects
    cache = getattr(env, "_eagle_documented", None)
    if cache is None or cache[0] != len(objects):
        names: dict[int, str] = {}
        for name, entry in objects.items():
            if entry.objtype in ("class", "function", "exception", "data", "module"):
                obj = _import(name)
                if obj is not None:
                    names.setdefault(id(obj), name)
        cache = (len(objects), names)
        env._eagle_documented = cache
    return cache[1]


def _resolve_alias(app, env, node, contnode):
    """Link a name that reaches a documented object by another path (a re-export such as
    ``eagle.gemm.contraction.RecognizedContraction``, or the defining module a type
    annotation names) to where that object is documented."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    module, cls = node.get("py:module"), node.get("py:class")
    scopes = [f"{module}.{cls}.", f"{module}.", ""] if cls else [f"{module}.", ""]
    documented = None
    for scope in scopes if module else [""]:
        obj = _import(scope + target)
        if obj is not None and not isinstance(obj, (bool, int, float, str)):
            documented = _documented_names(env).get(id(obj))
            break
    if documented is None or documented == target:
        return None
    matches = env.get_domain("py").resolve_any_xref(
        env, node["refdoc"], app.builder, documented, node, contnode
    )
    return matches[0][1] if matches else None


def setup(app):
    app.connect("autodoc-skip-member", _skip_field_aliases)
    app.connect("autodoc-process-docstring", _hide_internal_fields)
    app.connect("autodoc-process-signature", _declaration_signature)
    app.connect("doctree-read", _declaration_usage)
    app.connect("source-read", _gpu_notes)
    app.connect("missing-reference", _resolve_alias)
