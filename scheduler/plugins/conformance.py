"""conformance: never evict pods the cluster cannot do without (Volcano's conformance plugin).

Victims of preempt and reclaim leave out pods of the `system-cluster-critical` and
`system-node-critical` PriorityClasses and pods in `kube-system`. The actions hold the same rule
whatever the configuration (`actions.preempt.may_be_victim`): in Volcano a tier whose plugins
answer no victims at all leaves the decision to the next tier, which could otherwise pick them.
"""

from __future__ import annotations

from lahar.scheduler.framework.plugin import Plugin, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import TaskInfo, is_critical


def evictable(_: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
    return [task for task in candidates if not is_critical(task.pod)]


@register_plugin
class ConformancePlugin(Plugin):
    name = "conformance"

    def on_session_open(self, session: Session) -> None:
        session.add_preemptable_fn(evictable)
        session.add_reclaimable_fn(evictable)
