"""A container as a local process: its argv and environment from the pod spec, started in a
process group (and session) of its own with stdout and stderr appended to its log, joined to its
cgroups before the command runs.

Images are not pulled: the container's `command` + `args` run on this machine as they are (a
container with `args` alone runs them as the command). The environment is the spec's `env` and
`envFrom`, with `$(VAR)` references expanded as kubelet does, over a small base: PATH and HOME of
the runtime, and HOSTNAME (the pod's name). Nothing else of the runtime's environment leaks in."""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lahar.api import kinds
from lahar.client.errors import NotFound

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOCAL_IP = "127.0.0.1"
# Runs as the container's first process: writes its own pid to each cgroup.procs named before "--",
# then becomes the command, so the command and all it forks start inside the cgroups.
JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")

# Reads an object from the API (kind, namespace, name) for configMap and secret references.
Lookup = Callable[[kinds.Kind, str, str], Mapping[str, Any]]


class StartError(Exception):
    """The container cannot start as specified (no command, no such executable)."""


class ConfigError(Exception):
    """The container's environment cannot be built yet (a missing ConfigMap or Secret key)."""


def expand(text: str, variables: Mapping[str, str]) -> str:
    """Kubelet's `$(VAR)` expansion: a defined variable is replaced, an undefined reference is
    left as written, and `$$` stands for a literal `$`."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return variables.get(match.group(1), match.group(0))

    return _REFERENCE.sub(replace, text)


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """A downward-API fieldRef: the pod's name, namespace, uid, labels['k'], annotations['k'],
    node, service account, and its IPs (all 127.0.0.1 here: no network namespaces)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": LOCAL_IP,
        "status.podIPs": LOCAL_IP,
        "status.hostIP": LOCAL_IP,
        "status.hostIPs": LOCAL_IP,
    }
    if path in simple:
        return str(simple[path] or "")
    match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(f"fieldRef {path!r} is not supported")


def _key_values(kind: kinds.Kind, obj: Mapping[str, Any]) -> dict[str, str]:
    if kind is kinds.SECRET:
        decoded = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}
        return {**decoded, **(obj.get("stringData") or {})}
    return {k: str(v) for k, v in (obj.get("data") or {}).items()}


def _source(lookup: Lookup, kind: kinds.Kind, namespace: str, name: str, optional: bool) -> dict[str, str] | None:
    try:
        return _key_values(kind, lookup(kind, namespace, name))
    except NotFound:
        if optional:
            return None
        raise ConfigError(f'{kind.singular} "{name}" not found') from None


def _value_from(source: Mapping[str, Any], pod: Mapping[str, Any], lookup: Lookup) -> str | None:
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    if "fieldRef" in source:
        return field_value(pod, str((source["fieldRef"] or {}).get("fieldPath") or ""))
    for key, kind in (("configMapKeyRef", kinds.CONFIGMAP), ("secretKeyRef", kinds.SECRET)):
        if key in source:
            ref = source[key] or {}
            optional = bool(ref.get("optional"))
            values = _source(lookup, kind, namespace, str(ref.get("name") or ""), optional)
            if values is None or ref.get("key") not in values:
                if optional:
                    return None
                raise ConfigError(
                    f"couldn't find key {ref.get('key')} in {kind.singular} {namespace}/{ref.get('name')}"
                )
            return values[ref["key"]]
    raise ConfigError(f"env valueFrom {sorted(source)} is not supported by the local runtime")


def container_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], lookup: Lookup, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The container's environment: the base, then envFrom, then env in order, each value
    expanded against what came before it."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    env = dict(base if base is not None else base_env())
    env["HOSTNAME"] = str(spec.get("hostname") or meta.get("name") or "")
    namespace = meta.get("namespace") or "default"
    for source in container.get("envFrom") or []:
        for key, kind in (("configMapRef", kinds.CONFIGMAP), ("secretRef", kinds.SECRET)):
            if key in source:
                ref = source[key] or {}
                values = _source(lookup, kind, namespace, str(ref.get("name") or ""), bool(ref.get("optional")))
                env.update({f"{source.get('prefix') or ''}{k}": v for k, v in (values or {}).items()})
    for variable in container.get("env") or []:
        name = str(variable.get("name") or "")
        if "valueFrom" in variable:
            value = _value_from(variable["valueFrom"] or {}, pod, lookup)
            if value is not None:
                env[name] = value
        else:
            env[name] = expand(str(variable.get("value") or ""), env)
    return env


def base_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH") or DEFAULT_PATH, "HOME": os.environ.get("HOME") or "/"}


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """`command` + `args` with `$(VAR)` expanded; StartError when nothing can run."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    argv = [expand(str(word), env) for word in (command + args if command else args)]
    if not argv:
        raise StartError("the container has no command: images are not pulled, so give it a command (or args)")
    executable = argv[0]
    found = (
        os.access(executable, os.X_OK) and os.path.isfile(executable)
        if "/" in executable
        else shutil.which(executable, path=env.get("PATH", DEFAULT_PATH)) is not None
    )
    if not found:
        raise StartError(f'exec: "{executable}": executable file not found in $PATH')
    return argv


def spawn(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, log_path: Path, cgroup_procs: Sequence[Path] = ()
) -> subprocess.Popen[bytes]:
    """Start the process in a new session (its own process group, away from the runtime's
    terminal and its Ctrl-C), output appended to `log_path`, inside the given cgroups."""
    if cgroup_procs:
        argv = ["/bin/sh", "-c", JOIN_CGROUPS, "lahar-join-cgroups", *map(str, cgroup_procs), "--", *argv]
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal a process group; False when none of its processes is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed its credentials; the cgroup sweep still gets it
        return True
    return True


def open_pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when the process exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
