"""Where collectors read: the host's /proc, /sys and cgroup mount, all under one root. A symlink
must not lead out of that root (a fake root for tests or a host mounted at /host): the places the
agent reads from are checked when it starts, and each cgroup file as it is opened."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path


class OutsideRootError(OSError):
    """A path that resolves (through a symlink) outside the root it must stay under."""

    def __init__(self, path: Path | str, root: Path | str) -> None:
        # EXDEV is what openat2(RESOLVE_BENEATH) answers for the same escape.
        super().__init__(errno.EXDEV, f"{path} resolves outside {root} (a symlink out of it): refused")


def inside(root: Path | str, path: Path | str) -> bool:
    """Whether `path`, all symlinks followed, stays at or under `root` (itself resolved)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real_root == os.sep or real == real_root or real.startswith(real_root + os.sep)


def require_inside(root: Path | str, path: Path | str) -> None:
    if not inside(root, path):
        raise OutsideRootError(path, root)


@dataclass(frozen=True)
class Host:
    root: Path = Path("/")
    cgroup_root: Path | None = None  # default <root>/sys/fs/cgroup

    @property
    def proc(self) -> Path:
        return self.root / "proc"

    @property
    def sys(self) -> Path:
        return self.root / "sys"

    @property
    def cgroup(self) -> Path:
        return self.cgroup_root if self.cgroup_root is not None else self.root / "sys" / "fs" / "cgroup"

    def check(self) -> None:
        """Refuse a root whose /proc, /sys or cgroup mount leads out of it (OutsideRootError).
        An explicit cgroup root is its own confinement: it need not be under the root."""
        for path in (self.proc, self.sys):
            if os.path.lexists(path):
                require_inside(self.root, path)
        if self.cgroup_root is None and os.path.lexists(self.cgroup):
            require_inside(self.root, self.cgroup)
