"""The QoS strategies, one per file, in the order the engine runs them. Each is a pure function
from (node state, pods with QoS class and usage, its config section, its previous plan) to the
cgroup values it wants; the executor writes them."""

from lahar.agent.qos.model import Strategy
from lahar.agent.qos.strategies import cpu_priority, cpu_suppress, io, lc_cores, ls_burst, memory

# cpu_priority before cpu_suppress: with both, a BE group is idle before it is capped.
STRATEGIES: tuple[Strategy, ...] = (
    cpu_priority.STRATEGY,
    cpu_suppress.STRATEGY,
    lc_cores.STRATEGY,
    ls_burst.STRATEGY,
    memory.STRATEGY,
    io.STRATEGY,
)
BY_NAME = {strategy.name: strategy for strategy in STRATEGIES}
