"""Lahar: a Kubernetes-native batch system (shared package: API types, API server, client, CLI)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lahar")  # pyproject.toml's, the one place the version is written
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
