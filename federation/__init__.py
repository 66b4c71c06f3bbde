"""`lahar federation`: level one of two-level scheduling across clusters (docs/federation.md).

On a hub API server it watches Volcano Jobs and the member `Cluster`s, chooses one member per Job
(the whole gang fits there, the Job's cluster affinity holds, the fleet-wide queue quota holds;
best by free capacity, queue share and cost), creates the Job there with what it references, and
mirrors the member's status back. Level two is each member's own Lahar scheduler, unchanged.

`names` (labels, annotations), `policy` (the configuration), `placement`, `quota` and `planner`
(pure decisions), `copies` (what is written to a member, pure), `members` (talking to members),
`federation` (the loop that reads, plans and writes)."""
