"""The agent's own threads against online pods: `agent_cpu_policy` in the QoS config.

The agent shares the node's CPUs with the pods it protects. Its tick (collect, QoS, report, about
once a second) and its interference loop (20 times a second) each run for a moment; an online task
that wakes on that CPU meanwhile waits for the agent's thread unless the kernel preempts it at the
wake-up, and on an EEVDF kernel (6.6+) it does not while the agent is eligible and inside its slice
(RUN_TO_PARITY): the online wake-up waits for the agent to block or for the next tick.

- `normal` (default): the threads run as they were started (SCHED_OTHER, nice 0).
- `idle`: each agent thread puts itself under SCHED_IDLE. The kernel preempts an idle-policy task
  at every wake-up of a normal one ("idle tasks are by definition preempted by non-idle tasks"),
  so an online wake-up never waits for the agent. The agent's CPU share against other cgroups does
  not change: its cgroup (the DaemonSet pod's) keeps its weight, and inside it the agent is alone;
  beside BE pods at the minimal weight it still gets the CPU first. Where the agent shares a cgroup
  with busy normal tasks (not as a DaemonSet pod) it would get almost nothing: leave it `normal`.

Each thread applies the policy to itself (Linux policies are per thread) when it starts its next
cycle, so a config reload takes effect within a tick; a thread never changed is never touched
(an operator's `chrt` stays)."""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("lahar.agent.qos")

POLICY_KEY = "agent_cpu_policy"
NORMAL, IDLE = "normal", "idle"
POLICIES = (NORMAL, IDLE)
DEFAULT_POLICY = NORMAL

_applied = threading.local()  # the policy name this thread last put itself under


def parse_policy(value: object) -> str:
    """The configured policy; ValueError naming the key."""
    if value not in POLICIES:
        raise ValueError(f"{POLICY_KEY}: must be one of {', '.join(POLICIES)}, got {value!r}")
    return str(value)


def change(applied: str | None, wanted: str) -> int | None:
    """The scheduler policy to set for a thread that last applied `applied` (None: never) and
    should run under `wanted`, or None when nothing is to be written."""
    if wanted == applied or (applied is None and wanted == NORMAL):
        return None
    return os.SCHED_IDLE if wanted == IDLE else os.SCHED_OTHER


def hold(wanted: str) -> bool:
    """Put the calling thread under `wanted` if it is not already; True when it changed. A refusal
    (no rights, a kernel without SCHED_IDLE) is logged once per thread and policy, not raised."""
    applied = getattr(_applied, "name", None)
    policy = change(applied, wanted)
    if policy is None:
        return False
    _applied.name = wanted  # tried once per change, whatever the outcome
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError as exc:
        log.warning("agent thread %s: cannot run under %s: %s", threading.current_thread().name, wanted, exc)
        return False
    log.debug("agent thread %s now runs under %s", threading.current_thread().name, wanted)
    return True
