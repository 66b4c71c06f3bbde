"""The QoS config: defaults, per-node-selector overrides, errors that name the key, reload on
change with the last good config kept, node labels from the API, and `lahar agent`'s flags."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from lahar.agent.qos.config import NodeLabels, QosConfig, QosConfigFile, load_config
from lahar.cli.agent_command import settings_of
from lahar.cli.main import build_parser, main
from lahar.client.errors import ApiUnavailable
from tests.support import wait_for

CONFIG = """
reassert_seconds: 5
cpu_suppress: {wait_threshold: 0.6, floor_ratio: 0.1}
memory: {headroom_bytes: 64Mi}
io:
  devices: [{device: vda, write_bps: 20Mi}]
eviction: {memory_threshold: 0.9}
reclaimable: {cpu_margin_ratio: 0.1}
node_configs:
  - name: big
    node_selector: {matchLabels: {size: big}}
    cpu_suppress: {wait_threshold: 0.5}
    eviction: {cpu_eviction: false}
  - name: gpu
    node_selector: {matchExpressions: [{key: gpu, operator: Exists}]}
    cpu_suppress: {wait_threshold: 0.4}
    cpu_priority: {enabled: false}
    agent_cpu_policy: idle
"""


def test_defaults() -> None:
    config = QosConfig()
    # the loop measures, its BE CPU cap is off by default (it never beat the weights, docs/qos.md)
    suppress = config.section("cpu_suppress")
    assert suppress.wait_threshold == 0.5 and suppress.enabled and not suppress.interference_cap
    assert config.section("cpu_priority").enabled
    assert config.reassert_seconds == 10 and config.eviction.memory_threshold == 0.85
    assert config.agent_cpu_policy == "normal"  # SCHED_IDLE for the agent's threads is measured, not the default
    assert QosConfig.from_mapping(None) == QosConfig.from_mapping({}) == QosConfig()


def test_overrides_apply_by_node_labels_in_order(tmp_path: Path) -> None:
    path = tmp_path / "qos.yaml"
    path.write_text(CONFIG)
    config = load_config(path)
    plain = config.for_node({"size": "small"})
    assert (plain.section("cpu_suppress").wait_threshold, plain.section("cpu_suppress").floor_ratio) == (0.6, 0.1)
    assert plain.section("memory").headroom_bytes == 64 << 20 and plain.reassert_seconds == 5
    assert plain.section("io").devices[0].write_bps == 20 << 20
    assert (plain.eviction.memory_threshold, plain.reclaimable.cpu_margin_ratio) == (0.9, 0.1)
    big = config.for_node({"size": "big"})
    assert big.section("cpu_suppress").wait_threshold == 0.5 and big.section("cpu_suppress").floor_ratio == 0.1
    assert big.eviction.memory_threshold == 0.9 and not big.eviction.cpu_eviction  # merged per key
    both = config.for_node({"size": "big", "gpu": "a100"})
    assert both.section("cpu_suppress").wait_threshold == 0.4 and not both.section("cpu_priority").enabled
    assert not both.eviction.cpu_eviction
    assert (plain.agent_cpu_policy, big.agent_cpu_policy, both.agent_cpu_policy) == ("normal", "normal", "idle")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"cpu_suppress": {"wait_threshold": 1.5}}, "cpu_suppress.wait_threshold: must be in (0, 1], got 1.5"),
        ({"cpu_suppress": {"treshold": 0.5}}, "cpu_suppress: unknown key(s) treshold"),
        ({"memory": {"headroom_bytes": "lots"}}, "memory.headroom_bytes: invalid quantity"),
        ({"io": {"devices": [{"device": "vda", "write_bps": -1}]}}, "io.devices[0].write_bps: must be >= 0"),
        ({"io": {"devices": [{"write_bps": 1}]}}, "io.devices[0].device: a block device name"),
        ({"ls_burst": {"enabled": "yes"}}, "ls_burst.enabled: expected bool"),
        ({"lc_cores": {"cpu_manager_state_file": 7}}, "lc_cores.cpu_manager_state_file: expected a string"),
        ({"eviction": {"memory_threshold": 2}}, "eviction.memory_threshold: must be in (0, 1]"),
        ({"reclaimable": {"window_seconds": -1}}, "reclaimable.window_seconds: must be in [0, 86400]"),
        ({"memory": 3}, "memory: expected a mapping"),
        ({"cpu_supress": {}}, "unknown key(s) cpu_supress"),
        ({"reassert_seconds": 0}, "reassert_seconds: expected a positive number"),
        ({"agent_cpu_policy": "fifo"}, "agent_cpu_policy: must be one of normal, idle, got 'fifo'"),
        ({"node_configs": [{"node_selector": {}, "agent_cpu_policy": 1}]}, "node_configs[0] (0): agent_cpu_policy"),
        (
            {
                "node_configs": [
                    {"name": "x", "node_selector": {}, "memory": {"threshold": 0.01, "release_ratio": 0.05}}
                ]
            },
            "node_configs[0] (x): memory.release_ratio: must be below threshold",
        ),
        ({"node_configs": [{"name": "x", "memory": {}}]}, "node_configs[0] (x): node_selector is required"),
        ({"node_configs": [{"node_selector": {"matchLabels": {"a": 1}}}]}, "node_configs[0] (0): node_selector:"),
        ({"node_configs": [{"node_selector": {}, "colour": "red"}]}, "node_configs[0] (0): unknown key(s) colour"),
    ],
)
def test_a_bad_config_is_refused_naming_the_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        QosConfig.from_mapping(data)
    assert message in str(raised.value)


def test_reload_on_change_keeps_the_last_good_config(tmp_path: Path) -> None:
    path = tmp_path / "qos.yaml"
    path.write_text("cpu_suppress: {wait_threshold: 0.6}\n")
    source = QosConfigFile(path)
    assert not source.poll() and source.config.section("cpu_suppress").wait_threshold == 0.6

    def rewrite(text: str) -> None:
        path.write_text(text)
        stamp = time.time_ns() + 1_000_000_000
        os.utime(path, ns=(stamp, stamp))  # a new mtime even within the filesystem's granularity

    rewrite("cpu_suppress: {wait_threshold: 0.5}\n")
    assert source.poll() and source.config.section("cpu_suppress").wait_threshold == 0.5
    rewrite("cpu_suppress: {wait_threshold: 5}\n")
    assert not source.poll()
    assert source.config.section("cpu_suppress").wait_threshold == 0.5
    assert source.error is not None and "cpu_suppress.wait_threshold" in source.error and str(path) in source.error
    rewrite("cpu_suppress: [unclosed\n")
    assert not source.poll() and "not YAML" in (source.error or "")
    rewrite("cpu_suppress: {wait_threshold: 0.4}\n")
    assert source.poll() and source.error is None and source.config.section("cpu_suppress").wait_threshold == 0.4
    assert dict(source.reloads) == {"ok": 2, "refused": 2}


def test_reload_follows_a_configmap_symlink_swap(tmp_path: Path) -> None:
    """kubelet updates a mounted ConfigMap by pointing `..data` at a new directory."""
    for version, threshold in (("v1", 0.6), ("v2", 0.3)):
        (tmp_path / version).mkdir()
        (tmp_path / version / "qos.yaml").write_text(f"cpu_suppress: {{wait_threshold: {threshold}}}\n")
    (tmp_path / "..data").symlink_to("v1")
    (tmp_path / "qos.yaml").symlink_to("..data/qos.yaml")
    source = QosConfigFile(tmp_path / "qos.yaml")
    (tmp_path / "..data_new").symlink_to("v2")
    os.replace(tmp_path / "..data_new", tmp_path / "..data")
    assert source.poll() and source.config.section("cpu_suppress").wait_threshold == 0.3


def test_a_bad_file_at_start_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "qos.yaml"
    path.write_text("memory: {threshold: 2}\n")
    with pytest.raises(ValueError, match=r"memory\.threshold"):
        QosConfigFile(path)
    with pytest.raises(ValueError, match="No such file"):
        load_config(tmp_path / "missing.yaml")


class FakeApi:
    def __init__(self) -> None:
        self.labels: dict[str, str] | None = {"size": "big"}
        self.calls = 0

    def get(self, kind: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.calls += 1
        if self.labels is None:
            raise ApiUnavailable("connection refused")
        return {"metadata": {"name": name, "labels": dict(self.labels)}}


def test_node_labels_are_fetched_in_the_background_and_kept_when_the_api_is_away() -> None:
    api = FakeApi()
    labels = NodeLabels(api, "n1", refresh_seconds=0.02)  # type: ignore[arg-type]
    try:
        labels()  # starts the refresher; never waits for the API
        assert wait_for(lambda: labels() == {"size": "big"}, 5, "the labels")
        api.labels = None
        calls = api.calls
        wait_for(lambda: api.calls > calls + 1, 5, "refreshes while the API is away")
        assert labels() == {"size": "big"}
        api.labels = {"size": "small"}
        assert wait_for(lambda: labels() == {"size": "small"}, 5, "the new labels")
    finally:
        labels.close()


def test_agent_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    on = settings_of(parser.parse_args(["agent", "--node", "n"]))
    assert on.qos == QosConfig() and on.qos_config_path is None and not on.dry_run
    assert settings_of(parser.parse_args(["agent", "--node", "n", "--no-qos"])).qos is None
    assert settings_of(parser.parse_args(["agent", "--node", "n", "--once"])).qos is None  # --once only looks
    path = tmp_path / "qos.yaml"
    path.write_text("cpu_suppress: {wait_threshold: 0.5}\n")
    from_file = settings_of(parser.parse_args(["agent", "--node", "n", "--qos-config", str(path), "--dry-run"]))
    assert from_file.qos_config_path == path and from_file.dry_run
    assert from_file.qos.section("cpu_suppress").wait_threshold == 0.5
    path.write_text("cpu_suppress: {wait_threshold: 0.5, grow_step_ratio: 0}\n")
    assert main(["agent", "--node", "n", "--standalone", "--qos-config", str(path)]) == 1
    assert "cpu_suppress.grow_step_ratio: must be in (0, 1], got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["agent", "--no-qos", "--qos-config", str(path)])


QOS_SECTIONS = {"cpu_priority", "cpu_suppress", "lc_cores", "ls_burst", "memory", "io", "eviction", "reclaimable"}


def test_every_qos_config_the_docs_and_the_configmap_show_is_one_the_agent_accepts() -> None:
    import re

    import yaml

    root = Path(__file__).resolve().parents[2]
    shown: list[tuple[str, Any]] = []
    for doc in ("docs/qos.md", "docs/qos-tuning.md", "docs/agent.md", "docs/lahar-up.md"):
        for block in re.findall(r"```yaml\n(.*?)```", (root / doc).read_text(), re.S):
            data = yaml.safe_load(block)
            if isinstance(data, dict) and QOS_SECTIONS & set(data):
                shown.append((doc, data))
    for manifest in yaml.safe_load_all((root / "deploy/daemonset/configmap.yaml").read_text()):
        shown.append(("deploy/daemonset/configmap.yaml", yaml.safe_load(manifest["data"]["qos.yaml"]) or {}))
    assert len(shown) >= 3  # the examples were found
    for where, data in shown:
        try:
            QosConfig.from_mapping(data)
        except ValueError as exc:
            pytest.fail(f"{where}: a QoS config the agent refuses: {exc}")
