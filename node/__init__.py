"""A kubelet for `lahar up`: this machine as a Node whose pods run as local processes in
kubelet-style cgroups (runtime.LocalNode), and simulated Nodes that take pods without running them
and stream synthetic usage reports (simulated.SimulatedNodes). See docs/lahar-up.md."""
