"""A kubelet for `lahar up`: this machine as a Node whose pods run as local processes in
kubelet-style cgroups (runtime.LocalNode), and simulated Nodes that take pods without running them
and stream synthetic usage reports (simulated.SimulatedNodes). See docs/lahar-up.md."""

# The cgroup the local node's pods run under: here so that `lahar`'s command line names it
# without importing the node (and the agent's cgroup code it builds on).
DEFAULT_PARENT = "lahar-kubepods"
