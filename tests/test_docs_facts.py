"""The facts the documentation states: the generated ones are what the code decides, the
hand-written ones agree with them, and no page or public docstring reads like a
development log.

docs/_ext/facts.py generates, when the site is built, what would drift if typed: the
dtypes of each route, the maths per dtype, the requirements and the benchmark headline.
What it cannot generate is tested here: every dtype a sentence claims for a subject (the
GEMM route, ``sgemm``, tensors, planes...) must be that subject's generated set; every
requirement a page states must be pyproject's and eagle's; each call the pages say takes
eagle Arrays only must still refuse another framework's array; and the words of a
development log ("Session 6", "in a later run", "the seed" for the design page) must
appear nowhere a user reads.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tests._util import FakeCalls
from tests.test_docs import (
    API_PAGES,
    DOCS,
    INSIDE_MODULES,
    INTERNAL_MODULES,
    PAGES,
    _package_modules,
    api_directives,
)

ROOT = DOCS.parent


@functools.cache
def _facts() -> ModuleType:
    """docs/_ext/facts.py, imported as the Sphinx build and the diagrams import it."""
    sys.path.insert(0, str(DOCS / "_ext"))
    return importlib.import_module("facts")


# -- where users read: the pages' prose and the public docstrings ------------------------


@dataclass(frozen=True)
class Passage:
    """A paragraph, a list item or a table row a user reads, with where it comes from."""

    path: Path
    line: int  # the line of its first character, 1-based
    text: str  # its lines joined by single spaces
    starts: tuple[int, ...]  # the offset in ``text`` where each following line begins
    owner: str = ""  # the name of the object whose docstring it is in, if any

    def line_of(self, offset: int) -> int:
        """The file line of the character at ``offset`` in ``text``."""
        return self.line + sum(start <= offset for start in self.starts)

    def where(self, offset: int) -> str:
        """``file:line`` of the character at ``offset``."""
        return f"{_shown(self.path)}:{self.line_of(offset)}"


def _shown(path: Path) -> Path:
    """``path`` from the checkout's root, where it is in the checkout."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def passages(path: Path, lines: list[str], first_line: int = 1, owner: str = "") -> list[Passage]:
    """The passages of ``lines`` (a page, or a docstring starting at ``first_line``): runs of
    non-blank lines, cut before each list item and table row; code fences left out."""
    found: list[Passage] = []
    block: list[tuple[int, str]] = []

    def flush() -> None:
        if block:
            text, starts = "", []
            for index, (_, line) in enumerate(block):
                if index:
                    text += " "
                    starts.append(len(text))
                text += line.strip()
            found.append(Passage(path, block[0][0], text, tuple(starts), owner))
            block.clear()

    fence, code = None, False  # the open fence's backticks, and whether it holds code
    for number, line in enumerate(lines, first_line):
        stripped = line.strip()
        if fence is not None and stripped == fence:
            fence = None
            flush()
            continue
        if fence is None and stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
            code = not stripped[len(fence) :].startswith("{")  # a directive's text is read
            flush()
            continue
        if (fence is not None and code) or not stripped or stripped.startswith((">>>", "...")):
            flush()
            continue
        if re.match(r"([-*] |\d+\. |\|)", stripped):
            flush()
        block.append((number, line))
    flush()
    return found


def page_passages(page: Path) -> list[Passage]:
    return passages(page, page.read_text().splitlines())


def _source_line(obj: Any, doc: str) -> tuple[Path, int] | None:
    """The file and line where ``obj``'s docstring ``doc`` begins."""
    try:
        path = Path(inspect.getsourcefile(obj) or "")
        start = inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        return None
    first = doc.strip().splitlines()[0].strip()
    file_lines = path.read_text().splitlines()
    for number in range(max(start - 1, 0), len(file_lines)):
        if first in file_lines[number]:
            # the docstring's first line sits on this line, after the opening quotes
            return path, number + 1 - (len(doc) - len(doc.lstrip("\n")))
    return None


def docstring_passages(obj: Any) -> list[Passage]:
    """The passages of ``obj``'s own docstring, placed in its source file."""
    doc = obj.__doc__ if inspect.ismodule(obj) else _own_doc(obj)
    if not doc or not doc.strip():
        return []
    where = _source_line(obj, doc)
    if where is None:
        return []
    path, line = where
    owner = getattr(obj, "__qualname__", getattr(obj, "__name__", ""))
    return passages(path, doc.splitlines(), line, owner)


def _own_doc(obj: Any) -> str | None:
    if isinstance(obj, classmethod | staticmethod):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    if inspect.isclass(obj):
        return obj.__dict__.get("__doc__")
    return getattr(obj, "__doc__", None) if inspect.isroutine(obj) else None


def _public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def _members(cls: type, inherited: bool = False) -> Iterator[Any]:
    """The public methods and properties of ``cls`` (its own, or also inherited ones)."""
    owners = [k for k in cls.__mro__ if k.__module__.startswith(("eagle", "hawk"))]
    for owner in owners if inherited else [cls]:
        for attr, member in vars(owner).items():
            if not attr.startswith("_") and (
                inspect.isfunction(member) or isinstance(member, classmethod | property)
            ):
                yield member


def public_objects() -> Iterator[Any]:
    """Every public module of eagle and hawk (walked by import), the classes and functions
    it exports (its ``__all__``, wherever they are defined) or defines under a public name,
    and their public methods. eagle.torch needs torch."""
    seen: set[int] = set()
    for name in _package_modules():
        if not _public(name):
            continue
        if name == "eagle.torch" and importlib.util.find_spec("torch") is None:
            continue
        module = importlib.import_module(name)
        yield module
        exported = set(getattr(module, "__all__", ()))
        for attr, obj in vars(module).items():
            if id(obj) in seen or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if attr in exported or (not attr.startswith("_") and obj.__module__ == name):
                seen.add(id(obj))
                yield obj
                if inspect.isclass(obj):
                    yield from _members(obj)


def docstring_corpus() -> list[Passage]:
    return [p for obj in public_objects() for p in docstring_passages(obj)]


def api_rendered() -> Iterator[Any]:
    """What the API pages (docs/api/) render: each directive's object, and for a module its
    ``__all__`` (less excluded members) and their members; an inside module's docstring."""
    for directive in api_directives(API_PAGES):
        target = directive.target
        if directive.kind == "automodule":
            if target == "eagle.torch" and importlib.util.find_spec("torch") is None:
                continue
            yield importlib.import_module(target)
            objects = [_lookup(name) for name in directive.names()]
        else:
            objects = [_lookup(target)]
        for obj in objects:
            yield obj
            if inspect.isclass(obj):
                yield from _members(obj, "inherited-members" in directive.options)


def _lookup(dotted: str) -> Any:
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


# -- development-log words -----------------------------------------------------------------

#: phrases of a development log, and what to write instead; random seeds are fine
DEVELOPMENT_WORDS = {
    r"\bsessions? \d+": "a development session: state the fact, or date it",
    r"\b(?:this|next|that|the same|an earlier|the previous) session\b": "a development session",
    r"\bin (?:a|the|three|two|several|one) (?:later|earlier) runs?\b": "a run of the diary",
    r"\blater runs?\b(?! pass)": "a run of the diary",
    r"\bsince that run\b|\bthat run's\b|\bin one run\b|\bthe run above\b": "a run of the diary",
    r"\bfinal run\b|\(run \d+\)|\brun \d+\b": "a run of the diary",
    r"\bmeasured again\b": "a run of the diary: give the latest figure",
    r"\baimed at\b": "a target of the diary: say what it does",
    r"\bthe design kept\b|\bdesign (?:page|doc)\b|DESIGN\.md": "the design page is not a user's",
    r"\bthe seed\b|\bseed's\b|\bseed (?:page|kernel|contraction|shape)\b|\bseed\s*=": (
        "the design page or a variable named for it (a random seed is fine)"
    ),
    r"\b(?:alternating|nine|three|\d+) turns\b|\bturns each\b|\bsides in turn\b": (
        "measurement bookkeeping: say what was measured"
    ),
    r"\bdevelopment machine\b|\bthe GPU machine\b": "the diary's machines",
    r"\bissues? #\d+": "an issue number",
    r"\bdid not pay off\b|\btried and dropped\b": "diary: benchmarks/RESULTS.md keeps it",
    r"\bTODO\b|\bFIXME\b|\bXXX\b": "an unfinished note",
}
_DEVELOPMENT = re.compile("|".join(f"(?:{p})" for p in DEVELOPMENT_WORDS), re.IGNORECASE)
#: a sentence that names one of these speaks of a random seed
_RANDOM_SEED = re.compile(r"random|\brng\b|hypothesis|default_rng|manual_seed", re.IGNORECASE)


def development_words(passage: Passage) -> list[str]:
    """``file:line: "phrase" (why)`` for each development-log phrase in ``passage``."""
    found = []
    for match in _DEVELOPMENT.finditer(passage.text):
        phrase = match.group(0)
        if "seed" in phrase.lower() and _RANDOM_SEED.search(passage.text):
            continue
        why = next(
            why for pattern, why in DEVELOPMENT_WORDS.items() if re.fullmatch(pattern, phrase, re.I)
        )
        found.append(f'{passage.where(match.start())}: "{phrase}" ({why})')
    return found


_SEED_NAME = re.compile(r"\bseed\b(?!=)")


def seed_names(path: Path) -> list[str]:
    """``file:line`` of each code line of ``path`` (its fences, or ``>>>`` lines) that names
    something ``seed`` other than a random seed."""
    found, fence = [], None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence else stripped
            continue
        code = (fence is not None and "{" not in fence) or stripped.startswith((">>>", "..."))
        if code and _SEED_NAME.search(line) and not _RANDOM_SEED.search(line):
            found.append(f"{_shown(path)}:{number}: {stripped!r} (name it for what it is)")
    return found


def _doc_files() -> list[Path]:
    """The files a user reads or whose text is drawn: the pages, the changelog (the site
    includes it) and the README, the scripts of the pictures, the facts generator and the
    Sphinx configuration."""
    return [
        *PAGES,
        *API_PAGES,
        ROOT / "CHANGELOG.md",
        ROOT / "README.md",
        *sorted((DOCS / "_scripts").glob("*.py")),
        *sorted((DOCS / "_ext").glob("*.py")),
        DOCS / "conf.py",
    ]


def test_no_development_log_words_in_docs():
    found = [w for path in _doc_files() for p in page_passages(path) for w in development_words(p)]
    found += [w for path in PAGES + API_PAGES for w in seed_names(path)]
    assert found == [], "development-log words where users read:\n" + "\n".join(found)


def test_a_variable_named_seed_is_found_in_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nrng = np.random.default_rng(seed=0)\nseed = eagle.plan.auto(k)\n```\n"
    )
    assert seed_names(page) == [f"{page}:3: 'seed = eagle.plan.auto(k)' (name it for what it is)"]


def test_no_development_log_words_in_public_docstrings():
    found = [w for p in docstring_corpus() for w in development_words(p)]
    assert found == [], "development-log words in public docstrings:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("Measured on 2026-12-02 (Session 6): forward 17.6 µs.", "Session 6"),
        ("It took 9.8 µs (in a later run).", "in a later run"),
        ("The KAN step takes 0.247 ms, against the 0.2 ms aimed at.", "aimed at"),
        ("A failing read calls hawk_fail itself (the design kept).", "the design kept"),
        ("Taken in nine alternating turns, eagle is 1.016 times torch.", "alternating turns"),
        ("the seed's contraction, one lane per output", "the seed"),
        ("    seed = eagle.plan.auto(contract)", "seed ="),
        ("1.71 times in three later runs, after the fix", "later runs"),
        ("not met (issue #15)", "issue #15"),
    ],
)
def test_development_words_are_found_with_their_place(tmp_path, text, phrase):
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\nFirst paragraph.\n\n{text}\n")
    (passage,) = [p for p in page_passages(page) if phrase.lower() in p.text.lower()]
    found = development_words(passage)
    assert len(found) == 1
    assert found[0].startswith(f"{page}:5: ") and phrase.lower() in found[0].lower(), found


def test_random_seeds_and_other_words_are_not_development_words(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "A failing test prints the EAGLE_TEST_SEED that reproduces its random data.\n\n"
        "The random seed of each test's data comes from the session's seed.\n\n"
        "`eagle.torch.function(kernel)` turns a hawk kernel into a PyTorch op; it returns.\n\n"
        "A Param keeps the number that run was given, whatever later runs pass.\n\n"
        "```python\nseed = 3  # code is not prose\n```\n"
    )
    assert [w for p in page_passages(page) for w in development_words(p)] == []


# -- sentence length -------------------------------------------------------------------------

#: the most words a sentence of a page may have; aim for 35
MAX_SENTENCE_WORDS = 40
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Za-z`(*\[{])")


def long_sentences(passage: Passage) -> list[str]:
    """``file:line: N words`` for each sentence of ``passage`` over MAX_SENTENCE_WORDS; table
    rows and a picture's options (its alt text) are not prose."""
    if passage.text.startswith(("|", "---")) or "_static/" in passage.text:
        return []
    found, start = [], 0
    for end in [m.start() for m in _SENTENCE_END.finditer(passage.text)] + [len(passage.text)]:
        sentence = passage.text[start:end]
        words = len(sentence.split())
        if words > MAX_SENTENCE_WORDS:
            found.append(f"{passage.where(start)}: {words} words: {sentence[:60]!r}...")
        match = _SENTENCE_END.match(passage.text, end)
        start = match.end() if match else end
    return found


def test_sentences_on_the_pages_are_short():
    found = [
        s for page in PAGES + API_PAGES for p in page_passages(page) for s in long_sentences(p)
    ]
    assert found == [], f"sentences over {MAX_SENTENCE_WORDS} words: split them\n" + "\n".join(
        found
    )


def test_long_sentences_are_found(tmp_path):
    page = tmp_path / "page.md"
    long = " ".join(["word"] * (MAX_SENTENCE_WORDS + 1))
    page.write_text(f"# T\n\nShort one. {long}. `code` starts the next.\n\n| {long} |\n")
    found = [s for p in page_passages(page) for s in long_sentences(p)]
    assert len(found) == 1 and found[0].startswith(f"{page}:3: {MAX_SENTENCE_WORDS + 1} words")


# -- what the API pages name ---------------------------------------------------------------

_PLAIN_PATH = re.compile(r"(?<![\w/`<])docs/[\w/.-]+\.md\b")
_DOTTED = re.compile(r"\b(?:eagle|hawk)(?:\.\w+)+")
#: modules shown on the API pages by their docstring, though not an API one calls
_SHOWN_INTERNALS = {*INSIDE_MODULES, "hawk.ir"}


def _named_internal(dotted: str) -> str | None:
    """The private name, or the internal module the API pages do not show, that ``dotted``
    reaches (None when it reaches neither)."""
    parts = dotted.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_"):
            return ".".join(parts[: index + 1])
    for length in range(len(parts), 0, -1):
        module = ".".join(parts[:length])
        if _is_module(module):
            hidden = module in INTERNAL_MODULES and module not in _SHOWN_INTERNALS
            return module if hidden else None
    return None


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def api_page_problems(passage: Passage) -> list[str]:
    """Plain ``docs/*.md`` paths and private or internal names in ``passage``."""
    found = [
        f'{passage.where(m.start())}: "{m.group(0)}" (link the page: :doc:`/name`)'
        for m in _PLAIN_PATH.finditer(passage.text)
    ]
    for match in _DOTTED.finditer(passage.text):
        internal = _named_internal(match.group(0))
        if internal is not None:
            found.append(
                f'{passage.where(match.start())}: "{match.group(0)}" names {internal}, which '
                "the API pages do not show (name the public API, or say it in words)"
            )
    return found


def test_the_api_pages_show_no_plain_paths_or_private_names():
    shown = [p for page in API_PAGES for p in page_passages(page)]
    shown += [p for obj in api_rendered() for p in docstring_passages(obj)]
    found = [problem for p in shown for problem in api_page_problems(p)]
    assert found == [], "\n".join(found)


def test_plain_paths_and_private_names_are_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Checked by name (``eagle.plan._planes``), raised later (docs/hawk.md); made from\n"
        "``hawk._registry.BUILTINS``. Fine: :doc:`/hawk`, ``hawk.emit.cuda.emit``,\n"
        "``eagle.plan.auto``, ``hawk.ir`` and benchmarks/RESULTS.md.\n"
    )
    found = [problem for p in page_passages(page) for problem in api_page_problems(p)]
    assert [re.search(r'"([^"]+)"', f).group(1) for f in found] == [
        "docs/hawk.md",
        "eagle.plan._planes",
        "hawk._registry.BUILTINS",
    ]


# -- dtype claims against the generated facts ----------------------------------------------

_DTYPE = r"(?:b?float(?:16|32|64)|u?int(?:8|16|32|64)|complex(?:64|128))"
_ITEM = rf"`*{_DTYPE}`*(?: \([^)]*\))?"
_LIST = re.compile(rf"{_ITEM}(?:(?:,? or |,? and |, |/){_ITEM})*")
_NOUN = r"(?: (?:planes|tensors|buffers|factors|operands|arrays|products))?"
_ONLY = re.compile(rf"\bonly (?P<a>{_LIST.pattern})|(?P<b>{_LIST.pattern}){_NOUN} only\b")
#: what introduces a list of dtypes as what something takes or is
_CUE = re.compile(
    r"(?:\btakes?|\baccepts?|\bare|\bis|\bbe|\bdtype,)\s+"
    r"(?:(?:planes|tensors|buffers|factors|operands|arrays) of\s+)?$"
)
_KEEPS_LOOP = re.compile(
    rf"(?P<list>{_LIST.pattern}) (?:CUDA |CPU )?(?:tensors|planes)\b[^.;]*?"
    r"\b(?:runs?|keeps?) (?:the|its)(?: kernel's)? (?:own )?loop"
)
_TAKES_ROUTE = re.compile(
    rf"GEMM route\b[^.;]*?\b(?:for|on) (?P<list>{_LIST.pattern}) (?:CUDA )?(?:tensors|planes)\b"
)


@functools.cache
def subjects() -> dict[str, tuple[re.Pattern[str], list[frozenset[str]]]]:
    """What a sentence may claim dtypes for, how it is named, and the generated sets it
    may claim (read from docs/_ext/facts.py)."""
    f = _facts()
    products = f.product_dtype_names()
    halves = [d for d in products if f.rounded(d)]
    sgemm = f.captured_dtypes(next(iter(f.CAPTURE_CALLS)))
    tf32 = [d for d in products if "tf32" in f.maths(d)]
    torch = [r.dtype for r in f.torch_routes()]
    outs = [f.out_dtypes(d) for d in products] + [
        sorted({o for d in halves for o in f.out_dtypes(d)})
    ]
    table: dict[str, tuple[str, list[list[str]]]] = {
        "sgemm": (r"\bsgemm\b|\bSgemm|captured_gemm_calls|check_plan_capturable", [sgemm]),
        "tf32": (r"\btf32\b|\bTF32\b", [tf32]),
        "torch": (r"eagle\.torch|\btensors?\b", [torch]),
        "flag": (r"\bflags?\b", [list(f.FLAG_DTYPES)]),
        "halves": (r"16-bit|\bhalf", [halves]),
        "out": (r"\bout\b", outs),
        "route": (r"GEMM route|\broutes?\b|\brouted\b", [f.route_dtypes()]),
        "products": (
            r"handle\.gemm|captured_calls|gemm_params|GemmParams|\bproducts?\b|matmul_step"
            r"|\bfactors?\b|\bhost path\b",
            [products, f.host_matmul_dtypes()],
        ),
        "planes": (r"\bplanes?\b", [f.plane_dtypes()]),
    }
    return {
        name: (re.compile(pattern), [frozenset(s) for s in sets])
        for name, (pattern, sets) in table.items()
    }


def _dtypes_of(text: str) -> frozenset[str]:
    return frozenset(re.findall(_DTYPE, re.sub(r"\([^)]*\)", "", text)))


def _sentences(passage: Passage) -> Iterator[tuple[int, str]]:
    """Each sentence of ``passage`` with its offset."""
    start = 0
    for match in re.finditer(r"(?<=[.;:!?])\s+(?=[A-Z`(*\[])", passage.text):
        yield start, passage.text[start : match.start()]
        start = match.end()
    yield start, passage.text[start:]


def dtype_claims(passage: Passage) -> list[str]:
    """Each dtype claim of ``passage`` that no subject its sentence names bears out: a
    dtype list said to be the only one ("float32 only"), a list of two or more dtypes, or
    dtypes said to run or keep the loop (the GEMM route takes them)."""
    found = []
    for offset, sentence in _sentences(passage):
        about = f"{passage.owner} {sentence}"
        named = [sets for pattern, sets in subjects().values() if pattern.search(about)]
        allowed = {s for sets in named for s in sets}
        route = frozenset(_facts().route_dtypes())
        for match in _KEEPS_LOOP.finditer(sentence):
            routed = _dtypes_of(match.group("list")) & route
            if routed:
                found.append(
                    f"{passage.where(offset + match.start())}: {match.group(0)!r}: "
                    f"{', '.join(sorted(routed))} take the GEMM route (docs/_ext/facts.py)"
                )
        for match in _TAKES_ROUTE.finditer(sentence):
            if _dtypes_of(match.group("list")) != route:
                found.append(
                    f"{passage.where(offset + match.start())}: {match.group(0)!r}: the GEMM "
                    f"route takes {', '.join(sorted(route))} (docs/_ext/facts.py)"
                )
        if not named:
            continue
        claims = [(m.start(), m.group("a") or m.group("b")) for m in _ONLY.finditer(sentence)]
        claims += [
            (m.start(), m.group(0))
            for m in _LIST.finditer(sentence)
            if _CUE.search(sentence[: m.start()]) and _is_enumeration(m.group(0))
        ]
        for start, text in claims:
            claimed = _dtypes_of(text)
            if claimed not in allowed:
                found.append(
                    f"{passage.where(offset + start)}: {text!r} in {sentence!r}: the generated "
                    f"sets for what the sentence names are "
                    f"{sorted(sorted(s) for s in allowed)}"
                )
    return found


def _is_enumeration(text: str) -> bool:
    """Whether a run of dtype names lists several: ``a or b``, ``a, b and c``, ``a/b`` (not
    ``float64, float32 otherwise``, two clauses)."""
    count = len(re.findall(_DTYPE, text))
    return count > 2 or (count == 2 and bool(re.search(r" or | and |/", text)))


def _claims_in(text: str) -> list[str]:
    page = Path("/nonexistent/page.md")
    return [c for p in passages(page, text.splitlines()) for c in dtype_claims(p)]


def test_the_drifted_claims_of_the_issue_are_caught():
    for text in [
        "The GEMM route takes float32 planes only.",
        "Under the gemm policy a kernel routes on float32 only.",
        "A captured product is float32 only.",
        "dtype: the planes' dtype, float32 (the default) or float64.",
        "It runs as one cuBLAS product on float32 CUDA tensors. float64 tensors and CPU "
        "tensors run the loop.",
        'contraction: ``"loop"`` or ``"gemm"`` (may take the GEMM route on the device for '
        "float32 tensors).",
        "The host path accepts float32 and float64, and numpy arrays as well.",
    ]:
        assert _claims_in(text), text


def test_true_claims_pass():
    f = _facts()
    for text in [
        f"The GEMM route takes {f.phrase(f.route_dtypes())} planes.",
        "sgemm takes float32 only; handle.gemm takes every product dtype.",
        '``math``: ``"tf32"`` (float32 only) rounds the factors.',
        f"Tensors are {f.phrase(r.dtype for r in f.torch_routes())}.",
        f"a one-element {f.phrase(f.FLAG_DTYPES)} flag",
        "16-bit planes compute in float32, and float64 planes in float64.",
    ]:
        assert _claims_in(text) == [], text


def test_dtype_claims_on_the_pages_match_the_generated_facts():
    found = [c for page in PAGES + API_PAGES for p in page_passages(page) for c in dtype_claims(p)]
    assert found == [], "\n".join(found)


def test_dtype_claims_in_public_docstrings_match_the_generated_facts():
    found = [c for p in docstring_corpus() for c in dtype_claims(p)]
    assert found == [], "\n".join(found)


# -- the generated facts -------------------------------------------------------------------

_SUBSTITUTION = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def test_every_substitution_a_page_uses_is_generated_and_each_is_used():
    made = set(_facts().substitutions())
    used = {name for page in PAGES + API_PAGES for name in _SUBSTITUTION.findall(page.read_text())}
    assert used - made == set(), "pages use substitutions docs/_ext/facts.py does not make"
    assert made - used == set(), "docs/_ext/facts.py makes substitutions no page uses"


def test_the_recorded_torch_facts_are_what_eagle_torch_decides():
    pytest.importorskip("torch")
    f = _facts()
    recorded = json.loads(f.TORCH_FACTS.read_text())
    assert [r.__dict__ for r in f.torch_routes_from_code()] == recorded, (
        "eagle.torch decides otherwise than docs/_ext/torch_facts.json says (what builds "
        "without torch show): run python docs/_ext/facts.py"
    )


def test_without_torch_the_build_reads_the_recorded_torch_facts(monkeypatch):
    f = _facts()
    real = importlib.util.find_spec
    monkeypatch.setattr(
        f.importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name)
    )
    recorded = json.loads(f.TORCH_FACTS.read_text())
    assert [r.__dict__ for r in f.torch_routes()] == recorded


def test_a_probe_refusal_is_told_from_a_failure():
    f = _facts()
    assert f._refused(lambda: f.product_dtypes("int32", "int32", "int32"), Exception)
    assert not f._refused(lambda: None, ValueError)
    with pytest.raises(KeyError):  # a probe that fails otherwise stops the build
        f._refused(lambda: {}["x"], ValueError)


def test_the_capture_probes_bind_stand_in_buffers():
    f = _facts()
    assert f._capture_probe(f.captured_calls, "float64")
    assert not f._capture_probe(f.captured_gemm_calls, "float64", operand_class="gemm")
    assert f._capture_probe(f.captured_gemm_calls, "float32", operand_class="gemm")


def test_phrases_and_tables_read_as_sentences():
    f = _facts()
    assert f.phrase(["a"]) == "a"
    assert f.phrase(["a", "b", "c"]) == "a, b or c"
    assert f.phrase(["a", "b"], "and") == "a and b"
    with pytest.raises(ValueError, match="no dtype"):
        f.phrase([])
    table = f.plan_table().splitlines()
    assert table[0].startswith("| planes |") and len(table) == 2 + len(f.plan_routes())


def test_an_unknown_math_stops_the_build(monkeypatch):
    f = _facts()
    monkeypatch.setattr(f, "SUMS_IN", {k: v for k, v in f.SUMS_IN.items() if k != "fp64"})
    with pytest.raises(KeyError, match="fp64"):
        f.sums_in("float64")


# -- requirements --------------------------------------------------------------------------


def _readers_text() -> list[tuple[Path, str]]:
    """README and the pages, substitutions filled in, as a reader sees them."""
    made = _facts().substitutions()
    files = [ROOT / "README.md", *PAGES, *API_PAGES]
    return [(p, _SUBSTITUTION.sub(lambda m: made[m.group(1)], p.read_text())) for p in files]


def test_the_stated_requirements_are_pyprojects_and_eagles():
    f = _facts()
    cuda, release = f.driver()
    python = f.python_version()
    problems = []
    for path, text in _readers_text():
        flat = re.sub(r"\s+", " ", text)
        for match in re.finditer(r"Python (\d+\.\d+) or newer", flat):
            if match.group(1) != python:
                problems.append(f"{path.name}: {match.group(0)} (pyproject: {python})")
        for match in re.finditer(r"CUDA (\d+)(?: driver|\b(?=[^.]*driver))", flat):
            if int(match.group(1)) != cuda:
                problems.append(f"{path.name}: {match.group(0)} (eagle needs CUDA {cuda})")
        for match in re.finditer(r"driver,? \(?(\d{3})\b|\b(\d{3}) or newer", flat):
            if int(match.group(1) or match.group(2)) != release:
                problems.append(f"{path.name}: {match.group(0)} (eagle needs {release})")
    assert problems == []
    readme = (ROOT / "README.md").read_text()
    assert f"{cuda} driver ({release} or newer)" in readme


def test_the_stated_dependencies_are_pyprojects():
    f = _facts()
    project = f.pyproject()["project"]
    known = {*f.dependencies()} | {
        re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0]
        for specs in project["optional-dependencies"].values()
        for spec in specs
    }
    problems = []
    for path, text in _readers_text():
        for paragraph in re.split(r"\n\s*\n", text):
            flat = re.sub(r"\s+", " ", paragraph)
            if not re.search(r"\bbrings\b|\bdepends on\b|\bdependenc", flat) or not re.search(
                r"\binstall|\bpackage\b|\bpip\b", flat
            ):
                continue
            named = set(re.findall(r"`([a-z][a-z0-9]*(?:[-_][a-z0-9]+)+)`", flat))
            named -= {"pip", "ml-dtypes"}
            problems += [f"{path.name}: `{n}` is no dependency" for n in named - known]
    assert problems == []
    readme = (ROOT / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in f.dependencies())


# -- environment variables ------------------------------------------------------------------

_ENVIRON = re.compile(
    r"os\.environ(?:\.get\(|\[)\s*[\"']([A-Z_][A-Z0-9_]*)[\"']|SEED_ENV = \"([A-Z_]+)\""
)


def environment_variables() -> set[str]:
    """The environment variables eagle, hawk and the test suite read (their sources)."""
    files = [*(ROOT / "eagle").rglob("*.py"), *(ROOT / "hawk").rglob("*.py")]
    files.append(ROOT / "tests" / "conftest.py")
    return {a or b for f in files for a, b in _ENVIRON.findall(f.read_text())}


def test_the_install_page_names_every_environment_variable():
    page = (DOCS / "install.md").read_text()
    table = page[page.index("## Environment variables") :]
    named = set(re.findall(r"^\| `([A-Z_][A-Z0-9_]*)` \|", table, re.M))
    assert named == environment_variables(), "docs/install.md's table of environment variables"


# -- arrays of other frameworks ------------------------------------------------------------


class _ForeignArray:
    """Another framework's device array, as eagle sees one: the CUDA array interface."""

    def __init__(self, values: np.ndarray) -> None:
        self.shape, self.dtype = values.shape, values.dtype
        self.__cuda_array_interface__ = {
            "shape": values.shape,
            "typestr": values.dtype.str,
            "data": (values.ctypes.data, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }


def _eagle_arrays_only_probes(device: Any) -> dict[str, list[Callable[[], Any]]]:
    """Each call the pages say takes eagle Arrays only, as calls with a foreign array."""
    from eagle.gemm import CublasCaptureHandle, gemm_params_for_arrays, sgemm_params_for_arrays
    from eagle.gemm.plan import captured_calls, captured_gemm_calls, lower_dense_gemm, matmul_step
    from hawk.contraction import recognize

    f = _facts()
    a, b, out = (np.ones(shape, np.float32) for shape in ((2, 3), (3, 4), (2, 4)))
    mine = {name: device.array(v) for name, v in zip("abc", (a, b, out), strict=True)}
    foreign = {**mine, "a": _ForeignArray(a)}
    operands = {"a": foreign["a"], "b": mine["b"], "out": mine["c"]}
    general = gemm_params_for_arrays(mine["a"], mine["b"], mine["c"])
    single = sgemm_params_for_arrays(mine["a"], mine["b"], mine["c"])
    handle = CublasCaptureHandle(device.STREAM)
    plan = lower_dense_gemm(recognize(f.contraction), dtype="float32")
    values = {name: np.ones(spec.shape, np.float32) for name, spec in plan.required.items()}
    for array in values.values():
        device.cublas.register(array)  # (the stand-in cuBLAS computes on host memory)
    buffers = {name: _ForeignArray(array) for name, array in values.items()}
    step = matmul_step("c", a="a", b="b", out="c")
    return {
        'matmul_step(...).run(bufs, "device")': [lambda: step.run(foreign, "device")],
        "a lowered plan run on the device": [lambda: plan("device", buffers)],
        "`CublasCaptureHandle` (`warm`, `sgemm`, `gemm`, `bind`)": [
            lambda: handle.warm(general, operands),
            lambda: handle.sgemm(single, operands),
            lambda: handle.gemm(general, operands),
            lambda: handle.bind(general, operands),
        ],
        "`captured_gemm_calls`": [lambda: captured_gemm_calls(plan, buffers, operand_class="gemm")],
        "`captured_calls`": [lambda: captured_calls(plan, buffers)],
    }


def test_the_calls_take_foreign_arrays_as_the_pages_say(monkeypatch):
    """Each call EAGLE_ARRAYS_ONLY names refuses another framework's array; every other
    probed call takes one, as the pages say of every call that takes an array."""
    from eagle.arrays import _holder
    from eagle.gemm import GemmCaptureUnavailable, MatmulUnavailable
    from tests.test_gemm_capture import FakeDevice

    # taking the fake device arrays: each address is on device 0, no stream to wait for
    pointer = type("A", (), {"device": 0})
    monkeypatch.setattr(_holder, "cudart", FakeCalls(lambda name, ptr: pointer))
    probes = _eagle_arrays_only_probes(FakeDevice(monkeypatch))
    only = set(_facts().EAGLE_ARRAYS_ONLY)
    assert only <= set(probes), "a probe per call the pages name"
    changed = []
    for name, calls in probes.items():
        for call in calls:
            try:
                call()
            except (GemmCaptureUnavailable, MatmulUnavailable) as refusal:
                if name in only and re.search(r"device (eagle )?[Aa]rray", str(refusal)):
                    continue  # refused as the pages say
                changed.append(f"{name}: {type(refusal).__name__}: {refusal}")
            except Exception as other:  # any other outcome is a change too
                changed.append(f"{name}: {type(other).__name__}: {other}")
            else:
                if name in only:
                    changed.append(f"{name}: accepted")
    assert changed == [], (
        "these calls no longer do what the pages say of another framework's array: a call "
        "EAGLE_ARRAYS_ONLY in docs/_ext/facts.py names must refuse one, any other take it"
    )


def test_the_recorded_figures_name_each_key_once(tmp_path, monkeypatch):
    """json keeps the last of two entries of one name, so a second run's figures pasted
    beside the first would show one and leave the other unchecked: refused."""
    f = _facts()
    assert "scatter" in f.recorded()  # the committed file
    twice = tmp_path / "recorded.json"
    twice.write_text('{"scatter": {"device": "A"}, "kan": {}, "scatter": {"device": "B"}}')
    monkeypatch.setattr(f, "RECORDED", twice)
    with pytest.raises(ValueError, match="names scatter twice"):
        f.recorded()


def test_the_kan_local_table_marks_what_is_not_measured(monkeypatch):
    f = _facts()
    rows = [
        {"shape": "16,384 x 64 -> 64, G = 8", "dtype": "float32",
         "dense_written": 0.184, "local_by_hand": None, "local_derived": 0.25},
    ]  # fmt: skip
    monkeypatch.setattr(f, "recorded", lambda: {"kan_local": {"device": "H", "rows": rows}})
    table = f.kan_local_table().splitlines()
    assert table[2] == (
        "| 16,384 x 64 -> 64, G = 8 | float32 | 0.184 | pending | pending | 0.25 | pending |"
    )
    assert table[-1] == "On H; whole training steps, one graph each."


def test_the_torch_step_table_pairs_each_mode_of_both_sides(monkeypatch):
    f = _facts()
    wall = {f"{side} {mode}": 1.0 + i for i, (side, mode) in enumerate(
        (side, mode) for mode in f.TORCH_STEP_MODES for side in ("eagle", "torch"))}  # fmt: skip
    section = {"device": "H", "date": "D", "wall_ms": wall}
    monkeypatch.setattr(f, "recorded", lambda: {"torch_step": section})
    table = f.torch_step_table().splitlines()
    assert table[2] == "| eager | 1 | 2 |"
    assert table[5] == "| the whole step in one `torch.cuda.graph` | 7 | 8 |"
    assert table[-1].startswith("On H, D: wall milliseconds per step")
