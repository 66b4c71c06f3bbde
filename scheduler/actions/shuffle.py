"""shuffle: evict the tasks plugins want gone whatever is pending (Volcano's shuffle action), such
as tdm's preemptable pods on revocable nodes once their zone's window has closed.

Victims come from `Session.victim_tasks` (every plugin's `add_victim_tasks_fn`, each task once);
the actions' own rules still hold (`may_be_victim`): a pod or PodGroup marked
`volcano.sh/preemptable: "false"`, a critical pod or a task that is not running or bound is never
evicted here either, and the eviction filters (the pdb plugin's budgets) have the last word.
Each eviction is committed on its own, with reason `shuffle`.
"""

from __future__ import annotations

from lahar.scheduler.actions.preempt import EVICTABLE, may_be_victim
from lahar.scheduler.framework.plugin import Action, register_action
from lahar.scheduler.framework.session import Session


@register_action
class Shuffle(Action):
    name = "shuffle"

    def execute(self, session: Session) -> None:
        named = [
            task
            for task in session.victim_tasks()
            if task.status in EVICTABLE and may_be_victim(session.jobs[task.job], task)
        ]
        for task in session.eviction_filter(named):
            statement = session.statement()
            statement.evict(task, "shuffle")
            statement.commit()
