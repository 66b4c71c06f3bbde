"""Volcano's device configuration and dynamic MIG tests as conformance cases (issue 17;
docs/scheduler-conformance.md tallies them): config's `config_test.go` and vgpu's `mig_test.go`,
against `scheduler/framework/device_config.py` and `scheduler/framework/vgpu.py`; then Lahar's own
checks: the configuration read from the scheduler's (inline or a file), refused when bad, and MIG
nodes through whole cycles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lahar.scheduler.conf import ConfError, ConfWatcher, SchedulerConf, parse_conf
from lahar.scheduler.framework import vgpu
from lahar.scheduler.framework.device_config import (
    DEFAULT_VNPUS,
    DeviceConfigError,
    Geometry,
    MigGeometries,
    MigTemplate,
    NvidiaConfig,
    VNPUTemplate,
    parse_device_config,
    parse_device_config_text,
)
from tests.scheduler.preempt_builders import cluster, opened, run, task
from tests.scheduler.vgpu_cases import A100, DEVICE_CONFIG, MIG_REGISTER, assigned, vgpu_conf, vgpu_node, vgpu_pod
from tests.scheduler.volcano_cases import AGREE, DISAGREE

# -- config_test.go: TestParseDeviceConfig (its document: vgpu_cases.DEVICE_CONFIG) ---------------------------


def geometry(group: str, *instances: tuple[str, int, int]) -> Geometry:
    return Geometry(group, tuple(MigTemplate(*instance) for instance in instances))


def test_volcano_parse_device_config() -> None:
    want = NvidiaConfig(
        known_mig_geometries=(
            MigGeometries(
                ("A30",),
                (
                    geometry("group1", ("1g.6gb", 6144, 4)),
                    geometry("group2", ("2g.12gb", 12288, 2)),
                    geometry("group3", ("4g.24gb", 24576, 1)),
                ),
            ),
            MigGeometries(
                ("A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB", "A100-SXM4-40GB"),
                (
                    geometry("group1", ("1g.5gb", 5120, 7)),
                    geometry("group2", ("2g.10gb", 10240, 3), ("1g.5gb", 5120, 1)),
                    geometry("group3", ("3g.20gb", 20480, 2)),
                    geometry("group4", ("7g.40gb", 40960, 1)),
                ),
            ),
            MigGeometries(
                ("A100-SXM4-80GB", "A100-80GB-PCIe", "A100-PCIE-80GB"),
                (
                    geometry("group1", ("1g.10gb", 10240, 7)),
                    geometry("group2", ("2g.20gb", 20480, 3), ("1g.10gb", 10240, 1)),
                    geometry("group3", ("3g.40gb", 40960, 2)),
                    geometry("group4", ("7g.79gb", 80896, 1)),
                ),
            ),
        ),
    )
    parsed = parse_device_config_text(DEVICE_CONFIG)
    assert parsed.nvidia == want and parsed.warnings == ()


# -- config_test.go: TestParseVNPUsNewWrapperFormat, ...LegacyArrayFormat, ...WrapperWithEmptyConfigs --------

VNPU_910A = """
  - chipName: 910A
    commonWord: Ascend910A
    resourceName: huawei.com/Ascend910A
    resourceMemoryName: huawei.com/Ascend910A-memory
    memoryAllocatable: 32768
    memoryCapacity: 32768
    aiCore: 30
    templates:
      - {name: vir02, memory: 2184, aiCore: 2}
"""
VNPU_310P = """
  - chipName: 310P3
    commonWord: Ascend310P
    resourceName: huawei.com/Ascend310P
    resourceMemoryName: huawei.com/Ascend310P-memory
    memoryAllocatable: 21527
    memoryCapacity: 24576
    aiCore: 8
    aiCPU: 7
    templates:
      - {name: vir01, memory: 3072, aiCore: 1, aiCPU: 1}
"""
VNPUS = [
    # name, text, hamiVnpuCore, [(chipName, commonWord, memoryAllocatable)]
    (
        "TestParseVNPUsNewWrapperFormat",
        "vnpus:\n  hamiVnpuCore: false\n  configs:" + VNPU_910A,
        False,
        [("910A", "Ascend910A", 32768)],
    ),
    (
        "TestParseVNPUsLegacyArrayFormat",
        "vnpus:" + VNPU_910A + VNPU_310P,
        False,
        [("910A", "Ascend910A", 32768), ("310P3", "Ascend310P", 21527)],
    ),
    ("TestParseVNPUsWrapperWithEmptyConfigs", "vnpus:\n  hamiVnpuCore: true\n  configs: []\n", True, []),
]


@pytest.mark.parametrize(("name", "text", "hami_core", "chips"), VNPUS, ids=[row[0] for row in VNPUS])
def test_volcano_parse_vnpus(name: str, text: str, hami_core: bool, chips: list[tuple[str, str, int]]) -> None:
    parsed = parse_device_config_text(text)
    assert parsed.hami_vnpu_core is hami_core
    assert [(c.chip_name, c.common_word, c.memory_allocatable) for c in parsed.vnpus] == chips
    if chips:
        assert parsed.vnpus[0].templates == (VNPUTemplate("vir02", 2184, 2, 0),)


# -- Lahar's own: what is left out takes the default; bad input is refused, naming it --------------------------


def test_keys_left_out_take_the_defaults() -> None:
    parsed = parse_device_config({"nvidia": {"gpuMemoryFactor": 2}})
    assert parsed.nvidia == NvidiaConfig(gpu_memory_factor=2) and parsed.vnpus == DEFAULT_VNPUS
    assert parse_device_config(None).nvidia == NvidiaConfig()


def test_unknown_keys_are_reported_not_refused() -> None:
    parsed = parse_device_config({"nvidia": {"migStrategy": "mixed"}, "mlu": {}})
    assert parsed.warnings == (
        "device-config.yaml: unknown key 'mlu' ignored",
        "device-config.yaml: nvidia: unknown key 'migStrategy' ignored",
    )


BAD_CONFIGS = [
    ("not a mapping", "- nvidia", "device-config.yaml: must be a mapping"),
    ("not YAML", "nvidia: [", "not valid YAML"),
    ("a name not text", {"nvidia": {"resourceCountName": 3}}, "nvidia.resourceCountName: must be a string"),
    ("an empty name", {"nvidia": {"resourceMemoryName": ""}}, "nvidia.resourceMemoryName: must not be empty"),
    ("a negative default", {"nvidia": {"defaultCores": -1}}, "nvidia.defaultCores: must be at least 0"),
    ("a factor of 0", {"nvidia": {"gpuMemoryFactor": 0}}, "nvidia.gpuMemoryFactor: must be at least 1"),
    ("a scaling of 0", {"nvidia": {"deviceMemoryScaling": 0}}, "nvidia.deviceMemoryScaling: must be a number above 0"),
    ("a flag as text", {"nvidia": {"overwriteEnv": "yes"}}, "nvidia.overwriteEnv: must be true or false"),
    (
        "a model list empty",
        {"nvidia": {"knownMigGeometries": [{"models": [], "allowedGeometries": []}]}},
        "knownMigGeometries[0].models: must name at least one GPU model",
    ),
    (
        "an instance without memory",
        {
            "nvidia": {
                "knownMigGeometries": [
                    {
                        "models": ["A30"],
                        "allowedGeometries": [{"group": "g", "geometries": [{"name": "1g", "count": 4}]}],
                    }
                ]
            }
        },
        "allowedGeometries[0].geometries[0]: a MIG instance needs 'memory'",
    ),
    (
        "a count of 0",
        {
            "nvidia": {
                "knownMigGeometries": [
                    {
                        "models": ["A30"],
                        "allowedGeometries": [
                            {"group": "g", "geometries": [{"name": "1g", "memory": 6144, "count": 0}]}
                        ],
                    }
                ]
            }
        },
        "geometries[0].count: must be at least 1",
    ),
    (
        "a group named twice",
        {
            "nvidia": {
                "knownMigGeometries": [{"models": ["A30"], "allowedGeometries": [{"group": "g"}, {"group": "g"}]}]
            }
        },
        "allowedGeometries: group 'g' is named twice",
    ),
    ("vnpus not a list or mapping", {"vnpus": "310P"}, "vnpus: must be a mapping"),
    ("a vNPU template without memory", {"vnpus": [{"templates": [{"name": "vir01"}]}]}, "needs 'name' and 'memory'"),
]


@pytest.mark.parametrize(("name", "given", "message"), BAD_CONFIGS, ids=[row[0] for row in BAD_CONFIGS])
def test_bad_device_configs_are_refused_naming_the_key(name: str, given: Any, message: str) -> None:
    with pytest.raises(DeviceConfigError) as refused:
        parse_device_config_text(given) if isinstance(given, str) else parse_device_config(given)
    assert message in str(refused.value)


# -- mig_test.go: TestFindMatch --------------------------------------------------------------------------------

ONE_10G = (geometry("default", ("1g.10gb", 10240, 2)),)
TINY = (geometry("default", ("1g.10gb", 10, 1)),)
FIND_MATCH = [
    # name, card, request, geometry in use, positions taken, geometries, want (device, memory) or None, verdict
    ("Match 1g.10gb and available", "gpu-1234", 10, 0, set(), ONE_10G, ("gpu-1234[default-0]", 10240), AGREE),
    ("No match due to memory too high", "gpu-1234", 20000, 0, set(), TINY, None, AGREE),
    ("Empty geometry list", "gpu-1234", 10, 0, set(), (Geometry("", ()),), None, AGREE),
    # Volcano's usage names a 1g.10gb (none taken) the geometry lacks; in a geometry in use it offers
    # only kinds already taken, so the free 2g.20gb is refused. Lahar offers every free instance.
    (
        "No matching MIG template in geometry",
        "gpu-0002",
        20,
        0,
        set(),
        (geometry("default", ("2g.20gb", 20, 1)),),
        ("gpu-0002[default-0]", 20),
        DISAGREE,
    ),
    ("MIG instance already in use", "gpu-1234", 10, 0, {0}, TINY, None, AGREE),
    (
        "Multiple templates, pick first matching and available",
        "gpu-1234",
        20,
        -1,
        set(),
        (geometry("group1", ("1g.10gb", 10, 1)), geometry("group2", ("2g.20gb", 24, 1))),
        ("gpu-1234[group2-0]", 24),
        AGREE,
    ),
    (
        "Request memory smaller than template, still match",
        "gpu-0005",
        5,
        0,
        set(),
        TINY,
        ("gpu-0005[default-0]", 10),
        AGREE,
    ),
]


@pytest.mark.parametrize(
    ("name", "uuid", "request_memory", "in_use", "taken", "geometries", "want", "verdict"),
    FIND_MATCH,
    ids=[row[0] for row in FIND_MATCH],
)
def test_volcano_find_match(
    name: str,
    uuid: str,
    request_memory: int,
    in_use: int,
    taken: set[int],
    geometries: tuple[Geometry, ...],
    want: tuple[str, int] | None,
    verdict: str,
) -> None:
    found = vgpu.find_mig_instance(request_memory, geometries, in_use, taken)
    got = None
    if found is not None:
        index, position, memory = found
        got = (vgpu.encode_mig_id(uuid, geometries[index].group, position), memory)
    assert got == want


# -- mig_test.go: TestAddAndSubMigUsed (through a pod's MIG device added to and taken off its card) ------------

ADD_SUB = [
    # name, geometry, group named, position, memory counted (add and sub)
    ("Add then Sub with valid position", geometry("group-a", ("1g.10gb", 10240, 2)), "group-a", 1, 10240),
    ("Add twice same instance, then sub once", geometry("group-b", ("2g.20gb", 20480, 3)), "group-b", 1, 20480),
    ("Sub from unused slot returns 0", geometry("group-c", ("3g.30gb", 30720, 1)), "group-c", 0, 30720),
    ("Invalid group name should return 0", geometry("group-d", ("1g.10gb", 10240, 1)), "nonexistent-group", 0, 0),
]


def mig_card(*geometries: Geometry, uuid: str = "gpu-1234") -> vgpu.Card:
    return vgpu.Card(0, uuid, 10, 81920, "NVIDIA-A100", geometries=geometries)


def add_mig_pod(card: vgpu.Card, uid: str, device: str, memory: int = 10, cores: int = 0, factor: int = 1) -> None:
    """AddPod: the pod's MIG device (as its assignment annotation names it) counted on the card."""
    devices = [[vgpu.ContainerDevice(device, "NVIDIA", memory, cores)]]
    vgpu.add_assigned([card], uid, "", devices, vgpu.MIG, memory_factor=factor)


@pytest.mark.parametrize(("name", "shape", "group", "position", "memory"), ADD_SUB, ids=[row[0] for row in ADD_SUB])
def test_volcano_add_and_sub_mig_used(name: str, shape: Geometry, group: str, position: int, memory: int) -> None:
    card = mig_card(shape)
    add_mig_pod(card, "pod", vgpu.encode_mig_id(card.uuid, group, position))
    assert card.pods["pod"].memory == memory and card.used_memory == memory
    assert card.mig_taken == ({position} if memory else set())
    card.remove("pod")
    assert card.used_memory == 0 and card.mig_taken == set() and card.mig_geometry == -1


# -- mig_test.go: TestMIGFactory_{TryAddPod,AddPod,SubPod}_WithMemoryFactor ----------------------------------------

FACTOR_GEOMETRY = geometry("group1", ("1g.10gb", 10240, 2), ("2g.20gb", 20480, 1))
TRY_ADD = [
    # name, factor, request, instance memory (raw), memory the card counts
    ("MemoryFactor=1, request 10MB matches 1g.10gb", 1, 10, 10240, 10240),
    ("MemoryFactor=2, request 6GB matches 1g.10gb", 2, 6144, 20480, 10240),
]


@pytest.mark.parametrize(
    ("name", "factor", "request_memory", "instance", "counted"), TRY_ADD, ids=[r[0] for r in TRY_ADD]
)
def test_volcano_mig_try_add_pod_with_memory_factor(
    name: str, factor: int, request_memory: int, instance: int, counted: int
) -> None:
    card = mig_card(FACTOR_GEOMETRY)
    device = vgpu.try_add_pod(card, request_memory, 50, vgpu.MIG, factor)
    assert device is not None
    group, position = vgpu.decode_mig_id(device) or ("", -1)
    found = vgpu.instance_at(FACTOR_GEOMETRY, position)
    assert group == "group1" and found is not None and found.memory == instance
    assert (card.used_pods, card.used_memory, card.used_cores) == (1, counted, 50)


ADD_POD = [
    # name, factor, request, memory the card and the pod count
    ("AddPod with MemoryFactor=1, request 10MB matches 1g.10gb", 1, 10, 10240),
    ("AddPod with MemoryFactor=2, request 6GB matches 1g.10gb", 2, 6144, 5120),
]


@pytest.mark.parametrize(("name", "factor", "request_memory", "counted"), ADD_POD, ids=[r[0] for r in ADD_POD])
def test_volcano_mig_add_pod_with_memory_factor(name: str, factor: int, request_memory: int, counted: int) -> None:
    card = mig_card(FACTOR_GEOMETRY)
    add_mig_pod(card, "pod-1", "gpu-1234[group1-0]", request_memory, 50, factor)
    assert (card.used_pods, card.used_memory, card.used_cores) == (1, counted, 50)
    assert (card.pods["pod-1"].memory, card.pods["pod-1"].cores) == (counted, 50) and card.mig_taken == {0}


SUB_POD = [
    ("SubPod with MemoryFactor=1, request 10MB from 1g.10gb", 1, 10),
    ("SubPod with MemoryFactor=2, request 6GB from 1g.10gb", 2, 6144),
]


@pytest.mark.parametrize(("name", "factor", "request_memory"), SUB_POD, ids=[r[0] for r in SUB_POD])
def test_volcano_mig_sub_pod_with_memory_factor(name: str, factor: int, request_memory: int) -> None:
    card = mig_card(FACTOR_GEOMETRY)
    add_mig_pod(card, "pod-2", "gpu-1234[group1-0]", request_memory, 50, factor)
    card.remove("pod-2")
    assert (card.used_pods, card.used_memory, card.used_cores) == (0, 0, 0) and "pod-2" not in card.pods


# -- Lahar's own: MIG nodes through whole cycles, the configuration from the scheduler's ------------------------


def mig_conf(device_config: Any = DEVICE_CONFIG, **more: Any) -> SchedulerConf:
    return vgpu_conf(**({"deviceshare.DeviceConfig": device_config} if device_config is not None else {}), **more)


def test_a_mig_pod_gets_the_smallest_instance_of_the_first_geometry_that_holds_it() -> None:
    session = run(cluster(vgpu_node("n1", MIG_REGISTER), vgpu_pod("p", memory=3000)), mig_conf())
    assert assigned(session, "uid-p") == "GPU-a[group1-0],NVIDIA,3000,25:"


def test_a_card_keeps_its_geometry_while_an_instance_is_taken() -> None:
    # GPU-a runs a 1g.5gb of group1: binpack puts a small pod on its next slot; a 20000 MiB pod
    # fits no instance of group1, so it goes to GPU-b, whose first geometry holding it is group3.
    on_a = vgpu_pod("old", memory=3000, on="n1", **{vgpu.ASSIGNED_IDS: "GPU-a[group1-0],NVIDIA,3000,25:"})
    small = run(cluster(vgpu_node("n1", MIG_REGISTER), on_a, vgpu_pod("small", memory=4000)), mig_conf())
    assert assigned(small, "uid-small") == "GPU-a[group1-1],NVIDIA,4000,25:"
    big = run(cluster(vgpu_node("n1", MIG_REGISTER), on_a, vgpu_pod("big", memory=20000)), mig_conf())
    assert assigned(big, "uid-big") == "GPU-b[group3-0],NVIDIA,20000,25:"


def test_a_mig_request_no_instance_holds_waits_and_says_why() -> None:
    node = vgpu_node("n1", MIG_REGISTER)
    node["status"]["allocatable"][vgpu.MEMORY] = node["status"]["capacity"][vgpu.MEMORY] = "81920"
    running_on = [
        vgpu_pod(f"old-{card}", memory=3000, on="n1", **{vgpu.ASSIGNED_IDS: f"GPU-{card}[group1-0],NVIDIA,3000,25:"})
        for card in "ab"
    ]
    session = opened(cluster(node, *running_on, vgpu_pod("p", memory=25000)), mig_conf())
    assert session.explain(task(session, "p")) == {"vGPU: not enough gpu fitted on this node": 1}


def test_a_mig_node_of_a_model_the_configuration_lacks_falls_back_to_hami_core() -> None:
    unknown = MIG_REGISTER.replace(A100, "H100-80GB")
    session = run(cluster(vgpu_node("n1", unknown), vgpu_pod("p", memory=3000, **{vgpu.MODE: "mig"})), mig_conf())
    assert session.explain(task(session, "p")) == {
        "vGPU: pod required sharing mode mig is not the same as the node mode hami-core": 1
    }
    shared = run(cluster(vgpu_node("n1", unknown), vgpu_pod("p", memory=3000)), mig_conf(None))
    assert assigned(shared, "uid-p") == "GPU-a,NVIDIA,3000,25:"


def test_the_resource_names_are_the_configuration_s() -> None:
    names = {"nvidia": {"resourceCountName": "example.com/vgpu", "resourceMemoryName": "example.com/vgpu-mem"}}
    node = vgpu_node("n1")
    node["status"]["allocatable"] |= {"example.com/vgpu": "20", "example.com/vgpu-mem": "32768"}
    node["status"]["capacity"] = dict(node["status"]["allocatable"])
    pod = vgpu_pod("p")
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    limits["example.com/vgpu"], limits["example.com/vgpu-mem"] = limits.pop(vgpu.NUMBER), limits.pop(vgpu.MEMORY)
    pod["spec"]["containers"][0]["resources"]["requests"] = dict(limits)
    session = run(cluster(node, pod), mig_conf(names))
    assert assigned(session, "uid-p") == "GPU-a,NVIDIA,4096,25:"


def scheduler_conf(arguments: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {"actions": "allocate", "tiers": [{"plugins": [{"name": "deviceshare", "arguments": arguments}]}]}
    )


def test_the_configuration_is_read_from_a_file_and_reloaded_when_it_changes(tmp_path: Path) -> None:
    device_file, conf_file = tmp_path / "device-config.yaml", tmp_path / "volcano-scheduler.conf"
    device_file.write_text("nvidia:\n  gpuMemoryFactor: 2\n  migStrategy: mixed\n")
    conf_file.write_text(
        scheduler_conf({"deviceshare.VGPUEnable": True, "deviceshare.DeviceConfigFile": str(device_file)})
    )
    watcher = ConfWatcher(conf_file)
    assert watcher.conf.files == (str(device_file),)
    assert any("unknown key 'migStrategy'" in warning for warning in watcher.conf.warnings)
    device_file.write_text("nvidia:\n  gpuMemoryFactor: 4\n")
    arguments = watcher.current().tiers[0][0].arguments
    assert watcher.reloads == 1 and "gpuMemoryFactor: 4" in arguments["deviceshare.DeviceConfig"]
    device_file.write_text("nvidia:\n  gpuMemoryFactor: -4\n")
    assert watcher.current().tiers[0][0].arguments == arguments  # the bad file is refused, the last good kept
    assert watcher.error is not None and "gpuMemoryFactor: must be at least 1" in watcher.error


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"deviceshare.DeviceConfigFile": "/nonexistent/device-config.yaml"}, "cannot read"),
        ({"deviceshare.DeviceConfigFile": "/dev/null", "deviceshare.DeviceConfig": {}}, "not both"),
        (
            {"deviceshare.DeviceConfig": {"nvidia": {"resourceCoreName": 7}}},
            "nvidia.resourceCoreName: must be a string",
        ),
        ({"deviceshare.GPUExclusiveRules": "app=training"}, "must be a list of label mappings"),
    ],
    ids=["missing file", "both", "bad inline config", "bad exclusivity rules"],
)
def test_bad_device_arguments_refuse_the_configuration(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfError, match="deviceshare") as refused:
        parse_conf(scheduler_conf({"deviceshare.VGPUEnable": True, **arguments}))
    assert message in str(refused.value)
