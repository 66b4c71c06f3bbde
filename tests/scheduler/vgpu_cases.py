"""Builders for the vGPU conformance tests (Volcano's vgpu `makeGPUDevices`, `makeVGPUPod`, its
simulated allocation), shared by `test_volcano_conformance_vgpu.py` and
`test_volcano_conformance_vgpu_mig.py`."""

from __future__ import annotations

from typing import Any

from lahar.scheduler.conf import SchedulerConf
from lahar.scheduler.framework import vgpu
from lahar.scheduler.framework.session import Session
from tests.scheduler.preempt_builders import a_pod, annotate, conf, node, running

Obj = dict[str, Any]


def make_cards(count: int, memory: int, sharing: int) -> list[vgpu.Card]:
    """makeGPUDevices: `count` NVIDIA cards GPU-0000A, GPU-0000B, ..."""
    return [vgpu.Card(i, "GPU-0000" + chr(ord("A") + i), sharing, memory, "NVIDIA") for i in range(count)]


def vgpu_spec(memory: int | None = 4096, cards: int | None = 1, cores: int | None = 25, **more: str) -> Obj:
    limits = {
        **({vgpu.NUMBER: str(cards)} if cards is not None else {}),
        **({vgpu.MEMORY: str(memory)} if memory is not None else {}),
        **({vgpu.CORES: str(cores)} if cores is not None else {}),
        **more,
    }
    return {"containers": [{"name": "gpu-worker", "resources": {"limits": limits}}]}


def vgpu_annotations(spread: bool = False, group: str = "") -> dict[str, str]:
    """makeVGPUPod's annotations."""
    annotations = {vgpu.GROUP_POLICY: vgpu.SPREAD_GROUP} if spread else {}
    if group:
        annotations[vgpu.KUBE_GROUP] = group
    return annotations


def try_fit(on: list[vgpu.Card], policy: str = "", annotations: dict[str, str] | None = None, **spec: Any) -> vgpu.Fit:
    annotations = annotations or {}
    requests = vgpu.container_requests(vgpu_spec(**spec))
    return vgpu.fit(on, vgpu.HAMI_CORE, requests, annotations, vgpu.pod_group_key("default", annotations), policy)


def allocate(cards: list[vgpu.Card], uid: str, annotations: dict[str, str], policy: str = vgpu.BINPACK) -> str | None:
    """simulateAllocate: fit, then count the pod on the cards it got; the first card's UUID."""
    verdict = try_fit(cards, policy, annotations)
    if not verdict.fits:
        return None
    vgpu.add_assigned(cards, uid, vgpu.pod_group_key("default", annotations), verdict.devices)
    return verdict.devices[0][0].uuid


REGISTER = "GPU-a,10,16384,NVIDIA-A100,true,hami-core:GPU-b,10,16384,NVIDIA-A100,true,hami-core:"


def vgpu_conf(**arguments: Any) -> SchedulerConf:
    """allocate with predicates and deviceshare, vGPU on, binpack, and `arguments`."""
    given = {"deviceshare.VGPUEnable": True, "deviceshare.SchedulePolicy": "binpack", **arguments}
    return conf("allocate", ["predicates", {"name": "deviceshare", "arguments": given}])


VGPU = vgpu_conf()
# Cards of a model config_test.go's document splits (A100 40GB, in MIG mode).
A100 = "A100-SXM4-40GB"
MIG_REGISTER = f"GPU-a,10,40960,NVIDIA-{A100},true,mig:GPU-b,10,40960,NVIDIA-{A100},true,mig:"
# config_test.go's TestParseDeviceConfig document (volcano-vgpu-device-config's device-config.yaml).
DEVICE_CONFIG = """\
nvidia:
  resourceCountName: volcano.sh/vgpu-number
  resourceMemoryName: volcano.sh/vgpu-memory
  resourceMemoryPercentageName: volcano.sh/vgpu-memory-percentage
  resourceCoreName: volcano.sh/vgpu-cores
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  deviceSplitCount: 10
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  gpuMemoryFactor: 1
  knownMigGeometries:
  - models: [ "A30" ]
    allowedGeometries:
      - group: group1
        geometries:
        - {name: 1g.6gb, memory: 6144, count: 4}
      - group: group2
        geometries:
        - {name: 2g.12gb, memory: 12288, count: 2}
      - group: group3
        geometries:
        - {name: 4g.24gb, memory: 24576, count: 1}
  - models: [ "A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB", "A100-SXM4-40GB" ]
    allowedGeometries:
      - group: "group1"
        geometries:
        - {name: 1g.5gb, memory: 5120, count: 7}
      - group: "group2"
        geometries:
        - {name: 2g.10gb, memory: 10240, count: 3}
        - {name: 1g.5gb, memory: 5120, count: 1}
      - group: "group3"
        geometries:
        - {name: 3g.20gb, memory: 20480, count: 2}
      - group: "group4"
        geometries:
        - {name: 7g.40gb, memory: 40960, count: 1}
  - models: [ "A100-SXM4-80GB", "A100-80GB-PCIe", "A100-PCIE-80GB"]
    allowedGeometries:
      - group: "group1"
        geometries:
        - {name: 1g.10gb, memory: 10240, count: 7}
      - group: "group2"
        geometries:
        - {name: 2g.20gb, memory: 20480, count: 3}
        - {name: 1g.10gb, memory: 10240, count: 1}
      - group: "group3"
        geometries:
        - {name: 3g.40gb, memory: 40960, count: 2}
      - group: "group4"
        geometries:
        - {name: 7g.79gb, memory: 80896, count: 1}
"""


def vgpu_node(name: str, register: str = REGISTER) -> Obj:
    obj = node(name, cpu="16", memory="64Gi", extended={vgpu.NUMBER: "20", vgpu.MEMORY: "32768", vgpu.CORES: "200"})
    obj["metadata"]["annotations"] = {vgpu.REGISTER: register}
    return obj


def device_pod(name: str, extended: dict[str, str], on: str = "", **annotations: str) -> Obj:
    """A pod asking 1 CPU, 1Gi and the `extended` device resources as limits too (Volcano and
    HAMi read limits), pending or running `on` a node, with `annotations`."""
    pod = (
        running(name, on, cpu="1", memory="1Gi", extended=extended)
        if on
        else a_pod(name, cpu="1", memory="1Gi", extended=extended)
    )
    for container in pod["spec"]["containers"]:
        container["resources"]["limits"] = dict(container["resources"]["requests"])
    return annotate(pod, **annotations) if annotations else pod


def vgpu_pod(name: str, memory: int = 4096, cores: int = 25, on: str = "", **annotations: str) -> Obj:
    extended = {vgpu.NUMBER: "1", vgpu.MEMORY: str(memory), vgpu.CORES: str(cores)}
    return device_pod(name, extended, on, **annotations)


def assigned(session: Session, uid: str) -> str:
    return session.pod_annotations[uid][vgpu.ASSIGNED_IDS]
