"""The real control plane with deploy/ installed, for this directory's e2e tests."""

from tests.real_backend import lahar_admin_kubeconfig, lahar_installed_cluster  # noqa: F401 - fixtures
