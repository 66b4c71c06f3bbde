"""The `ssh` plugin: every pod of a job can ssh into every other (what `mpirun` needs),
as Volcano's ssh plugin.

One RSA 2048 key pair per job lives in the Secret `<job>-ssh`: `id_rsa` (PKCS#1 PEM, which
OpenSSH reads), `id_rsa.pub` and `authorized_keys` (the same public key, OpenSSH format) and
`config` (no host-key prompts, and a `Host` entry per pod with its DNS name and port). Every
container mounts the Secret's `.ssh/` items at `/root/.ssh` (files mode 0600: sshd refuses keys
others can read).

Flags (Go-flag style): `--ssh-key-file-path=<dir>` mounts the keys there instead (mode 0644,
as Volcano: a non-root user must read them); `--ssh-private-key` / `--ssh-public-key` use the
user's key pair instead of a generated one; `--ssh-port` (default 22; outside 1..65535 falls
back to 22) is the port the config names.

The key is made once: `objects()` given the job's existing Secret returns its key unchanged, so
a controller restart or a second reconcile keeps the key the running pods already trust.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from lahar.api.goflags import PLUGIN_FLAGS, parse_go_flags
from lahar.controller.plugins.base import (
    Obj,
    find_existing,
    job_name,
    job_tasks,
    owned_metadata,
    pod_containers,
    set_volume,
    set_volume_mount,
    task_hosts,
)

DEFAULT_MOUNT_PATH = "/root/.ssh"
RELATIVE_PATH = ".ssh"  # the items' folder in the volume, mounted with subPath
KEY_FILE_PATH_FLAG = "ssh-key-file-path"
PRIVATE_KEY_FLAG = "ssh-private-key"
PUBLIC_KEY_FLAG = "ssh-public-key"
PORT_FLAG = "ssh-port"
DEFAULT_PORT = 22
FLAGS = PLUGIN_FLAGS["ssh"]
NON_ROOT_FILE_MODE = 0o644
PRIVATE_KEY = "id_rsa"
PUBLIC_KEY = "id_rsa.pub"
AUTHORIZED_KEYS = "authorized_keys"
CONFIG = "config"
KEY_BITS = 2048
FILE_MODE = 0o600


def secret_name(job: str) -> str:
    return f"{job}-ssh"


def volume_name(job: str) -> str:
    return f"{job}-ssh"


def mount_path(args: list[str]) -> str:
    return str(parse_go_flags(args, FLAGS)[KEY_FILE_PATH_FLAG]) or DEFAULT_MOUNT_PATH


def ssh_port(args: list[str]) -> int:
    port = parse_go_flags(args, FLAGS)[PORT_FLAG]
    return port if isinstance(port, int) and 0 < port <= 65535 else DEFAULT_PORT


def generate_key_pair() -> tuple[str, str]:
    """(private key PEM, public key `ssh-rsa AAAA...` line)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, public + "\n"


def ssh_config(job: Mapping[str, Any], port: int = DEFAULT_PORT) -> str:
    """No host-key checks, and a `Host` entry per pod so `ssh <pod>` reaches its DNS name
    (`<pod>.<job>`, which the svc plugin makes resolvable) on `port`."""
    lines = ["StrictHostKeyChecking no", "UserKnownHostsFile /dev/null"]
    for task in job_tasks(job):
        for host in task_hosts(job, task):
            lines += [f"Host {host.partition('.')[0]}", f"  HostName {host}", f"  Port {port}"]
    return "\n".join(lines) + "\n"


def encode(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def decode_secret_data(secret: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's `data` (base64) merged with `stringData` (plain), as text."""
    data = {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}
    data.update(secret.get("stringData") or {})
    return data


def existing_key_pair(secret: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """The key pair kept in an existing Secret, if it holds a complete one."""
    if secret is None:
        return None
    try:
        data = decode_secret_data(secret)
    except (ValueError, UnicodeDecodeError):
        return None  # a damaged Secret: make a new key rather than mount garbage
    if data.get(PRIVATE_KEY) and data.get(PUBLIC_KEY):
        return data[PRIVATE_KEY], data[PUBLIC_KEY]
    return None


def key_secret(job: Mapping[str, Any], existing: Mapping[str, Any] | None = None, args: list[str] | None = None) -> Obj:
    """The job's key Secret: the user's key pair when the flags give one, else the pair of
    `existing` when it has one, else a new one. The config is rebuilt each time (it follows
    the job's replicas); a generated key never is."""
    flags = parse_go_flags(args or [], FLAGS)
    given = (str(flags[PRIVATE_KEY_FLAG]), str(flags[PUBLIC_KEY_FLAG])) if flags[PRIVATE_KEY_FLAG] else None
    private, public = given or existing_key_pair(existing) or generate_key_pair()
    data = {
        PRIVATE_KEY: private,
        PUBLIC_KEY: public,
        AUTHORIZED_KEYS: public,
        CONFIG: ssh_config(job, ssh_port(args or [])),
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": owned_metadata(job, secret_name(job_name(job))),
        "data": {key: encode(value) for key, value in data.items()},
    }


class SshPlugin:
    name = "ssh"

    def on_pod(self, pod: Obj, job: Mapping[str, Any], task_name: str, index: int, args: list[str]) -> None:
        name = job_name(job)
        path = mount_path(args)
        items = [
            {"key": key, "path": f"{RELATIVE_PATH}/{key}"} for key in (PRIVATE_KEY, PUBLIC_KEY, AUTHORIZED_KEYS, CONFIG)
        ]
        mode = FILE_MODE if path == DEFAULT_MOUNT_PATH else NON_ROOT_FILE_MODE
        secret = {"secretName": secret_name(name), "items": items, "defaultMode": mode}
        set_volume(pod, {"name": volume_name(name), "secret": secret})
        for container in pod_containers(pod):
            set_volume_mount(container, {"name": volume_name(name), "mountPath": path, "subPath": RELATIVE_PATH})

    def objects(self, job: Mapping[str, Any], args: list[str], existing: Iterable[Mapping[str, Any]] = ()) -> list[Obj]:
        return [key_secret(job, find_existing(existing, "Secret", secret_name(job_name(job))), args)]
