"""gangpreempt and gangreclaim (Volcano's actions of those names): preempt and reclaim for whole
gangs, one candidate HyperNode at a time, so that a configuration listing them runs unchanged.

Lahar's preempt and reclaim already work so: a starving job's evictions stand only if the whole
gang is then pipelined, a victim gang keeps its minMember or goes whole, and a job with a hard
`networkTopology` makes its room within one HyperNode (`preempt.in_one_domain`), a job with
sub-jobs a sub-job at a time, each within a HyperNode of its own (`preempt.make_room`). These two are
those actions with Volcano's arguments:

- `maxDomains` (8): at most that many candidate HyperNodes are tried per job;
- `allowWholeBundle` (true): false keeps victim gangs at their minimum whole (only the members
  above minMember may go).

gangpreempt takes from lower-priority jobs of the job's own queue only (no within-job phase, as
Volcano's); gangreclaim is reclaim. Unlike Volcano's, a whole victim gang is evicted everywhere it
runs, not only its members inside the HyperNode (Lahar never leaves a gang running below its
minimum), and the victims are chosen node by node as preempt chooses them rather than by
Volcano's bundle ordering.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from lahar.scheduler.actions.preempt import Preempt, VictimAction, VictimSearch
from lahar.scheduler.actions.reclaim import Reclaim
from lahar.scheduler.framework.plugin import Arguments, boolean, number, register_action
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import JobInfo, QueueInfo

DEFAULT_MAX_DOMAINS = 8  # Volcano's defaultMaxDomains
GANG_ARGUMENTS: Arguments = {
    **VictimAction.ARGUMENTS,
    "maxDomains": number(minimum=1),
    "allowWholeBundle": boolean,
}


def configure_gang_search(arguments: Mapping[str, Any], search: VictimSearch) -> None:
    search.max_domains = int(arguments.get("maxDomains", DEFAULT_MAX_DOMAINS))
    search.allow_whole = bool(arguments.get("allowWholeBundle", True))


@register_action
class GangPreempt(Preempt):
    name = "gangpreempt"
    ARGUMENTS: ClassVar[Arguments] = GANG_ARGUMENTS

    def configure(self, search: VictimSearch) -> None:
        configure_gang_search(self.arguments, search)

    def serve(self, session: Session, search: VictimSearch, queue: QueueInfo, jobs: list[JobInfo]) -> None:
        for job in jobs:
            self._between_jobs(session, search, queue, job)


@register_action
class GangReclaim(Reclaim):
    name = "gangreclaim"
    ARGUMENTS: ClassVar[Arguments] = GANG_ARGUMENTS

    def configure(self, search: VictimSearch) -> None:
        configure_gang_search(self.arguments, search)
