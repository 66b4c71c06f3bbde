"""The labels and annotations the federation reads and writes: on hub Jobs (where each runs, which
placement), on the member copies (the fence back to the hub Job), on what it copies along."""

from __future__ import annotations

PREFIX = "federation.lahar.dev"

# On a hub Job, written by the federation. A label, so `kubectl get vcjob -L federation.lahar.dev/cluster`
# shows where each Job runs and the federation can list a member's Jobs.
CLUSTER_LABEL = f"{PREFIX}/cluster"
# The placement number: 1 at the first dispatch, one more at each re-dispatch. A member copy whose
# number differs from its hub Job's is stale (the fence).
PLACEMENT_ANNOTATION = f"{PREFIX}/placement"
# The placement number whose copy has been created in the member (absent: not created yet).
DISPATCHED_ANNOTATION = f"{PREFIX}/dispatched"
# The generation of a spec change held back from the copy (it would break the queue's quota).
HELD_GENERATION_ANNOTATION = f"{PREFIX}/held-generation"

# On a hub Job, written by its author.
CLUSTER_SELECTOR_ANNOTATION = f"{PREFIX}/cluster-selector"  # a label selector over Cluster labels
ON_MEMBER_LOSS_ANNOTATION = f"{PREFIX}/on-member-loss"  # Redispatch (default) or Wait
REDISPATCH, WAIT = "Redispatch", "Wait"

# On a member copy: which hub Job it is a copy of, and of which placement.
HUB_UID_LABEL = f"{PREFIX}/hub-uid"
HUB_GENERATION_ANNOTATION = f"{PREFIX}/hub-generation"
HUB_RESOURCE_VERSION_ANNOTATION = f"{PREFIX}/hub-resource-version"
# On the namespaces, ConfigMaps, Secrets and Queues copied into a member.
MANAGED_LABEL = f"{PREFIX}/managed"
# On a member copy, written by the member's fence (`lahar federation member`) when it stopped the
# copy because the hub's lease on the member had expired: when, and why.
FENCED_ANNOTATION = f"{PREFIX}/fenced"

# In each member: the Lease (coordination.k8s.io/v1) the federation renews at every heartbeat that
# reaches the member. Past it, the member's fence stops the federated copies, before the hub may
# place them elsewhere (policy.py: redispatchAfter is longer than the lease, with a margin).
LEASE_NAMESPACE = "lahar-federation"
LEASE_NAME = "hub"
# On that Lease: how often the hub renews it (seconds), for a fence that starts (fence.startup_grace).
RENEW_PERIOD_ANNOTATION = f"{PREFIX}/renew-period"

# status.state.reason values the federation writes on hub Jobs.
REASON_WAITING = "WaitingForMember"  # no member has room now
REASON_NEVER_FITS = "NoMemberFits"  # no member could ever run it: a clear, final-looking reason
REASON_QUOTA = "QueueQuota"  # the queue's fleet-wide capability is used up
REASON_DISPATCHED = "Dispatched"
REASON_UNREACHABLE = "MemberUnreachable"
REASON_REDISPATCHED = "Redispatched"
REASON_DELETED_IN_MEMBER = "DeletedInMember"
REASON_GUARANTEE = "GuaranteeReserved"  # the room left is another queue's unmet guarantee
REASON_PREEMPTED = "Preempted"  # evicted from its member for a higher-priority Job of its queue
REASON_RECLAIMED = "Reclaimed"  # evicted from its member for a queue below its guarantee
REASON_FENCED = "StoppedInMember"  # its member's fence stopped the copy (the hub's lease ran out)

# Event reasons on hub Jobs.
EVENT_SPEC_CARRIED = "SpecUpdated"
EVENT_SPEC_HELD = "SpecChangeHeld"
EVENT_FENCED = "Fenced"  # on a member copy: stopped by the member's fence
