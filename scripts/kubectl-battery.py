#!/usr/bin/env python3
"""Run the differential kubectl battery (tests/kubectl_battery/battery.py) against the embedded
API server and a real kube-apiserver, print the table of differences and write it to
docs/kubectl-differences.md.

    scripts/kubectl-battery.py                       start both servers (the real one from the
                                                     cache scripts/build-k8s.sh fills)
    scripts/kubectl-battery.py --real-kubeconfig K   use a running real cluster with deploy/'s
                                                     CRDs and admission applied
    scripts/kubectl-battery.py --no-write            print only

Exit status 0 whatever the differences (they are findings); 1 when the battery cannot run.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.kubectl_battery.battery import BatteryBroken, Session, compare, report, run_session  # noqa: E402

DOC = REPO / "docs" / "kubectl-differences.md"


@contextlib.contextmanager
def embedded_server(workdir: Path) -> Iterator[Path]:
    """`lahar apiserver` on a free loopback port; its kubeconfig."""
    from lahar.endpoints import free_loopback_port

    port = free_loopback_port()
    log = open(workdir / "apiserver.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [sys.executable, "-m", "lahar", "apiserver", "--data-dir", str(workdir / "data"), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, server)
        kubeconfig = workdir / "embedded.kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: lahar\n  cluster:\n    server: {url}\n"
            "users:\n- name: lahar\n  user: {}\n"
            "contexts:\n- name: lahar\n  context:\n    cluster: lahar\n    user: lahar\n"
            "current-context: lahar\n"
        )
        yield kubeconfig
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _wait_healthy(url: str, server: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise BatteryBroken(f"lahar apiserver exited with {server.returncode}")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/healthz", timeout=1):
            return
        time.sleep(0.1)
    raise BatteryBroken(f"lahar apiserver did not answer within {timeout}s")


@contextlib.contextmanager
def real_server(workdir: Path) -> Iterator[Path]:
    """The real control plane of tests/kube (etcd, kube-apiserver, kube-controller-manager from
    the build cache), with deploy/'s CRDs, admission policies and the scheduler's RBAC applied;
    its admin kubeconfig."""
    try:
        from tests.kube.control_plane import ControlPlane, ControlPlaneError  # the control plane fixture's
    except ImportError as exc:
        raise BatteryBroken(f"no real control plane here (tests/kube/control_plane.py): {exc}") from exc
    with contextlib.ExitStack() as stack:
        try:
            plane = stack.enter_context(ControlPlane(workdir / "real"))
        except ControlPlaneError as exc:  # a failed build or start, named
            raise BatteryBroken(str(exc)) from exc
        kubeconfig = Path(plane.admin_kubeconfig)
        install_lahar_api(kubeconfig)
        yield kubeconfig


def install_lahar_api(kubeconfig: Path) -> None:
    """deploy/'s CRDs, then its admission policies, as a user installs them; the scheduler's
    ServiceAccount and RBAC, which the session's `auth can-i ... --as` the scheduler asks about."""
    kubectl = [shutil.which("kubectl") or "kubectl", f"--kubeconfig={kubeconfig}"]
    scheduler = REPO / "deploy" / "scheduler"
    for step in (
        [*kubectl, "apply", "--server-side", "-k", str(REPO / "deploy" / "crds")],
        [*kubectl, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"],
        [*kubectl, "apply", "--server-side", "-k", str(REPO / "deploy" / "admission")],
        [*kubectl, "apply", "--server-side", "-f", str(REPO / "deploy" / "namespace.yaml")],
        [*kubectl, "apply", "--server-side", "-f", str(scheduler / "serviceaccount.yaml")],
        [*kubectl, "apply", "--server-side", "-f", str(scheduler / "rbac.yaml")],
    ):
        done = subprocess.run(step, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise BatteryBroken(f"{' '.join(step[2:])}: {done.stderr.strip()}")


def kubectl_version(kubectl: str) -> str:
    done = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True, timeout=30)
    first = done.stdout.splitlines()[0] if done.stdout else "kubectl"
    return first.replace("Client Version:", "kubectl").strip()


def server_version(kubectl: str, kubeconfig: Path) -> str:
    done = subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", "version"], capture_output=True, text=True, timeout=30
    )
    found = [line for line in done.stdout.splitlines() if line.startswith("Server Version:")]
    return found[0].split(":", 1)[1].strip() if found else "unknown version"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real-kubeconfig", type=Path, help="a running real cluster (default: start one)")
    parser.add_argument("--no-write", action="store_true", help=f"print only, do not write {DOC.relative_to(REPO)}")
    args = parser.parse_args()
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("error: kubectl is not installed", file=sys.stderr)
        return 1
    session = Session()
    try:
        with tempfile.TemporaryDirectory(prefix="kubectl-battery-") as temp, contextlib.ExitStack() as stack:
            workdir = Path(temp)
            embedded_config = stack.enter_context(embedded_server(workdir))
            real_config = args.real_kubeconfig or stack.enter_context(real_server(workdir))
            embedded = run_session(kubectl, embedded_config, session, lambda line: print(f"embedded: {line}"))
            real = run_session(kubectl, real_config, session, lambda line: print(f"real: {line}"))
            real_version = server_version(kubectl, real_config)
    except BatteryBroken as exc:
        print(f"error: the battery could not run: {exc}", file=sys.stderr)
        return 1
    same, different = compare(embedded, real)
    text = report(same, different, kubectl_version(kubectl), f"kube-apiserver {real_version}")
    print(text)
    if not args.no_write:
        DOC.write_text(text)
        print(f"wrote {DOC.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
