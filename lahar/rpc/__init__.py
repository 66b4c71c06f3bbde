"""The agent <-> scheduler gRPC contract: generated modules per version (`lahar.rpc.v1`) and the
conversion between the agent's report dataclasses and the wire messages (`lahar.rpc.convert`)."""
