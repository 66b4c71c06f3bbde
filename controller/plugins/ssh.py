"""The `ssh` plugin: every pod of a job can ssh into every other (what `mpirun` needs).

One RSA 2048 key pair per job (as Volcano) lives in the Secret `<job>-ssh`: `id_rsa` (PKCS#1 PEM,
which OpenSSH reads), `id_rsa.pub` and `authorized_keys` (the same public key, OpenSSH format) and
`config` (no host-key prompts: the pods' host keys are new on every start). The Secret is
mounted at `/root/.ssh`, files mode 0600 (sshd refuses keys others can read);
`--ssh-key-file-path=<dir>` mounts it elsewhere.

The key is made once: `objects()` given the job's existing Secret returns it unchanged, so a
controller restart or a second reconcile keeps the key the running pods already trust.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from lahar.controller.naming import pod_name
from lahar.controller.plugins.base import (
    Obj,
    find_existing,
    job_name,
    owned_metadata,
    parse_flags,
    pod_containers,
    set_volume,
    set_volume_mount,
    task_replicas,
)

DEFAULT_MOUNT_PATH = "/root/.ssh"
KEY_FILE_PATH_FLAG = "ssh-key-file-path"
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
    return parse_flags(args).get(KEY_FILE_PATH_FLAG) or DEFAULT_MOUNT_PATH


def generate_key_pair() -> tuple[str, str]:
    """(private key PEM, public key `ssh-rsa AAAA...` line)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, public + "\n"


def ssh_config(job: Mapping[str, Any]) -> str:
    """No host-key checks, and a `Host` entry per pod so `ssh <pod>` reaches `<pod>.<job>` (the
    name the svc plugin makes resolvable)."""
    name = job_name(job)
    lines = ["StrictHostKeyChecking no", "UserKnownHostsFile /dev/null", "LogLevel ERROR"]
    for task_name, replicas in task_replicas(job):
        for index in range(replicas):
            host = pod_name(name, task_name, index)
            lines += [f"Host {host}", f"  HostName {host}.{name}"]
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


def key_secret(job: Mapping[str, Any], existing: Mapping[str, Any] | None = None) -> Obj:
    """The job's key Secret, reusing the key pair of `existing` when it has one. The config is
    rebuilt each time (it follows the job's replicas); the key never is."""
    private, public = existing_key_pair(existing) or generate_key_pair()
    data = {PRIVATE_KEY: private, PUBLIC_KEY: public, AUTHORIZED_KEYS: public, CONFIG: ssh_config(job)}
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
        set_volume(
            pod, {"name": volume_name(name), "secret": {"secretName": secret_name(name), "defaultMode": FILE_MODE}}
        )
        for container in pod_containers(pod):
            set_volume_mount(container, {"name": volume_name(name), "mountPath": mount_path(args)})

    def objects(self, job: Mapping[str, Any], args: list[str], existing: Iterable[Mapping[str, Any]] = ()) -> list[Obj]:
        return [key_secret(job, find_existing(existing, "Secret", secret_name(job_name(job))))]
