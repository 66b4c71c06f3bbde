"""Lahar: a Kubernetes-native batch system (shared package: API types, API server, client, CLI)."""

from importlib.metadata import PackageNotFoundError, version

from lahar.grpc_io import use_polling_io

use_polling_io()  # before any Lahar module imports grpc: grpcio reads its settings once, on import

try:
    __version__ = version("lahar")  # pyproject.toml's, the one place the version is written
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
