"""deploy/ installed on the real control plane, for this directory's tests."""

from tests.real_backend import lahar_admin_kubeconfig, lahar_installed_cluster  # noqa: F401 - fixtures
