"""Where the API is: one resolution order for every Lahar component and CLI.

1. an explicit kubeconfig path (`--kubeconfig`),
2. `$KUBECONFIG` (one file, or several joined with `:` as kubectl merges them),
3. in-cluster service-account config when `KUBERNETES_SERVICE_HOST` is set,
4. the embedded API server that `lahar up` starts on this machine.

A kubeconfig that is missing, unreadable or malformed is an error naming the file, never a silent
fall-through to the next source: a typo in a path must not send a component to another cluster.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.config import ConfigException
from kubernetes.config.incluster_config import SERVICE_HOST_ENV_NAME, SERVICE_PORT_ENV_NAME, InClusterConfigLoader
from kubernetes.config.kube_config import ENV_KUBECONFIG_PATH_SEPARATOR, load_kube_config

import lahar
from lahar.endpoints import EMBEDDED_URL

KUBECONFIG_ENV = "KUBECONFIG"
# Tests point this at a temporary directory; pods get it mounted by Kubernetes.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

EXPLICIT, FROM_ENV, IN_CLUSTER, EMBEDDED = "explicit", "KUBECONFIG", "in-cluster", "embedded"


class ConnectionConfigError(ValueError):
    """The connection settings cannot be used; the message names the file or variable at fault."""


@dataclass(frozen=True)
class ConfigSource:
    """Which of the four sources applies, and where it points (paths, service address or URL)."""

    origin: str  # EXPLICIT, FROM_ENV, IN_CLUSTER or EMBEDDED
    location: str

    def kubeconfig_paths(self) -> list[str]:
        if self.origin not in (EXPLICIT, FROM_ENV):
            return []
        return [os.path.expanduser(p) for p in self.location.split(ENV_KUBECONFIG_PATH_SEPARATOR) if p]

    def __str__(self) -> str:
        if self.origin == EXPLICIT:
            return f"kubeconfig {self.location}"
        if self.origin == FROM_ENV:
            return f"kubeconfig {self.location} (from ${KUBECONFIG_ENV})"
        if self.origin == IN_CLUSTER:
            return f"in-cluster service account ({self.location})"
        return f"embedded API server at {self.location} (no kubeconfig given)"


def embedded_server_url() -> str:
    return EMBEDDED_URL


def resolve_source(
    kubeconfig: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> ConfigSource:
    """The first source that applies, in the documented order; nothing is read yet."""
    env = os.environ if environ is None else environ
    if kubeconfig:
        return ConfigSource(EXPLICIT, os.fspath(kubeconfig))
    if env.get(KUBECONFIG_ENV):
        return ConfigSource(FROM_ENV, env[KUBECONFIG_ENV])
    if env.get(SERVICE_HOST_ENV_NAME):
        return ConfigSource(IN_CLUSTER, f"{env[SERVICE_HOST_ENV_NAME]}:{env.get(SERVICE_PORT_ENV_NAME, '')}")
    return ConfigSource(EMBEDDED, embedded_server_url())


def describe_source(kubeconfig: str | os.PathLike[str] | None = None) -> str:
    """A line for a CLI or a log: which configuration a component connects with."""
    return str(resolve_source(kubeconfig))


def load_configuration(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> client.Configuration:
    """A client Configuration from the first applicable source (see the module docstring)."""
    source = resolve_source(kubeconfig, environ)
    configuration = client.Configuration()
    if source.origin in (EXPLICIT, FROM_ENV):
        _load_kubeconfig(source, context, configuration)
    elif source.origin == IN_CLUSTER:
        _load_in_cluster(source, os.environ if environ is None else environ, configuration)
    else:
        configuration.host = source.location
    return configuration


def new_api_client(
    kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None, pool_size: int | None = None
) -> client.ApiClient:
    """An ApiClient for the resolved configuration. `pool_size` bounds the kept-alive connections
    per host; give it at least the number of threads that share the client."""
    configuration = load_configuration(kubeconfig, context)
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    api_client = client.ApiClient(configuration)
    api_client.user_agent = f"lahar/{lahar.__version__}"
    return api_client


def _load_kubeconfig(source: ConfigSource, context: str | None, configuration: client.Configuration) -> None:
    paths = source.kubeconfig_paths()
    if not paths:
        raise ConnectionConfigError(f"{source}: no file named")
    for path in paths:
        _check_kubeconfig_file(path, source)
    try:
        # persist_config=False: never rewrite the user's file (token refreshes stay in memory).
        load_kube_config(
            config_file=ENV_KUBECONFIG_PATH_SEPARATOR.join(paths),
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConnectionConfigError(f"invalid {source}: {exc}") from exc


def _check_kubeconfig_file(path: str, source: ConfigSource) -> None:
    """Refuse, with the file's name, what the kubernetes loader would skip or report vaguely."""
    where = f"{path} (from ${KUBECONFIG_ENV})" if source.origin == FROM_ENV else path
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ConnectionConfigError(f"kubeconfig {where} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConnectionConfigError(f"cannot read kubeconfig {where}: {exc}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConnectionConfigError(f"kubeconfig {where} is not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise ConnectionConfigError(
            f"kubeconfig {where} is not a kubeconfig (expected a mapping with clusters, users and contexts)"
        )


def _load_in_cluster(source: ConfigSource, environ: Mapping[str, str], configuration: client.Configuration) -> None:
    loader = InClusterConfigLoader(
        token_filename=str(SERVICE_ACCOUNT_DIR / "token"),
        cert_filename=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
        environ=environ,
    )
    try:
        loader.load_and_set(configuration)
    except (ConfigException, OSError) as exc:
        raise ConnectionConfigError(f"{source} is unusable ({SERVICE_ACCOUNT_DIR}): {exc}") from exc
