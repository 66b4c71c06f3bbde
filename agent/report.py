"""DEFERRED re-export: the report wire types live in `lahar.rpc.report` (shared by the agent, the
scheduler and the gRPC conversion). Only agent/qos still imports them from here while its owners'
work is in flight; remove this module once it imports `lahar.rpc.report` (CONTRIBUTING.md)."""

from lahar.rpc.report import NodeReport, PodUsage

__all__ = ["NodeReport", "PodUsage"]
