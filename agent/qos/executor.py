"""The one writer of cgroup files (DESIGN.md, "QoS engine"), for cgroup v1 and v2.

For each desired (cgroup, knob, value): refuse a path outside the kubepods hierarchy; read the
file, compare, write only what differs; remember what was asserted so the next ticks skip the
read, and read again (re-assert) once `reassert_seconds` have passed, which puts back a value
someone else (kubelet, a person) changed. Every write is logged and counted by knob; a failure is
counted and logged once until it changes. Hierarchical knobs (v1 cpuset.cpus, where a child must
stay within its parent) are written loosened top-down, then tightened bottom-up. `dry_run` logs
the writes it would make and writes nothing."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from lahar.agent.cgroups.layout import (
    DEFAULT_KUBEPODS,
    CgroupDriver,
    CgroupVersion,
    KubeLayout,
    detect_version,
    v1_controller_dirs,
)
from lahar.agent.qos.knobs import KNOBS, Binding, Write, binding
from lahar.agent.qos.model import Desired

log = logging.getLogger("lahar.agent.qos")

DEFAULT_REASSERT_SECONDS = 10.0
DENIED_RETRY_SECONDS = 60.0  # after the kernel refused us for lack of rights, try again this late
# Errors that mean "this agent may not write cgroups here", as opposed to the kernel refusing a value.
_DENIED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_GONE = frozenset({errno.ENOENT, errno.ENODEV})  # the pod ended between the plan and the write


@dataclass
class _Asserted:
    value: Any
    at: float


@dataclass
class _Change:
    """A hierarchical knob on its way from `current` to `desired`."""

    item: Desired
    binding: Binding
    directory: Path
    current: Any
    desired: Any


class CgroupExecutor:
    def __init__(
        self,
        root: Path,
        kubepods: str = DEFAULT_KUBEPODS,
        *,
        version: CgroupVersion | None = None,
        dry_run: bool = False,
        reassert_seconds: float = DEFAULT_REASSERT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.version = version or detect_version(root)
        self.dry_run = dry_run
        self.reassert_seconds = reassert_seconds
        self.clock = clock
        self._mounts = v1_controller_dirs(root) if self.version is CgroupVersion.V1 else {}
        # Both drivers' kubepods directories: the only subtrees this writer touches.
        self.tops = tuple(dict.fromkeys(KubeLayout(driver, kubepods).top for driver in CgroupDriver))
        self._top_parts = [PurePosixPath(top).parts for top in self.tops]
        self.writes: Counter[str] = Counter()  # by knob; in dry-run, the writes it would have made
        self.errors: Counter[str] = Counter()  # by knob: reads or writes the kernel refused
        self.refused = 0  # desired values outside the kubepods hierarchy
        self.denied: str | None = None  # why the kernel would not let this agent write, if so
        self._denied_at = 0.0
        self._asserted: dict[tuple[str, str], _Asserted] = {}
        self._directories: dict[tuple[str, str], Path] = {}  # (cgroup, controller) -> its directory
        self._failing: dict[tuple[str, str], str] = {}  # the failure last logged per cgroup and knob
        self._lock = threading.Lock()  # the tick and the pressure fast path both write

    # --- where -----------------------------------------------------------------------------

    def hierarchy(self, controller: str) -> Path:
        """The directory cgroup paths are relative to: the root on v2, a controller's mount on v1."""
        if self.version is CgroupVersion.V2:
            return self.root
        return self._mounts.get(controller, self.root / controller)

    def _directory(self, cgroup: str, found: Binding) -> Path | None:
        """Lexically inside a kubepods top: no absolute path, no `..` (remembered: every tick asks)."""
        key = (cgroup, found.controller)
        directory = self._directories.get(key)
        if directory is not None:
            return directory
        parts = PurePosixPath(cgroup).parts
        if not cgroup.startswith("/") and ".." not in parts and any(parts[: len(t)] == t for t in self._top_parts):
            directory = self._directories[key] = self.hierarchy(found.controller).joinpath(*parts)
            return directory
        self._refuse(cgroup, found)
        return None

    def _really_inside(self, directory: Path, cgroup: str, found: Binding) -> bool:
        """Checked before each read or write: a symlink must not lead out of the tops either."""
        base = self.hierarchy(found.controller)
        real = os.path.realpath(directory)
        for top in self._top_parts:
            real_top = os.path.realpath(base.joinpath(*top))
            if real == real_top or real.startswith(real_top + os.sep):
                return True
        self._refuse(cgroup, found)
        return False

    def _refuse(self, cgroup: str, found: Binding) -> None:
        self.refused += 1
        self._log_once(
            (cgroup, found.filename),
            "refused",
            f"refusing to touch {cgroup!r}: outside the pod hierarchy ({', '.join(self.tops)})",
        )

    # --- what the kernel offers ------------------------------------------------------------

    def existing_top(self) -> str | None:
        """The kubepods directory that exists (a node uses one driver), or None before any pod."""
        for top in self.tops:
            if (self.hierarchy("cpu") / top).is_dir():
                return top
        return None

    def supported(self, cgroup: str) -> frozenset[str]:
        """The knobs whose files exist in a cgroup (e.g. cpu.idle needs kernel 5.15, memory.reclaim 5.19)."""
        return frozenset(
            knob
            for knob, versions in KNOBS.items()
            if (found := versions.get(self.version)) is not None
            and (self.hierarchy(found.controller) / cgroup / found.filename).exists()
        )

    def availability(self) -> tuple[bool, str]:
        """(whether writes can work, why not)."""
        # Retried after a while: rights can come back (a remount, a fixed securityContext).
        if self.denied is not None and self.clock() - self._denied_at < DENIED_RETRY_SECONDS:
            return False, self.denied
        top = self.existing_top()
        if top is not None and not os.access(self.hierarchy("cpu") / top, os.W_OK):
            return False, f"no write access to {self.hierarchy('cpu') / top}"
        return True, ""

    def read(self, cgroup: str, knob: str) -> Any:
        """A knob's current value in a cgroup; None when it cannot be read (or is unlimited)."""
        found = binding(knob, self.version)
        directory = None if found is None else self._directory(cgroup, found)
        if found is None or directory is None or not self._really_inside(directory, cgroup, found):
            return None
        try:
            return found.read(directory)
        except (OSError, ValueError):
            return None

    # --- writing ---------------------------------------------------------------------------

    def apply(self, desired: Iterable[Desired]) -> int:
        """Bring every desired value about; the number of file writes made (or, dry, planned)."""
        items = list(desired)
        with self._lock:
            now = self.clock()
            before = sum(self.writes.values())
            hierarchical: list[_Change] = []
            for item in items:
                found = binding(item.knob, self.version)
                if found is None:
                    continue  # a knob this version lacks: strategies check node.supported
                directory = self._directory(item.cgroup, found)
                if directory is None:
                    continue
                change = self._change(item, found, directory, now)
                if change is None:
                    continue
                if found.hierarchical:
                    hierarchical.append(change)
                else:
                    self._commit(change, change.desired, now)
            self._apply_hierarchical(hierarchical, now)
            return sum(self.writes.values()) - before

    def retain(self, keys: Iterable[tuple[str, str]]) -> None:
        """Forget what was asserted outside these (cgroup, knob) pairs (ended pods, switched-off
        strategies), so memory stays bounded and a value wanted again is read afresh."""
        keep = set(keys)
        cgroups = {cgroup for cgroup, _ in keep}
        with self._lock:
            for key in [k for k in self._asserted if k not in keep]:
                del self._asserted[key]
            for key in [k for k in self._directories if k[0] not in cgroups]:
                del self._directories[key]

    def _change(self, item: Desired, found: Binding, directory: Path, now: float) -> _Change | None:
        """The change to make, or None when the file already holds the value (or is gone)."""
        desired = found.native(item.value)
        key = (item.cgroup, item.knob)
        held = self._asserted.get(key)
        if not found.action and held is not None and held.value == desired and now - held.at < self.reassert_seconds:
            return None
        if not os.path.isdir(directory):
            # Not there (kubelet makes the BestEffort directory with its first BestEffort pod):
            # as gone as an ENOENT on the read, for one stat instead of the realpath walks below.
            self._asserted.pop(key, None)
            return None
        if not self._really_inside(directory, item.cgroup, found):
            return None
        try:
            current = found.read(directory)
        except OSError as exc:
            if exc.errno in _GONE:
                self._asserted.pop(key, None)
                return None
            self._failed(item, found.filename, exc)
            return None
        except ValueError as exc:
            self._failed(item, found.filename, exc)
            return None
        if not found.writes(current, desired):
            self._asserted[key] = _Asserted(desired, now)
            return None
        return _Change(item, found, directory, current, desired)

    def _apply_hierarchical(self, changes: list[_Change], now: float) -> None:
        """Loosen top-down (parents first), then tighten bottom-up, so no write ever leaves a
        child outside its parent (v1 cpuset refuses that with EINVAL/EBUSY)."""
        for change in sorted(changes, key=lambda c: c.item.cgroup.count("/")):
            loose = change.binding.loosened(change.current, change.desired)
            if loose != change.current and self._write(change, change.binding.writes(change.current, loose)):
                change.current = loose
        for change in sorted(changes, key=lambda c: -c.item.cgroup.count("/")):
            self._commit(change, change.desired, now)

    def _commit(self, change: _Change, value: Any, now: float) -> None:
        if self._write(change, change.binding.writes(change.current, value)):
            change.current = value
            if not change.binding.action:
                self._asserted[(change.item.cgroup, change.item.knob)] = _Asserted(value, now)
            if change.item.knob == "cpu.idle":
                # The kernel resets the group's weight when cpu.idle changes (to 1024 shares on
                # leaving idle): whatever was asserted of it must be read again.
                self._asserted.pop((change.item.cgroup, "cpu.weight"), None)

    def _write(self, change: _Change, writes: list[Write]) -> bool:
        item = change.item
        for write in writes:
            path = change.directory / write.filename
            was = "" if change.binding.action else f", was {_shown(change.current)}"
            if self.dry_run:
                log.info("dry-run: would write %r to %s (%s%s)", write.content, path, item.knob, was)
                self.writes[item.knob] += 1
                continue
            try:
                # Never create (a cgroup file exists); never through a symlink (ELOOP): it may lead anywhere.
                fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW)
                try:
                    os.write(fd, write.content.encode())
                finally:
                    os.close(fd)
            except OSError as exc:
                if exc.errno in _GONE:
                    return False
                self._failed(item, write.filename, exc, write.content)
                return False
            self.writes[item.knob] += 1
            self.denied = None  # a write went through: the rights are there
            self._failing.pop((item.cgroup, item.knob), None)
            # Debug: the engine says what a tick wrote in one line; the interference loop's cap
            # changes are summed up once a minute (engine.py), so the agent is quiet at steady state.
            log.debug("cgroup %s %s = %r (%s%s)", item.cgroup, write.filename, write.content, item.knob, was)
        return True

    def _failed(self, item: Desired, filename: str, exc: Exception, content: str | None = None) -> None:
        self.errors[item.knob] += 1
        if isinstance(exc, OSError) and exc.errno in _DENIED:
            self.denied = f"cannot write cgroups: {filename} in {item.cgroup}: {exc.strerror or exc}"
            self._denied_at = self.clock()
        what = f"writing {content!r} to" if content is not None else "reading"
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        self._log_once((item.cgroup, item.knob), reason, f"{what} {item.cgroup}/{filename} failed: {reason}")

    def _log_once(self, key: tuple[str, str], failure: str, message: str) -> None:
        """A repeated failure is logged once (each tick would otherwise say it again)."""
        if self._failing.get(key) != failure:
            self._failing[key] = failure
            log.warning("%s", message)


def _shown(value: Any) -> str:
    if isinstance(value, frozenset):
        return ",".join(map(str, sorted(value))) or "(none)"
    return "unlimited" if value is None else str(value)
