"""cdp: cooldown protection, a pod that started running recently is not taken as a victim by
preempt or reclaim (Volcano's cdp plugin, for elastic jobs whose pods would otherwise be
preempted again right after they came back).

A pod's cooldown is its label `volcano.sh/cooldown-time`, else its annotation of that name, in
Go's duration notation (`600s`, `10m`); Lahar adds the plugin argument `cooldown-time`, the
cooldown of pods that give none (Volcano's plugin takes no argument: without one, a pod without
the key is never protected). A pod is protected while its phase is Running and its `PodScheduled`
condition is True and changed less than the cooldown ago (the session's clock); every other
candidate stays a victim.

- preemptable, reclaimable: the candidates not protected (a permit vote; when it leaves none,
  its tier has no victims and a later tier decides, as for every victim filter).

A cooldown that cannot be read (a bad label or annotation) is reported once per session with a
Warning event on the pod, and the pod is treated as having none of its own (Volcano logs it and
leaves the pod unprotected; with the argument set, the argument's cooldown applies). A negative
cooldown protects nothing (as in Volcano). A bad or negative argument refuses the configuration.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lahar.scheduler.framework.plugin import Arguments, Plugin, epoch_seconds, go_duration, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import TaskInfo

COOLDOWN_TIME = "volcano.sh/cooldown-time"
ARGUMENT = "cooldown-time"


def cooldown_argument(value: Any) -> float:
    seconds = go_duration(value)
    if seconds < 0:
        raise ValueError(f"must not be negative, not {value!r}")
    return seconds


def scheduled_at(task: TaskInfo) -> float | None:
    """When a running pod's PodScheduled condition last turned True, or None (not running, no
    such condition, or an unreadable time)."""
    status = task.pod.status
    if status.get("phase") != "Running":
        return None
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            if condition.get("status") != "True":
                return None
            return epoch_seconds(str(condition.get("lastTransitionTime") or ""))
    return None


@register_plugin
class CooldownProtectionPlugin(Plugin):
    name = "cdp"
    ARGUMENTS: ClassVar[Arguments] = {ARGUMENT: cooldown_argument}

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.default: float | None = self.argument(ARGUMENT, None)
        self._reported: set[str] = set()
        session.add_preemptable_fn(self.victims)
        session.add_reclaimable_fn(self.victims)

    def cooldown(self, task: TaskInfo) -> float | None:
        """The task's cooldown in seconds (label, annotation, then the argument), or None."""
        meta = task.pod.meta
        given = meta.labels.get(COOLDOWN_TIME)
        if given is None:
            given = meta.annotations.get(COOLDOWN_TIME)
        if given is None:
            return self.default
        try:
            return go_duration(given)
        except ValueError as exc:
            if task.uid not in self._reported:
                self._reported.add(task.uid)
                message = f"{COOLDOWN_TIME}: {exc}; the pod has no cooldown of its own"
                self.session.record_event("Pod", task.namespace, task.name, "Warning", "InvalidCooldownTime", message)
            return self.default

    def protected(self, task: TaskInfo) -> bool:
        cooldown = self.cooldown(task)
        if cooldown is None:
            return False
        since = scheduled_at(task)
        return since is not None and since + cooldown > self.session.now

    def victims(self, evictor: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        return [task for task in candidates if not self.protected(task)]
