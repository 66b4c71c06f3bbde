"""`lahar up` end-to-end tests: the `demo` marker (the narrated demo takes about a minute; deselect
it with `-m "not demo"`)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "demo: runs `lahar up --demo --demo-exit` (about a minute)")
