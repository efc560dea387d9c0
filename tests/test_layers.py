"""The packages' layering: eagle uses hawk, hawk uses nothing of eagle."""

from __future__ import annotations

import ast
from pathlib import Path

import hawk

HAWK = Path(hawk.__file__).parent


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
