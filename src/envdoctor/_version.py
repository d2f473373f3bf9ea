"""The package version, kept in one place (pyproject.toml reads the same number)."""
__version__ = "0.1.0"
