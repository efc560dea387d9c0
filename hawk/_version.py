"""The package version, in one place: pyproject, ``hawk.__version__`` and
``eagle.__version__`` all read it."""

__version__ = "0.1.0"
