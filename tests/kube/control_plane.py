"""A real Kubernetes control plane on loopback for the real-cluster tests: etcd, kube-apiserver
(secure port, Node+RBAC authorization, ServiceAccount tokens) and kube-controller-manager, built
from the pinned Go module in tools/k8s by scripts/build-k8s.sh.

    with ControlPlane(workdir) as plane:
        kubectl --kubeconfig plane.admin_kubeconfig ...

Every process runs in its own process group and is stopped (SIGTERM, then SIGKILL) on every exit
path, start-up failures included; the etcd data, certificates and kubeconfig are removed with it.
Only the logs stay in workdir/logs, for a failure to be read after the fact."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lahar.endpoints import free_loopback_port

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-k8s.sh"
BUILD_TIMEOUT = 3 * 3600.0  # cold, on 2 cores at the lowest priority (docs/real-cluster.md)
READY_TIMEOUT = 90.0
STOP_GRACE = 10.0
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the first address of the range: the kubernetes Service
ISSUER = "https://kubernetes.default.svc.cluster.local"
# What Lahar and the tests lean on (issue 14), and the pod garbage collector, which deletes the pods
# of Nodes that are gone (as on any cluster). The node lifecycle controller is left out: simulated
# nodes keep their own Ready condition and Lease, and nodes tests make by hand have neither.
CONTROLLERS = "namespace,garbagecollector,serviceaccount-token,serviceaccount,deployment,replicaset,job,podgc"
KEY_SIZE = 2048
# Metadata-level audit of every request by a ServiceAccount of lahar-system (Lahar's components):
# the record of which (group, resource, verb) each uses and whether RBAC refused it
# (tests/kube/test_rbac_audit.py). Nothing else is logged: the log stays small.
LAHAR_SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts:lahar-system"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [LAHAR_SERVICE_ACCOUNTS_GROUP]},
        {"level": "None"},
    ],
}


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or started; the message names the step."""


_built_bin_dir: Path | None = None


def k8s_bin_dir() -> Path:
    """The directory with etcd and kube-* binaries: scripts/build-k8s.sh builds them once per
    go.sum (cached outside the repository); a process asks it once."""
    global _built_bin_dir
    if _built_bin_dir is None:
        try:
            done = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise ControlPlaneError(f"scripts/build-k8s.sh ran past {BUILD_TIMEOUT:.0f}s") from exc
        if done.returncode != 0:
            raise ControlPlaneError(f"scripts/build-k8s.sh failed:\n{done.stderr[-4000:]}")
        _built_bin_dir = Path(done.stdout.strip().splitlines()[-1])
    return _built_bin_dir


# --- certificates ---------------------------------------------------------------------------------


class Pki:
    """A cluster CA with the serving and admin client certificates signed by it, and the
    ServiceAccount signing key pair, as PEM files in one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.ca_key = new_key()
        self.ca_cert = self._ca_certificate()
        self.ca = self._write("ca.crt", self.ca_cert.public_bytes(serialization.Encoding.PEM))
        self.ca_key_file = self._write("ca.key", private_pem(self.ca_key))
        self.serving_cert, self.serving_key = self._issue("serving", "kube-apiserver", None, server=True)
        # system:masters: RBAC lets the group do anything without a binding (kube's admin credential).
        self.admin_cert, self.admin_key = self._issue("admin", "lahar-admin", "system:masters", server=False)
        sa_key = new_key()
        self.sa_key = self._write("sa.key", private_pem(sa_key))
        self.sa_pub = self._write(
            "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )

    def _write(self, name: str, data: bytes) -> Path:
        path = self.folder / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def _ca_certificate(self) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lahar-test-ca")])
        return (
            certificate_builder(name, name, self.ca_key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )  # keyCertSign, cRLSign
            .sign(self.ca_key, hashes.SHA256())
        )

    def _issue(self, stem: str, common_name: str, group: str | None, *, server: bool) -> tuple[Path, Path]:
        key = new_key()
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if group:
            attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, group))
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = certificate_builder(x509.Name(attributes), self.ca_cert.subject, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if server:
            names: list[x509.GeneralName] = [
                x509.DNSName("localhost"),
                x509.DNSName("kubernetes"),
                x509.DNSName("kubernetes.default.svc"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address(SERVICE_IP)),
            ]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        return (
            self._write(f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            self._write(f"{stem}.key", private_pem(key)),
        )


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=KEY_SIZE)


def private_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def certificate_builder(subject: x509.Name, issuer: x509.Name, public_key: rsa.RSAPublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
    )


def admin_kubeconfig(server: str, pki: Pki) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "real", "cluster": {"server": server, "certificate-authority": str(pki.ca)}}],
            "users": [
                {"name": "admin", "user": {"client-certificate": str(pki.admin_cert), "client-key": str(pki.admin_key)}}
            ],
            "contexts": [{"name": "admin", "context": {"cluster": "real", "user": "admin"}}],
            "current-context": "admin",
        }
    )


# --- processes ------------------------------------------------------------------------------------


class Component:
    """One control plane binary in its own process group, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise ControlPlaneError(f"{self.name} exited with {self.proc.returncode}:\n{log_tail(self.log)}")

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after a grace period: nothing of it stays."""
        for sig, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue


def log_tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on 127.0.0.1 with free ports, state in
    `workdir` (created if missing). Use as a context manager; `admin_kubeconfig` is the path of a
    system:masters client-certificate kubeconfig; `audit_log` the JSON-lines audit log of the
    requests made by lahar-system's ServiceAccounts (kept after exit, like the logs)."""

    def __init__(self, workdir: Path, bin_dir: Path | None = None) -> None:
        self.workdir = Path(workdir)
        self.bin_dir = bin_dir
        self.logs = self.workdir / "logs"
        self.state = self.workdir / "state"  # removed on exit
        self.admin_kubeconfig = self.state / "admin.kubeconfig"
        self.audit_log = self.logs / "audit.log"
        self.components: list[Component] = []
        self.server = ""

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        bin_dir = self.bin_dir or k8s_bin_dir()
        self.logs.mkdir(parents=True, exist_ok=True)
        self.state.mkdir(parents=True)  # a second plane in the same folder is a mistake
        pki = Pki(self.state / "pki")
        etcd_url = self._start_etcd(bin_dir)
        port = free_loopback_port()
        self.server = f"https://127.0.0.1:{port}"
        self.admin_kubeconfig.write_text(admin_kubeconfig(self.server, pki))
        audit_policy = self.state / "audit-policy.yaml"
        audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        self._start(
            "kube-apiserver",
            bin_dir,
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.state / 'apiserver-certs'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",  # the agent's DaemonSet is privileged (cgroups, /proc)
            # The kubernetes Service's endpoint would be 127.0.0.1, which the reconciler refuses;
            # nothing in the tests reaches the API through that Service.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            f"--audit-policy-file={audit_policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",  # each event is written before the answer: nothing lags behind
            "--audit-log-maxbackup=0",
            "--audit-log-maxsize=0",  # one file, never rotated: the test reads all of it
        )
        self._wait_ready("kube-apiserver", f"{self.server}/readyz", pki)
        self._start(
            "kube-controller-manager",
            bin_dir,
            f"--kubeconfig={self.admin_kubeconfig}",
            f"--controllers={CONTROLLERS}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca}",
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_loopback_port()}",
            f"--cert-dir={self.state / 'controller-manager-certs'}",
            "--concurrent-gc-syncs=5",
        )
        self._wait_for_default_service_account(pki)

    def stop(self) -> None:
        """Stop every component, the last started first, and remove the state folder."""
        while self.components:
            self.components.pop().stop()
        shutil.rmtree(self.state, ignore_errors=True)

    def _start(self, name: str, bin_dir: Path, *args: str) -> Component:
        binary = bin_dir / name
        if not binary.exists():
            raise ControlPlaneError(f"start {name}: no {binary} (scripts/build-k8s.sh builds it)")
        component = Component(name, [str(binary), *args], self.logs / f"{name}.log")
        self.components.append(component)
        return component

    def _start_etcd(self, bin_dir: Path) -> str:
        client, peer = free_loopback_port(), free_loopback_port()
        url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self._start(
            "etcd",
            bin_dir,
            "--name=lahar-test",
            f"--data-dir={self.state / 'etcd'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=lahar-test={peer_url}",
            "--unsafe-no-fsync",  # a throwaway test store: durability buys nothing, fsync costs seconds
            "--log-level=warn",
        )
        self._wait_ready("etcd", f"{url}/health", None)
        return url

    def _wait_ready(self, name: str, url: str, pki: Pki | None) -> None:
        context = None
        if pki is not None:
            context = ssl.create_default_context(cafile=str(pki.ca))
            context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        deadline = time.monotonic() + READY_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            for component in self.components:
                component.check_alive()
            try:
                with urllib.request.urlopen(url, timeout=5, context=context) as answer:
                    if answer.status == 200:
                        return
            except OSError as exc:
                last = str(exc)
            time.sleep(0.3)
        raise ControlPlaneError(f"{name} was not ready at {url} within {READY_TIMEOUT:.0f}s ({last})")

    def _wait_for_default_service_account(self, pki: Pki) -> None:
        """The controller manager is working once it made the default namespace's ServiceAccount."""
        self._wait_ready(
            "kube-controller-manager (the default ServiceAccount)",
            f"{self.server}/api/v1/namespaces/default/serviceaccounts/default",
            pki,
        )
