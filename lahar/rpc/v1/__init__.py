"""Generated from proto/lahar/rpc/v1/agent.proto by scripts/gen-proto.sh; do not edit the
agent_pb2* modules by hand."""
