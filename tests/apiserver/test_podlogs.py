"""`pods/log` (apiserver/podlogs.py): the container logs lahar up's runtime writes, served as
kube-apiserver serves them (container, tailLines, limitBytes, follow) and its refusals. The server
runs in process with a finder over a temporary log directory, as lahar up hands it one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from lahar.apiserver.app import ApiServer
from lahar.apiserver.podlogs import tail
from lahar.apiserver.store import Store


@dataclass(frozen=True)
class Logs:
    directory: Path
    live: bool = False

    def running(self, container: str) -> bool:
        return self.live


def pod(name: str, *containers: str, node: str = "vm") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers], "nodeName": node},
    }


def run(tmp_path: Path, requests: list[tuple[str, dict[str, Any]]]) -> list[tuple[int, str]]:
    """Create the pods, then GET each log URL; (status, body) of each."""
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "main.log").write_bytes(b"one\ntwo\nthree\n")
    finder = lambda namespace, name: Logs(tmp_path / name) if (tmp_path / name).is_dir() else None  # noqa: E731

    async def go() -> list[tuple[int, str]]:
        server = ApiServer(Store(tmp_path / "db.sqlite"), pod_logs=finder)
        async with TestClient(TestServer(server.make_app())) as client:
            for body in (pod("web", "main"), pod("pair", "a", "b"), pod("waiting", "main", node="")):
                created = await client.post("/api/v1/namespaces/default/pods", json=body)
                assert created.status == 201, await created.text()
            answers = []
            for name, query in requests:
                response = await client.get(f"/api/v1/namespaces/default/pods/{name}/log", params=query)
                answers.append((response.status, await response.text()))
            return answers

    return asyncio.run(go())


def test_logs_with_tail_limit_and_container(tmp_path: Path) -> None:
    answers = run(
        tmp_path,
        [
            ("web", {}),
            ("web", {"tailLines": "2"}),
            ("web", {"limitBytes": "5"}),
            ("web", {"container": "main", "follow": "true"}),  # not running: what there is, then the end
            ("waiting", {}),  # not on a node yet: nothing
        ],
    )
    assert answers == [
        (200, "one\ntwo\nthree\n"),
        (200, "two\nthree\n"),
        (200, "one\nt"),
        (200, "one\ntwo\nthree\n"),
        (200, ""),
    ]


def test_refusals_say_why(tmp_path: Path) -> None:
    answers = run(
        tmp_path,
        [
            ("web", {"container": "nope"}),
            ("pair", {}),
            ("web", {"previous": "true"}),
            ("web", {"tailLines": "-1"}),
            ("pair", {"container": "a"}),  # on a node, no log here (a simulated node runs nothing)
            ("ghost", {}),
        ],
    )
    codes = [code for code, _ in answers]
    assert codes == [400, 400, 400, 400, 400, 404]
    assert "container nope is not valid for pod web" in answers[0][1]
    assert "choose one of: [a b]" in answers[1][1]
    assert 'previous terminated container \\"main\\" in pod \\"web\\" not found' in answers[2][1]
    assert "has no log on this machine" in answers[4][1]


def test_tail_counts_a_last_line_without_newline() -> None:
    assert tail(b"a\nb\nc", 2) == b"b\nc" and tail(b"a\n", 0) == b"" and tail(b"a\n", None) == b"a\n"
