"""Kubelet's cgroup layout: the cgroup version at a root, and the pod and container directories of
the cgroupfs and systemd drivers (DESIGN.md, "Agent").

    cgroupfs  kubepods/pod<uid>                       (Guaranteed)
              kubepods/burstable/pod<uid>/<container-id>
              kubepods/besteffort/pod<uid>/<container-id>
    systemd   kubepods.slice/kubepods-pod<uid_>.slice  (uid_: the uid with '-' replaced by '_')
              kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope
              kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice/crio-<id>.scope

Paths are relative to a hierarchy: the cgroup root on v2, each controller's mount on v1 (kubelet
creates the same relative path under cpu, cpuacct, memory and blkio). The kubepods root name is
configurable so `lahar up`'s runtime can keep its pods under e.g. `lahar/kubepods`."""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lahar.api.qos import BEST_EFFORT, BURSTABLE, GUARANTEED

DEFAULT_KUBEPODS = "kubepods"
# Kubelet's QoS-level directories; Guaranteed pods sit directly under kubepods.
QOS_DIR_NAMES: dict[str, str] = {GUARANTEED: "", BURSTABLE: "burstable", BEST_EFFORT: "besteffort"}
# v1 controllers whose mount holds pod cgroups, in the order discovery prefers them.
V1_DISCOVERY_CONTROLLERS = ("cpuacct", "cpu", "memory")
# The container runtimes' systemd scopes; crio's `crio-conmon-<id>.scope` (the monitor) is left out.
SYSTEMD_CONTAINER_SCOPE = re.compile(r"^(?:cri-containerd|docker|crio)-([0-9a-f]+)\.scope$")


class CgroupVersion(enum.IntEnum):
    V1 = 1
    V2 = 2


class CgroupDriver(enum.StrEnum):
    CGROUPFS = "cgroupfs"
    SYSTEMD = "systemd"


def detect_version(root: Path) -> CgroupVersion:
    """v2 when the root is a cgroup2 mount (it has `cgroup.controllers`), else v1 with one
    directory per controller. A hybrid host (v1 plus an empty `unified` cgroup2) is v1."""
    return CgroupVersion.V2 if (root / "cgroup.controllers").exists() else CgroupVersion.V1


def v1_controller_dirs(root: Path) -> dict[str, Path]:
    """Controller name -> its mount under a v1 root, for separate mounts (`cpu`, `cpuacct`) and
    co-mounted ones (`cpu,cpuacct`, with or without the usual `cpu` -> `cpu,cpuacct` symlinks)."""
    dirs: dict[str, Path] = {}
    try:
        entries = sorted(os.scandir(root), key=lambda entry: entry.name)
    except OSError:
        return dirs
    for entry in entries:
        if entry.is_dir():  # follows the symlinks, which name the same mount
            for controller in entry.name.split(","):
                dirs.setdefault(controller, Path(entry.path))
    return dirs


def v1_write_problem(root: Path, controllers: Iterable[str]) -> str | None:
    """Why cgroups of these v1 controllers cannot be created under `root` here, or None (the
    real-kernel tests, the co-location bench and the local runtime's tests ask this)."""
    if os.geteuid() != 0:
        return "creating cgroups needs root"
    if detect_version(root) is not CgroupVersion.V1:
        return f"{root} is not a cgroup v1 root (v2 is tested on fake trees)"
    mounts = v1_controller_dirs(root)
    for name in controllers:
        if name not in mounts or not os.access(mounts[name], os.W_OK):
            return f"cgroup v1 controller {name} is not mounted writable under {root}"
    return None


def pod_hierarchy(root: Path, version: CgroupVersion | None = None) -> Path:
    """The directory pod cgroups are listed in: the root on v2, a CPU or memory mount on v1."""
    if (version or detect_version(root)) is CgroupVersion.V2:
        return root
    dirs = v1_controller_dirs(root)
    for controller in V1_DISCOVERY_CONTROLLERS:
        if controller in dirs:
            return dirs[controller]
    return root / V1_DISCOVERY_CONTROLLERS[0]


@dataclass(frozen=True)
class KubeLayout:
    """One driver's names under one kubepods root (`kubepods`, or a nested `lahar/kubepods`)."""

    driver: CgroupDriver
    kubepods: str = DEFAULT_KUBEPODS

    @property
    def _parent_and_base(self) -> tuple[str, str]:
        parent, _, base = self.kubepods.strip("/").rpartition("/")
        return parent, base

    @property
    def top(self) -> str:
        """The kubepods directory, relative to the hierarchy."""
        if self.driver is CgroupDriver.CGROUPFS:
            return self.kubepods.strip("/")
        parent, base = self._parent_and_base
        return _join(parent, f"{base}.slice")

    def qos_dir(self, kube_qos: str) -> str:
        """The QoS-level directory of a Kubernetes QoS class, relative to the hierarchy."""
        level = QOS_DIR_NAMES[kube_qos]
        if not level:
            return self.top
        if self.driver is CgroupDriver.CGROUPFS:
            return _join(self.top, level)
        return _join(self.top, f"{self._slice_prefix(kube_qos)}.slice")

    def pod_dir_prefix_suffix(self, kube_qos: str) -> tuple[str, str]:
        """A pod directory's name is prefix + uid (with '_' for '-' on systemd) + suffix."""
        if self.driver is CgroupDriver.CGROUPFS:
            return "pod", ""
        return f"{self._slice_prefix(kube_qos)}-pod", ".slice"

    def pod_dir(self, uid: str, kube_qos: str) -> str:
        prefix, suffix = self.pod_dir_prefix_suffix(kube_qos)
        return _join(self.qos_dir(kube_qos), f"{prefix}{self._encode_uid(uid)}{suffix}")

    def uid_of(self, dir_name: str, kube_qos: str) -> str | None:
        """The pod uid a directory name in `qos_dir(kube_qos)` stands for, or None."""
        prefix, suffix = self.pod_dir_prefix_suffix(kube_qos)
        if not (dir_name.startswith(prefix) and dir_name.endswith(suffix)):
            return None
        encoded = dir_name[len(prefix) : len(dir_name) - len(suffix)]
        # `kubepods-pod...` must not swallow `kubepods-burstable...`, whose uid would hold '-'.
        if not encoded or "/" in encoded or (self.driver is CgroupDriver.SYSTEMD and "-" in encoded):
            return None
        return encoded.replace("_", "-") if self.driver is CgroupDriver.SYSTEMD else encoded

    def _slice_prefix(self, kube_qos: str) -> str:
        level = QOS_DIR_NAMES[kube_qos]
        base = self._parent_and_base[1]
        return f"{base}-{level}" if level else base

    def _encode_uid(self, uid: str) -> str:
        # systemd reads '-' in a slice name as nesting, so kubelet writes uids with '_'.
        return uid.replace("-", "_") if self.driver is CgroupDriver.SYSTEMD else uid


def _join(parent: str, child: str) -> str:
    return f"{parent}/{child}" if parent else child


def pod_cgroup_dir(layout: KubeLayout, uid: str, kube_qos: str) -> str:
    """A pod's cgroup directory relative to the hierarchy, e.g.
    `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_....slice`."""
    return layout.pod_dir(uid, kube_qos)


@dataclass(frozen=True)
class PodCgroup:
    uid: str
    path: str  # relative to the hierarchy
    kube_qos_class: str  # from the directory it sits in
    driver: CgroupDriver


def scan_pod_cgroups(hierarchy: Path, kubepods: str = DEFAULT_KUBEPODS) -> list[PodCgroup]:
    """Every pod cgroup under the kubepods root of either driver (a host uses one; scanning both
    needs no kubelet configuration). Three or six `listdir`s: cheap enough for every cycle."""
    found: list[PodCgroup] = []
    for driver in CgroupDriver:
        layout = KubeLayout(driver, kubepods)
        if not (hierarchy / layout.top).is_dir():
            continue
        for kube_qos in QOS_DIR_NAMES:
            qos_dir = layout.qos_dir(kube_qos)
            for name in _listdir(hierarchy / qos_dir):
                uid = layout.uid_of(name, kube_qos)
                if uid is not None:
                    found.append(PodCgroup(uid, _join(qos_dir, name), kube_qos, driver))
    return found


def find_pod_cgroups(root: Path, kubepods: str = DEFAULT_KUBEPODS) -> dict[str, str]:
    """Pod uid -> its cgroup directory relative to the hierarchy, at a cgroup root of either
    version (`/sys/fs/cgroup`, or a fake tree in tests)."""
    return {pod.uid: pod.path for pod in scan_pod_cgroups(pod_hierarchy(root), kubepods)}


def container_cgroups(hierarchy: Path, pod_path: str) -> dict[str, str]:
    """Container id -> its cgroup directory (relative) under a pod's. cgroupfs names containers by
    id; systemd by the runtime's scope (`cri-containerd-<id>.scope`, `docker-`, `crio-`). The
    sandbox (pause) container is among them: only the runtime knows which one it is."""
    systemd = pod_path.endswith(".slice")
    containers: dict[str, str] = {}
    try:
        with os.scandir(hierarchy / pod_path) as entries:
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                if systemd:
                    match = SYSTEMD_CONTAINER_SCOPE.match(entry.name)
                    if match is None:
                        continue
                    container_id = match.group(1)
                else:
                    container_id = entry.name
                containers[container_id] = f"{pod_path}/{entry.name}"
    except OSError:  # the pod ended
        return {}
    return containers


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
