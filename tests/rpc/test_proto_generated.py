"""The generated modules under lahar/rpc/v1/ are what scripts/gen-proto.sh makes from proto/ today:
regenerate into a temporary directory and compare byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("agent_pb2.py", "agent_pb2_grpc.py", "agent_pb2.pyi")


def test_committed_code_matches_the_proto(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the dev extra) generates the code")
    pytest.importorskip("mypy_protobuf", reason="mypy-protobuf (the dev extra) generates the stubs")
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen-proto.sh"), str(tmp_path)],
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    stale = [
        name
        for name in GENERATED
        if (tmp_path / "lahar/rpc/v1" / name).read_bytes() != (ROOT / "lahar/rpc/v1" / name).read_bytes()
    ]
    assert not stale, f"run scripts/gen-proto.sh and commit: {stale} differ from proto/lahar/rpc/v1/agent.proto"


def test_generated_modules_import_as_a_package() -> None:
    for package in ("lahar/rpc/__init__.py", "lahar/rpc/v1/__init__.py"):
        assert (ROOT / package).is_file(), package
    from lahar.rpc.v1 import agent_pb2, agent_pb2_grpc

    assert agent_pb2.DESCRIPTOR.package == "lahar.rpc.v1"
    service = agent_pb2.DESCRIPTOR.services_by_name["NodeReports"]
    report = service.methods_by_name["Report"]
    assert (report.input_type.name, report.output_type.name) == ("NodeReport", "ReportAck")
    assert report.client_streaming and report.server_streaming
    assert hasattr(agent_pb2_grpc, "NodeReportsStub")
