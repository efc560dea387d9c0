"""Write every test kernel's emitted programs to a JSON file, to compare two commits.

A refactor of hawk's emitters must leave the emitted sources byte-identical except where
a change is intended. Run this before and after and diff the two files::

    python tools/snapshot_emitted.py before.json     # on the base commit
    python tools/snapshot_emitted.py after.json      # on the change
    python tools/snapshot_emitted.py --compare before.json after.json

Every ``hawk.Kernel`` defined at module level in ``tests/_*kernels.py`` is emitted for
the host and the device, in float32 and float64 (with and without checks; narrow and
wide lane counters on the device), plus 200 kernels of the random grammar.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _kernels() -> dict[str, Any]:
    import hawk

    found: dict[str, Any] = {}
    for path in sorted((ROOT / "tests").glob("_*kernels.py")):
        module = importlib.import_module(f"tests.{path.stem}")
        for name, value in vars(module).items():
            if isinstance(value, hawk.Kernel):
                found.setdefault(f"{path.stem}.{name}", value)
    return found


def _grammar(count: int) -> dict[str, Any]:
    from hypothesis import HealthCheck, given, seed, settings

    from tests import _kernel_grammar

    found: dict[str, Any] = {}

    @seed(20261202)
    @settings(
        max_examples=count,
        database=None,
        suppress_health_check=list(HealthCheck),
        deadline=None,
        derandomize=True,
    )
    @given(_kernel_grammar.kernels())
    def collect(generated: Any) -> None:
        found[f"grammar.{len(found)}"] = generated

    collect()
    import tempfile

    loader = _kernel_grammar.KernelLoader(Path(tempfile.mkdtemp()))
    return {name: loader.load(g.source).kernel for name, g in found.items()}


def _emit(kernel: Any, dtype: str) -> dict[str, str]:
    from hawk.emit import cuda, host

    dtypes = {p.name: dtype for p in kernel.planes}
    out: dict[str, str] = {}
    for checks in (True, False):
        key = f"host/{dtype}/checks={checks}"
        try:
            out[key] = host.emit(kernel.ir, dtypes, checks=checks).source
        except Exception as exc:  # a kernel the emitter refuses is recorded as such
            out[key] = f"!{type(exc).__name__}: {exc}"
        for narrow in (False, True):
            key = f"cuda/{dtype}/checks={checks}/narrow={narrow}"
            try:
                out[key] = cuda.emit(kernel.ir, dtypes, checks=checks, narrow=narrow).source
            except Exception as exc:
                out[key] = f"!{type(exc).__name__}: {exc}"
    return out


def snapshot() -> dict[str, dict[str, str]]:
    result: dict[str, dict[str, str]] = {}
    kernels = _kernels()
    for name, kernel in kernels.items():
        for dtype in ("float32", "float64"):
            result.setdefault(name, {}).update(_emit(kernel, dtype))
    for name, kernel in _grammar(200).items():
        result[name] = _emit(kernel, "float64")
    return result


def main() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":  # some emit orders follow set iteration
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.paths)
        changed = 0
        for name in sorted(set(before) | set(after)):
            for key in sorted(set(before.get(name, {})) | set(after.get(name, {}))):
                if before.get(name, {}).get(key) != after.get(name, {}).get(key):
                    changed += 1
                    print(f"differs: {name} {key}")
        total = sum(len(v) for v in before.values())
        print(f"{changed} of {total} emitted sources differ")
        raise SystemExit(1 if changed else 0)
    Path(args.paths[0]).write_text(json.dumps(snapshot(), indent=0, sort_keys=True))
    data = json.loads(Path(args.paths[0]).read_text())
    print(f"{len(data)} kernels, {sum(len(v) for v in data.values())} sources")


if __name__ == "__main__":
    main()
