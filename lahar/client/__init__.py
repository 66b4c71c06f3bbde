"""Lahar's Kubernetes client: KubeApi (dicts over the official client's transport), informers,
events, leader election.

The official `kubernetes` package's `__init__` imports every part of it: the dynamic client (with
kubernetes_validate and jsonschema), watch, stream, utils, leader election and informer, about 80
modules that Lahar never uses and every Lahar program paid for at start (in `lahar scheduler`,
part of a start-up that was most of its CPU on small workloads). Lahar imports only the
submodules it uses (kubernetes.client, kubernetes.config.kube_config, ...), so the package module
is set up here without running its `__init__` (see `kubernetes_package_without_init`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

PACKAGE = "kubernetes"


def kubernetes_package_without_init() -> None:
    """Register the `kubernetes` package module without running its `__init__`, unless it is
    imported already. `import kubernetes.client` (or any submodule) then runs that submodule
    alone. An attribute the bare package lacks is looked up as a submodule first (`from
    kubernetes import watch` still works), and otherwise the real `__init__` runs then, once, so
    `kubernetes.__version__` and the like still answer."""
    if PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # not installed: the import that needs it says so
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader
    init_ran = False

    def missing_attribute(name: str) -> Any:
        nonlocal init_ran
        if not name.startswith("__") and importlib.util.find_spec(f"{PACKAGE}.{name}") is not None:
            return importlib.import_module(f"{PACKAGE}.{name}")
        if not init_ran:
            init_ran = True
            loader.exec_module(package)  # the real __init__, in this module: its submodules are the same
            return getattr(package, name)
        raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")

    setattr(package, "__getattr__", missing_attribute)  # noqa: B010 (a module's PEP 562 hook)
    sys.modules[PACKAGE] = package


kubernetes_package_without_init()
