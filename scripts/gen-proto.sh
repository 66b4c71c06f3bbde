#!/usr/bin/env bash
# Generate the Python modules of the gRPC contract under lahar/rpc/v1/ from proto/.
#
#     scripts/gen-proto.sh [OUT_DIR]     # default: the repository root
#
# The output is committed; tests/rpc/test_proto_generated.py regenerates it into a temporary
# directory and fails on any difference. The generated code embeds version gates (protobuf
# runtime >= the gencode's, grpcio >= GRPC_GENERATED_VERSION), so regenerate only with these
# exact versions (the dev extra installs them):
#     grpcio-tools 1.85.1 (libprotoc 35.1, protobuf gencode 7.35.1), mypy-protobuf 5.1.0
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
OUT=${1:-.}
PINNED="grpcio-tools 1.85.1, mypy-protobuf 5.1.0"

found=$("$PYTHON" - <<'PY'
from importlib.metadata import version
print(f"grpcio-tools {version('grpcio-tools')}, mypy-protobuf {version('mypy-protobuf')}")
PY
)
if [ "$found" != "$PINNED" ]; then
    echo "gen-proto: need $PINNED, found $found (pip install 'grpcio-tools==1.85.1' 'mypy-protobuf==5.1.0')" >&2
    exit 1
fi

# protoc finds plugins on PATH: put the interpreter's bin (protoc-gen-mypy) first.
bin=$("$PYTHON" -c 'import os, sys; print(os.path.dirname(sys.executable))')
mkdir -p "$OUT"
PATH="$bin:$PATH" "$PYTHON" -m grpc_tools.protoc -Iproto \
    --python_out="$OUT" --grpc_python_out="$OUT" --mypy_out="$OUT" \
    proto/lahar/rpc/v1/agent.proto
