"""Where collectors read: the host's /proc, /sys and cgroup mount, all under one root."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
