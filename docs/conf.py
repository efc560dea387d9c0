"""Sphinx configuration for the eagle + hawk documentation.

Build with ``nox -s docs`` (``sphinx-build -W --keep-going -b html docs docs/_build/html``).
Nothing here reaches the network: no intersphinx, no remote images.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document the checkout even when the package is not installed

project = "eagle + hawk"
author = "the eagle + hawk authors"
copyright = "2026, the eagle + hawk authors"
release = importlib.import_module("eagle").__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

exclude_patterns = ["_build"]

myst_heading_anchors = 3

autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# Attributes sections become field lists, so a documented attribute is not described twice.
napoleon_use_ivar = True

html_theme = "furo"
html_title = "eagle + hawk"


def _skip_field_aliases(app, what, name, obj, skip, options):
    """Leave out a NamedTuple's field accessors: the class's Attributes section names them."""
    doc = getattr(obj, "__doc__", None) or ""
    return True if doc.startswith("Alias for field number") else None


def setup(app):
    app.connect("autodoc-skip-member", _skip_field_aliases)
