"""Lahar: a Kubernetes-native batch system (shared package: API types, API server, client, CLI)."""

__version__ = "0.1.0"
