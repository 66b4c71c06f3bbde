"""The local runtime's cgroups: kubelet's cgroupfs layout under a Lahar parent, so the agent's QoS
engine finds and tunes the pods `lahar up` runs exactly as on a kubelet node (`lahar agent
--kubepods lahar-kubepods`):

    <hierarchy>/lahar-kubepods/pod<uid>/<container-id>                (Guaranteed)
    <hierarchy>/lahar-kubepods/burstable/pod<uid>/<container-id>
    <hierarchy>/lahar-kubepods/besteffort/pod<uid>/<container-id>

where <hierarchy> is each v1 controller mount (cpu, cpuacct, cpuset, memory, blkio) or the v2
root. On a v1 host with the cgroup2 hierarchy mounted at <root>/unified (systemd's hybrid mode) the
tree is mirrored there too and every container joins its mirror: no controller is enabled there,
but each pod gets its own cpu.pressure, the CPU wait the agent's interference controller reads
(agent/collectors/cpu_wait.py). The names come from the agent's KubeLayout, so the two cannot drift apart. Requests and
limits are applied as kubelet does: cpu shares from the CPU request (2 for none), a CFS quota from
the CPU limit, a memory limit from the memory limit; the pod cgroup gets the pod's totals, the
besteffort level 2 shares and the burstable level the sum of its pods' requests. On v2 the same
values go to cpu.weight, cpu.max and memory.max."""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lahar.agent.cgroups.layout import CgroupDriver, CgroupVersion, KubeLayout, detect_version, v1_controller_dirs
from lahar.agent.qos.knobs import (
    DEFAULT_CFS_PERIOD_US,
    MIN_SHARES,
    milli_to_quota_us,
    milli_to_shares,
    shares_to_weight,
)
from lahar.api.qos import BEST_EFFORT, BURSTABLE, CONTAINER_LISTS, GUARANTEED
from lahar.api.resources import ResourceList, pod_limits, pod_requests
from lahar.node import DEFAULT_PARENT

log = logging.getLogger("lahar.node.cgroups")

CGROUP_ROOT = Path("/sys/fs/cgroup")
# v1 controllers the agent reads or tunes; the first three are required.
V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "cpuset", "blkio")
V1_REQUIRED = 3
V2_CONTROLLERS = ("cpu", "cpuset", "memory", "io", "pids")
UNIFIED = "unified"  # where a v1 host mounts cgroup2 beside its controllers (the agent reads PSI there)
RMDIR_TIMEOUT_SECONDS = 5.0  # the kernel reports a cgroup busy for a moment after its last task exits


class CgroupsUnavailable(Exception):
    """This process may not manage cgroups here; the message says why."""


@dataclass(frozen=True)
class CgroupLimits:
    """Kubelet's settings of one cgroup in logical units (None: unlimited)."""

    cpu_shares: int = MIN_SHARES
    cpu_quota_us: int | None = None
    memory_limit_bytes: int | None = None
    cpu_period_us: int = DEFAULT_CFS_PERIOD_US


def limit_files(limits: CgroupLimits, version: CgroupVersion) -> list[tuple[str, str]]:
    """(file, content) to write for `limits`, in order (the CFS period before its quota)."""
    if version is CgroupVersion.V2:
        quota = "max" if limits.cpu_quota_us is None else str(limits.cpu_quota_us)
        memory = "max" if limits.memory_limit_bytes is None else str(limits.memory_limit_bytes)
        return [
            ("cpu.weight", str(shares_to_weight(limits.cpu_shares))),
            ("cpu.max", f"{quota} {limits.cpu_period_us}"),
            ("memory.max", memory),
        ]
    return [
        ("cpu.shares", str(limits.cpu_shares)),
        ("cpu.cfs_period_us", str(limits.cpu_period_us)),
        ("cpu.cfs_quota_us", str(-1 if limits.cpu_quota_us is None else limits.cpu_quota_us)),
        ("memory.limit_in_bytes", str(-1 if limits.memory_limit_bytes is None else limits.memory_limit_bytes)),
    ]


def _limits_of(requests: ResourceList, limits: ResourceList, cpu_limited: bool, memory_limited: bool) -> CgroupLimits:
    return CgroupLimits(
        milli_to_shares(requests.get("cpu")),
        milli_to_quota_us(limits.get("cpu")) if cpu_limited else None,
        limits.get("memory") if memory_limited else None,
    )


def container_limits(container: Mapping[str, Any]) -> CgroupLimits:
    resources = container.get("resources") or {}
    requests = ResourceList.from_k8s(resources.get("requests"))
    limits = ResourceList.from_k8s(resources.get("limits"))
    return _limits_of(requests, limits, "cpu" in limits, "memory" in limits)


def pod_cgroup_limits(pod: Mapping[str, Any]) -> CgroupLimits:
    """The pod cgroup's: total requests; a total limit only where every container has one."""
    spec = pod.get("spec") or {}
    containers = [c for name in CONTAINER_LISTS for c in spec.get(name) or []]

    def all_limit(resource: str) -> bool:
        return bool(containers) and all(
            resource in ((c.get("resources") or {}).get("limits") or {}) for c in containers
        )

    return _limits_of(pod_requests(pod), pod_limits(pod), all_limit("cpu"), all_limit("memory"))


class CgroupTree:
    """The runtime's kubepods tree under `root` (/sys/fs/cgroup, or a fake tree in tests).
    Paths given to and returned by its methods are relative to a hierarchy."""

    def __init__(self, root: Path = CGROUP_ROOT, parent: str = DEFAULT_PARENT) -> None:
        self.root = Path(root)
        self.layout = KubeLayout(CgroupDriver.CGROUPFS, parent)
        self.version = detect_version(self.root)
        self._mounts = v1_controller_dirs(self.root) if self.version is CgroupVersion.V1 else {}
        self.hierarchies = self._hierarchies()

    @property
    def top(self) -> str:
        return self.layout.top

    def _hierarchies(self) -> list[Path]:
        """Where each relative path exists: the v2 root, or each v1 controller mount once."""
        if self.version is CgroupVersion.V2:
            return [self.root]
        unique: dict[Path, Path] = {}
        for controller in V1_CONTROLLERS:
            if controller in self._mounts:
                unique.setdefault(self._mounts[controller].resolve(), self._mounts[controller])
        unified = self._mounts.get(UNIFIED)
        if unified is not None and (unified / "cgroup.procs").exists():  # a cgroup2 mount, not a stray directory
            unique.setdefault(unified.resolve(), unified)
        return list(unique.values())

    def file(self, path: str, filename: str) -> Path:
        """Where a cgroup's file lives (e.g. `cpu.idle` of the besteffort level), for readers."""
        return self._hierarchy_of(filename) / path / filename

    def _hierarchy_of(self, filename: str) -> Path:
        """The hierarchy a file lives in: the v2 root, or its controller's v1 mount."""
        if self.version is CgroupVersion.V2:
            return self.root
        return self._mounts[filename.split(".", 1)[0]]

    # --- the tree --------------------------------------------------------------------------------

    def setup(self, node_cpu_millis: int) -> None:
        """Create the kubepods and QoS-level cgroups; CgroupsUnavailable when this process may not."""
        if self.version is CgroupVersion.V1:
            missing = [c for c in V1_CONTROLLERS[:V1_REQUIRED] if c not in self._mounts]
            if missing:
                raise CgroupsUnavailable(
                    f"cgroup v1 controllers {', '.join(missing)} are not mounted under {self.root}"
                )
        elif not (self.root / "cgroup.controllers").is_file():
            raise CgroupsUnavailable(f"{self.root} is not a cgroup2 mount")
        self._drop_unwritable_mirror()
        try:
            self.create(self.top, CgroupLimits(milli_to_shares(node_cpu_millis)))
            self.create(self.layout.qos_dir(BURSTABLE), CgroupLimits())
            self.create(self.layout.qos_dir(BEST_EFFORT), CgroupLimits())
        except OSError as exc:
            self._remove_quietly(self.top)
            raise CgroupsUnavailable(
                f"cannot create cgroups under {self.root} ({exc.strerror or exc}); "
                "run lahar up as root with cgroups mounted writable"
            ) from exc

    def _drop_unwritable_mirror(self) -> None:
        """The cgroup2 mirror only adds a signal: a host where it cannot be written runs without it
        (the agent falls back to schedstat run delay)."""
        unified = self._mounts.get(UNIFIED)
        if unified is None or unified not in self.hierarchies:
            return
        try:
            self._make(unified, self.layout.qos_dir(BEST_EFFORT))
        except OSError as exc:
            log.warning("no per-pod PSI: cannot create cgroups under %s (%s)", unified, exc.strerror or exc)
            self.hierarchies.remove(unified)

    def teardown(self) -> None:
        """Remove the whole tree, killing whatever still runs in it."""
        self.remove(self.top)

    def pod_path(self, uid: str, kube_qos: str) -> str:
        return self.layout.pod_dir(uid, kube_qos if kube_qos in (GUARANTEED, BURSTABLE, BEST_EFFORT) else BURSTABLE)

    def create(self, path: str, limits: CgroupLimits) -> None:
        """Make the cgroup in every hierarchy (its parents too) and apply `limits`."""
        for hierarchy in self.hierarchies:
            self._make(hierarchy, path)
        self.apply(path, limits)

    def apply(self, path: str, limits: CgroupLimits) -> None:
        for filename, content in limit_files(limits, self.version):
            target = self.file(path, filename)
            if self.version is CgroupVersion.V2 and not target.exists() and self._is_kernel_tree(target.parent):
                continue  # the controller is not enabled here; nothing to apply it to
            target.write_text(content)

    def procs_files(self, path: str) -> list[Path]:
        """The cgroup.procs files a process writes its pid to, to join `path` everywhere."""
        return [hierarchy / path / "cgroup.procs" for hierarchy in self.hierarchies]

    def kill(self, path: str) -> None:
        """SIGKILL every task in the cgroup (not below it)."""
        for procs in self.procs_files(path):
            _kill_tasks(procs)

    def oom_killed(self, path: str) -> bool:
        """Whether the kernel's OOM killer struck in the cgroup (v1 memory.oom_control, v2 memory.events)."""
        name = "memory.events" if self.version is CgroupVersion.V2 else "memory.oom_control"
        try:
            text = self.file(path, name).read_text()
        except (OSError, KeyError):
            return False
        return any(words[:1] == ["oom_kill"] and words[1:2] != ["0"] for words in map(str.split, text.splitlines()))

    def remove(self, path: str) -> None:
        """Remove a cgroup and everything below it in every hierarchy, killing the tasks in them."""
        errors: list[str] = []
        for hierarchy in self.hierarchies:
            top = hierarchy / path
            if not top.is_dir():
                continue
            for directory, _, _ in sorted(os.walk(top), key=lambda entry: -entry[0].count(os.sep)):
                try:
                    _remove_cgroup(Path(directory))
                except OSError as exc:
                    errors.append(f"{directory}: {exc.strerror or exc}")
        if errors:
            raise OSError(f"cgroups left behind: {'; '.join(errors)}")

    def _remove_quietly(self, path: str) -> None:
        try:
            self.remove(path)
        except OSError as exc:
            log.warning("%s", exc)

    # --- creation details ------------------------------------------------------------------------

    def _make(self, hierarchy: Path, path: str) -> None:
        parts = path.strip("/").split("/")
        current = hierarchy
        for part in parts:
            if self.version is CgroupVersion.V2:
                self._enable_v2_controllers(current)
            parent, current = current, current / part
            try:
                current.mkdir()
            except FileExistsError:
                continue
            if hierarchy == self._mounts.get("cpuset"):
                _inherit_cpuset(parent, current)

    def _enable_v2_controllers(self, directory: Path) -> None:
        """Let the children of `directory` use the controllers kubelet's settings need. One write
        per controller: the kernel refuses a whole line for one it does not offer there."""
        try:
            offered = set((directory / "cgroup.controllers").read_text().split())
        except OSError:
            offered = set(V2_CONTROLLERS)  # a fake tree: nothing to ask
        for controller in V2_CONTROLLERS:
            if controller in offered:
                try:
                    with open(directory / "cgroup.subtree_control", "a") as control:
                        control.write(f"+{controller}")
                except OSError as exc:
                    log.debug("cannot enable the %s controller in %s: %s", controller, directory, exc)

    @staticmethod
    def _is_kernel_tree(directory: Path) -> bool:
        return (directory / "cgroup.procs").exists() and (directory / "cgroup.controllers").exists()


def _inherit_cpuset(parent: Path, child: Path) -> None:
    """A new v1 cpuset cgroup starts with no CPUs and no memory nodes (no task may join it):
    give it its parent's, as kubelet does."""
    for name in ("cpuset.cpus", "cpuset.mems"):
        try:
            inherited = (parent / name).read_text().strip()
        except OSError:
            continue  # a fake tree without the files
        try:
            current = (child / name).read_text().strip()
        except FileNotFoundError:
            current = ""
        if inherited and not current:
            (child / name).write_text(inherited)


def _remove_cgroup(directory: Path) -> None:
    """rmdir one cgroup after killing its tasks; a fake tree's plain files go first."""
    deadline = time.monotonic() + RMDIR_TIMEOUT_SECONDS
    while True:
        _kill_tasks(directory / "cgroup.procs")
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno == errno.ENOTEMPTY and _remove_plain_files(directory):
                continue
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _kill_tasks(procs: Path) -> None:
    try:
        pids = [int(line) for line in procs.read_text().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def _remove_plain_files(directory: Path) -> bool:
    """Unlink the regular files of a fake cgroup (a kernel's cannot be unlinked); True if any went."""
    removed = False
    for entry in directory.iterdir():
        if entry.is_file() and not entry.is_symlink():
            try:
                entry.unlink()
                removed = True
            except OSError:
                return False
    return removed
