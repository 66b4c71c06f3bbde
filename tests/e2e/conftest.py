"""The e2e scenarios' backends (tests/real_backend.py): the embedded server and the real control plane."""

from tests.real_backend import api_backend, lahar_admin_kubeconfig  # noqa: F401 - fixtures
