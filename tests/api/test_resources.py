"""Resource lists: base units, Kubernetes round trips, vector arithmetic, pod aggregation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lahar.api.quantity import Quantity, QuantityError
from lahar.api.resources import (
    ResourceList,
    ResourceUnit,
    pod_limits,
    pod_requests,
    resource_unit,
    to_quantity,
)

GI = 2**30
MI = 2**20


def rl(**amounts: int) -> ResourceList:
    return ResourceList(amounts)


@pytest.mark.parametrize(
    ("name", "unit"),
    [
        ("cpu", ResourceUnit.MILLI),
        ("memory", ResourceUnit.BYTES),
        ("ephemeral-storage", ResourceUnit.BYTES),
        ("hugepages-2Mi", ResourceUnit.BYTES),
        ("hugepages-1Gi", ResourceUnit.BYTES),
        ("kubernetes.io/batch-memory", ResourceUnit.BYTES),
        ("lahar.dev/gpu-memory", ResourceUnit.BYTES),
        ("requests.cpu", ResourceUnit.MILLI),
        ("limits.memory", ResourceUnit.BYTES),
        ("kubernetes.io/batch-cpu", ResourceUnit.COUNT),
        ("pods", ResourceUnit.COUNT),
        ("nvidia.com/gpu", ResourceUnit.COUNT),
        ("example.com/foo", ResourceUnit.COUNT),
    ],
)
def test_resource_units(name: str, unit: ResourceUnit) -> None:
    assert resource_unit(name) is unit


def test_from_k8s_converts_to_base_units() -> None:
    resources = ResourceList.from_k8s(
        {
            "cpu": "100m",
            "memory": "2Gi",
            "pods": "110",
            "nvidia.com/gpu": 1,
            "lahar.dev/gpu-memory": "16Gi",
            "ephemeral-storage": "10G",
            "kubernetes.io/batch-cpu": "4k",
            "kubernetes.io/batch-memory": "512Mi",
            "hugepages-2Mi": "1Gi",
            "example.com/widgets": "1.5",
        }
    )
    assert dict(resources) == {
        "cpu": 100,
        "memory": 2 * GI,
        "pods": 110,
        "nvidia.com/gpu": 1,
        "lahar.dev/gpu-memory": 16 * GI,
        "ephemeral-storage": 10**10,
        "kubernetes.io/batch-cpu": 4000,
        "kubernetes.io/batch-memory": 512 * MI,
        "hugepages-2Mi": GI,
        "example.com/widgets": 2,  # counts round up, as Value() does
    }


def test_from_k8s_cpu_forms() -> None:
    assert ResourceList.from_k8s({"cpu": "1.5"})["cpu"] == 1500
    assert ResourceList.from_k8s({"cpu": 2})["cpu"] == 2000
    assert ResourceList.from_k8s({"cpu": 0.25})["cpu"] == 250
    assert ResourceList.from_k8s({"cpu": "0.1m"})["cpu"] == 1


def test_to_k8s_gives_canonical_strings() -> None:
    resources = ResourceList.from_k8s(
        {
            "cpu": "1000m",
            "memory": "1536Mi",
            "ephemeral-storage": "500M",
            "pods": "110",
            "nvidia.com/gpu": "8",
            "kubernetes.io/batch-cpu": "4000",
            "hugepages-1Gi": "2Gi",
            "example.com/zero": "0",
        }
    )
    assert resources.to_k8s() == {
        "cpu": "1",
        "memory": "1536Mi",
        "ephemeral-storage": "500M",
        "pods": "110",
        "nvidia.com/gpu": "8",
        "kubernetes.io/batch-cpu": "4k",
        "hugepages-1Gi": "2Gi",
        "example.com/zero": "0",
    }


@pytest.mark.parametrize(
    ("name", "amount", "text"),
    [
        ("cpu", 100, "100m"),
        ("cpu", 1500, "1500m"),
        ("cpu", 2000, "2"),
        ("memory", 2 * GI, "2Gi"),
        ("memory", 1536 * MI, "1536Mi"),
        ("memory", 1000, "1k"),
        ("memory", 1024, "1Ki"),
        ("memory", 1023, "1023"),
        ("memory", 0, "0"),
        ("memory", 10**11, "100G"),
        ("memory", 1000 * 1024, "1024k"),
        ("memory", 64 * 1024, "64Ki"),
        ("memory", -2 * GI, "-2Gi"),
        ("pods", 1000, "1k"),
        ("nvidia.com/gpu", 4, "4"),
    ],
)
def test_to_quantity(name: str, amount: int, text: str) -> None:
    assert str(to_quantity(name, amount)) == text


def test_k8s_round_trip() -> None:
    original = {"cpu": "250m", "memory": "3Gi", "nvidia.com/gpu": "2", "storage": "100G"}
    resources = ResourceList.from_k8s(original)
    assert resources.to_k8s() == original
    assert ResourceList.from_k8s(resources.to_k8s()) == resources


def test_from_k8s_errors_name_the_field() -> None:
    with pytest.raises(QuantityError) as caught:
        ResourceList.from_k8s({"cpu": "1", "memory": "2XB"}, field_path="resources")
    assert str(caught.value) == 'resources.memory: invalid quantity "2XB": unknown suffix "XB"'
    with pytest.raises(QuantityError) as caught:
        ResourceList.from_k8s({"nvidia.com/gpu": None})
    assert str(caught.value) == ("nvidia.com/gpu: invalid quantity None: expected a string or number, got NoneType")
    with pytest.raises(QuantityError) as caught:
        ResourceList.from_k8s("2Gi", field_path="spec.overhead")  # type: ignore[arg-type]
    assert str(caught.value) == ("spec.overhead: expected a map of resource name to quantity, got str")
    with pytest.raises(QuantityError, match=r"^requests\.'': resource name"):
        ResourceList.from_k8s({"": "1"}, field_path="requests")


def test_from_k8s_none_is_empty() -> None:
    assert len(ResourceList.from_k8s(None)) == 0
    assert ResourceList.from_k8s({}) == ResourceList()


def test_constructor_validates() -> None:
    assert ResourceList([("cpu", 1), ("memory", np.int64(5))]) == rl(cpu=1, memory=5)
    with pytest.raises(TypeError, match="resource cpu: amount must be an integer"):
        ResourceList({"cpu": 1.5})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="got bool"):
        ResourceList({"cpu": True})
    with pytest.raises(ValueError, match="non-empty string"):
        ResourceList({"": 1})


def test_mapping_behaviour() -> None:
    resources = ResourceList({"cpu": 100, "memory": 0})
    assert list(resources) == ["cpu", "memory"]
    assert len(resources) == 2
    assert "memory" in resources and "pods" not in resources
    assert resources["cpu"] == 100
    assert resources.get("pods") == 0
    assert resources.get("pods", 7) == 7
    with pytest.raises(KeyError):
        resources["pods"]
    with pytest.raises(TypeError):
        resources["cpu"] = 1  # type: ignore[index]
    assert dict(resources.without_zeros()) == {"cpu": 100}
    assert resources.quantity("cpu") == Quantity("100m")
    assert str(resources.quantity("memory")) == "0"
    assert str(resources.quantity("nvidia.com/gpu")) == "0"


def test_equality_treats_missing_as_zero() -> None:
    assert ResourceList({"cpu": 0}) == ResourceList()
    assert rl(cpu=1, memory=0) == rl(cpu=1)
    assert rl(cpu=1) != rl(cpu=2)
    assert rl(cpu=1) != rl(cpu=1, memory=1)
    assert hash(rl(cpu=1, memory=0)) == hash(rl(cpu=1))
    assert len({rl(cpu=1, memory=0), rl(cpu=1)}) == 1
    assert rl(cpu=1) != {"cpu": 1}


def test_addition_and_subtraction_are_element_wise() -> None:
    a = rl(cpu=1000, memory=GI)
    b = ResourceList({"cpu": 500, "nvidia.com/gpu": 2})
    assert dict(a + b) == {"cpu": 1500, "memory": GI, "nvidia.com/gpu": 2}
    assert dict(a - b) == {"cpu": 500, "memory": GI, "nvidia.com/gpu": -2}
    assert (a - a).is_zero()
    assert a + ResourceList() == a
    assert dict(a) == {"cpu": 1000, "memory": GI}  # operands untouched
    assert sum([a, b, a]) == ResourceList({"cpu": 2500, "memory": 2 * GI, "nvidia.com/gpu": 2})
    with pytest.raises(TypeError):
        a + {"cpu": 1}  # type: ignore[operator]


def test_scalar_multiplication() -> None:
    a = rl(cpu=250, memory=MI)
    assert dict(a * 4) == {"cpu": 1000, "memory": 4 * MI}
    assert 3 * a == rl(cpu=750, memory=3 * MI)
    assert (a * 0).is_zero()
    with pytest.raises(TypeError):
        a * 1.5  # type: ignore[operator]


def test_fits_in_and_less_equal() -> None:
    node = ResourceList.from_k8s({"cpu": "4", "memory": "8Gi", "pods": "110"})
    small = ResourceList.from_k8s({"cpu": "3500m", "memory": "8Gi"})
    too_much_cpu = ResourceList.from_k8s({"cpu": "4001m"})
    gpu = ResourceList.from_k8s({"cpu": "1", "nvidia.com/gpu": "1"})
    assert small.fits_in(node) and small.less_equal(node) and small <= node
    assert node >= small
    assert not too_much_cpu.fits_in(node) and not too_much_cpu <= node
    assert not gpu.fits_in(node)  # a missing resource is zero capacity
    assert ResourceList({"nvidia.com/gpu": 0}).fits_in(node)
    assert ResourceList().fits_in(node)
    assert not node.fits_in(small)
    # They differ only when the capacity has negative entries that the request does not name.
    overdrawn = ResourceList({"cpu": 1000, "memory": -1})
    assert rl(cpu=1).fits_in(overdrawn)
    assert not rl(cpu=1).less_equal(overdrawn)


def test_is_zero_and_bool() -> None:
    assert ResourceList().is_zero()
    assert ResourceList({"cpu": 0, "memory": 0}).is_zero()
    assert not rl(cpu=1).is_zero()
    assert not ResourceList({"cpu": 0})
    assert rl(cpu=-1)


def test_max_and_min() -> None:
    a = ResourceList({"cpu": 1000, "memory": GI})
    b = ResourceList({"cpu": 500, "memory": 2 * GI, "nvidia.com/gpu": 1})
    assert dict(a.max_with(b)) == {"cpu": 1000, "memory": 2 * GI, "nvidia.com/gpu": 1}
    assert dict(a.min_with(b)) == {"cpu": 500, "memory": GI, "nvidia.com/gpu": 0}
    assert list(a.max_with(b)) == ["cpu", "memory", "nvidia.com/gpu"]


def test_repr() -> None:
    resources = ResourceList.from_k8s({"memory": "2Gi", "cpu": "100m", "nvidia.com/gpu": "1"})
    assert repr(resources) == "ResourceList(cpu=100m, memory=2Gi, nvidia.com/gpu=1)"
    assert repr(ResourceList()) == "ResourceList()"


NAMES = ["cpu", "memory", "nvidia.com/gpu", "pods"]


def test_vector_round_trip() -> None:
    resources = ResourceList.from_k8s({"cpu": "1500m", "memory": "2Gi", "pods": "3"})
    vector = resources.to_vector(NAMES)
    assert vector.dtype == np.int64
    assert vector.tolist() == [1500, 2 * GI, 0, 3]
    back = ResourceList.from_vector(NAMES, vector)
    assert back == resources
    assert dict(back) == {"cpu": 1500, "memory": 2 * GI, "nvidia.com/gpu": 0, "pods": 3}
    assert all(type(amount) is int for amount in back.values())
    assert ResourceList.from_vector(NAMES, [1, 2, 3, 4]) == ResourceList(zip(NAMES, [1, 2, 3, 4], strict=True))


def test_vectors_support_numpy_arithmetic() -> None:
    pods = [ResourceList.from_k8s({"cpu": f"{i}00m", "memory": f"{i}Gi"}) for i in range(1, 5)]
    matrix = np.stack([pod.to_vector(NAMES) for pod in pods])
    total = ResourceList.from_vector(NAMES, matrix.sum(axis=0))
    assert total == sum(pods)
    assert total.to_k8s()["memory"] == "10Gi"


def test_to_vector_refuses_to_drop_requested_resources() -> None:
    resources = ResourceList({"cpu": 1, "example.com/fpga": 2, "example.com/none": 0})
    with pytest.raises(ValueError, match=r"resources not in the vector's names: example\.com/fpga"):
        resources.to_vector(["cpu", "memory"])
    assert resources.to_vector(["cpu", "memory"], allow_unlisted=True).tolist() == [1, 0]


def test_vector_errors() -> None:
    with pytest.raises(OverflowError, match="memory=18446744073709551616"):
        ResourceList({"memory": 2**64}).to_vector(["memory"])
    with pytest.raises(ValueError, match="does not match 4 resource names"):
        ResourceList.from_vector(NAMES, np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="does not match"):
        ResourceList.from_vector(NAMES, np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(TypeError, match="must hold integers"):
        ResourceList.from_vector(NAMES, np.zeros(4))
    with pytest.raises(ValueError, match="duplicate"):
        ResourceList.from_vector(["cpu", "cpu"], [1, 2])


# -- pods -----------------------------------------------------------------------------------------


def container(
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "image": "busybox", "resources": resources, **extra}


def pod(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    overhead: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def test_pod_requests_sum_containers() -> None:
    p = pod(
        [
            container({"cpu": "100m", "memory": "1Gi"}),
            container({"cpu": "1", "nvidia.com/gpu": 1}),
        ]
    )
    assert dict(pod_requests(p)) == {"cpu": 1100, "memory": GI, "nvidia.com/gpu": 1}


def test_pod_requests_take_the_larger_init_container_per_resource() -> None:
    p = pod(
        [container({"cpu": "500m", "memory": "1Gi"}), container({"cpu": "500m", "memory": "1Gi"})],
        init=[container({"cpu": "2", "memory": "512Mi"}), container({"cpu": "1", "memory": "3Gi"})],
    )
    # cpu: max(1000, 2000, 1000) = 2000; memory: max(2Gi, 512Mi, 3Gi) = 3Gi.
    assert pod_requests(p).to_k8s() == {"cpu": "2", "memory": "3Gi"}


def test_pod_requests_ignore_smaller_init_containers() -> None:
    p = pod([container({"cpu": "2", "memory": "2Gi"})], init=[container({"cpu": "1"})])
    assert pod_requests(p) == rl(cpu=2000, memory=2 * GI)


def test_pod_requests_add_overhead_after_the_max() -> None:
    p = pod(
        [container({"cpu": "1"})],
        init=[container({"cpu": "3"})],
        overhead={"cpu": "250m", "memory": "120Mi"},
    )
    assert dict(pod_requests(p)) == {"cpu": 3250, "memory": 120 * MI}


def test_limits_only_container_requests_its_limits() -> None:
    p = pod([container(limits={"cpu": "2", "memory": "1Gi"})])
    assert pod_requests(p) == rl(cpu=2000, memory=GI)
    assert pod_limits(p) == rl(cpu=2000, memory=GI)


def test_limit_defaulting_is_per_resource() -> None:
    p = pod([container({"cpu": "100m"}, {"cpu": "1", "memory": "2Gi"})])
    assert pod_requests(p).to_k8s() == {"cpu": "100m", "memory": "2Gi"}
    assert pod_limits(p).to_k8s() == {"cpu": "1", "memory": "2Gi"}


def test_init_container_limits_default_its_requests() -> None:
    p = pod([container({"cpu": "100m"})], init=[container(limits={"cpu": "4"})])
    assert pod_requests(p) == rl(cpu=4000)


def test_sidecars_add_to_the_pod_and_to_later_init_containers() -> None:
    p = pod(
        [container({"cpu": "1", "memory": "1Gi"})],
        init=[
            container({"cpu": "2"}),  # runs alone: 2 cores
            container({"cpu": "500m", "memory": "256Mi"}, restartPolicy="Always"),  # sidecar
            container({"cpu": "2", "memory": "1Gi"}),  # beside the sidecar: 2.5 cores, 1.25Gi
        ],
    )
    # Steady state: 1 + 0.5 = 1.5 cores, 1.25Gi; the last init container needs 2.5 cores.
    assert dict(pod_requests(p)) == {"cpu": 2500, "memory": GI + 256 * MI}


def test_sidecars_run_for_the_pod_lifetime() -> None:
    p = pod(
        [container({"cpu": "1", "memory": "1Gi"})],
        init=[container({"cpu": "1", "memory": "512Mi"}, {"cpu": "2"}, restartPolicy="Always")],
    )
    assert pod_requests(p).to_k8s() == {"cpu": "2", "memory": "1536Mi"}
    assert pod_limits(p).to_k8s() == {"cpu": "2"}


def test_pod_limits_aggregate_and_add_overhead_only_where_limited() -> None:
    p = pod(
        [container({"cpu": "1"}, {"cpu": "2"}), container({"memory": "1Gi"})],
        init=[container(limits={"cpu": "3"})],
        overhead={"cpu": "100m", "memory": "64Mi"},
    )
    assert dict(pod_limits(p)) == {"cpu": 3100}
    assert dict(pod_requests(p)) == {"cpu": 3100, "memory": GI + 64 * MI}


def test_pods_without_resources() -> None:
    assert pod_requests(pod([{"name": "c", "image": "busybox"}])).is_zero()
    assert pod_requests({"spec": {}}).is_zero()
    assert pod_requests({}).is_zero()
    assert pod_limits(pod([container()])) == ResourceList()


def test_pod_errors_name_the_container_field() -> None:
    p = pod([container({"cpu": "1"}), container({"memory": "1 Gi"})])
    with pytest.raises(QuantityError) as caught:
        pod_requests(p)
    assert str(caught.value) == (
        'spec.containers[1].resources.requests.memory: invalid quantity "1 Gi": contains whitespace'
    )
    p = pod([container()], init=[container(limits={"cpu": "1Q"})])
    expected = r"^spec\.initContainers\[0\]\.resources\.limits\.cpu: "
    with pytest.raises(QuantityError, match=expected):
        pod_requests(p)
    p = pod([container()], overhead={"memory": "lots"})
    with pytest.raises(QuantityError, match=r'^spec\.overhead\.memory: invalid quantity "lots"'):
        pod_requests(p)
