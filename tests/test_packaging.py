"""Packaging: one version string, read by pyproject, hawk and eagle; typed-package markers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import hawk

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_has_one_home():
    project = _pyproject()
    assert "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "hawk._version.__version__"
    }
    script = textwrap.dedent(
        """
        import sys
        import eagle
        version = eagle.__version__
        import hawk
        assert version == hawk.__version__, (version, hawk.__version__)
        assert "__version__" in dir(eagle)
        loaded = [m for m in sys.modules if m.startswith(("eagle.", "cuda"))]
        assert not loaded, loaded
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert hawk.__version__.count(".") == 2


def test_both_packages_ship_py_typed():
    package_data = _pyproject()["tool"]["setuptools"]["package-data"]
    for package in ("eagle", "hawk"):
        assert (ROOT / package / "py.typed").is_file()
        assert "py.typed" in package_data[package]
