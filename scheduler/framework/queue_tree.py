"""The queue tree (`Queue.spec.parent`) as the queue plugins read it: each queue's ancestors,
nearest first, up to Volcano's `root` (a queue without a parent hangs under it). A parent that
does not exist or a chain that loops is a fault of the queue: its chain is cut there, and the
plugin reports it (a Warning event on the queue) and schedules everything else."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lahar.scheduler.model import QueueInfo

ROOT_QUEUE = "root"


@dataclass
class QueueTree:
    ancestors: dict[str, list[str]] = field(default_factory=dict)  # nearest first, root left out
    children: dict[str, list[str]] = field(default_factory=dict)
    faults: dict[str, str] = field(default_factory=dict)  # queue -> why its chain was cut

    def is_leaf(self, name: str) -> bool:
        return not self.children.get(name)


def queue_tree(queues: Mapping[str, QueueInfo]) -> QueueTree:
    tree = QueueTree()
    for queue in queues.values():
        chain: list[str] = []
        seen = {queue.name}
        parent = queue.parent
        while parent and parent != ROOT_QUEUE:
            if parent in seen or parent not in queues:
                tree.faults[queue.name] = (
                    "its parent chain loops" if parent in seen else f"its parent {parent} does not exist"
                )
                break
            seen.add(parent)
            chain.append(parent)
            parent = queues[parent].parent
        tree.ancestors[queue.name] = chain
        if chain and queue.name not in tree.faults:
            tree.children.setdefault(chain[0], []).append(queue.name)
    return tree
