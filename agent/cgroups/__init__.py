"""Cgroups: where kubelet (or `lahar up`'s runtime) puts pod and container cgroups, for both cgroup
drivers and both cgroup versions, with every path built from one configurable root."""
