"""Bad arguments to the decision plugins are refused when the configuration is parsed, naming
the plugin and the key; Volcano's argument names are accepted."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.scheduler.conf import parse_conf
from lahar.scheduler.framework.plugin import ConfError
from tests.scheduler.cluster_fixtures import ALL_TIERS, conf

VOLCANO_ARGUMENTS: list[tuple[str, dict[str, Any]]] = [
    (
        "nodeorder",
        {
            "leastrequested.weight": 1,
            "mostrequested.weight": 0,
            "nodeaffinity.weight": 2,
            "podaffinity.weight": 2,
            "balancedresource.weight": 1,
            "tainttoleration.weight": 3,
            "imagelocality.weight": 1,
            "podtopologyspread.weight": 2,
        },
    ),
    (
        "binpack",
        {
            "binpack.weight": 10,
            "binpack.cpu": 5,
            "binpack.memory": 1,
            "binpack.resources": "nvidia.com/gpu, example.com/foo",
            "binpack.resources.nvidia.com/gpu": 2,
        },
    ),
    ("overcommit", {"overcommit-factor": 1.5}),
    (
        "predicates",
        {
            "predicate.NodeAffinityEnable": True,
            "predicate.TaintTolerationEnable": "false",
            "predicate.DynamicResourceAllocationEnable": True,
        },
    ),
]


def _text(plugin: str, arguments: dict[str, Any]) -> str:
    lines = [
        f"      {key}: {value!r}" if isinstance(value, str) else f"      {key}: {str(value).lower()}"
        for key, value in arguments.items()
    ]
    return 'actions: "allocate"\ntiers:\n- plugins:\n  - name: ' + plugin + "\n    arguments:\n" + "\n".join(lines)


@pytest.mark.parametrize(("plugin", "arguments"), VOLCANO_ARGUMENTS)
def test_volcano_arguments_are_accepted(plugin: str, arguments: dict[str, Any]) -> None:
    assert parse_conf(_text(plugin, arguments)).plugin_names == [plugin]


@pytest.mark.parametrize(
    ("plugin", "arguments", "named"),
    [
        ("nodeorder", {"leastrequested.weight": "heavy"}, "'leastrequested.weight' must be a number"),
        ("nodeorder", {"leastrequested.weight": -1}, "'leastrequested.weight' must be at least 0"),
        ("binpack", {"binpack.cpu": "lots"}, "'binpack.cpu' must be a number"),
        ("binpack", {"binpack.resources.nvidia.com/gpu": "two"}, "'binpack.resources.nvidia.com/gpu' must be a number"),
        ("overcommit", {"overcommit-factor": 0.5}, "'overcommit-factor' must be at least 1"),
        ("predicates", {"predicate.NodeAffinityEnable": "yes"}, "must be true or false"),
    ],
)
def test_bad_arguments_are_refused_with_the_plugin_and_key(plugin: str, arguments: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfError, match="tiers\\[0\\]") as refused:
        parse_conf(_text(plugin, arguments))
    assert named in str(refused.value)
    assert f"plugin {plugin}" in str(refused.value)


@pytest.mark.parametrize(
    ("plugin", "arguments", "named"),
    [
        ("nodeorder", {"leastrequsted.weight": 1}, "unknown argument 'leastrequsted.weight'"),
        ("binpack", {"binpack.gpu": 1}, "unknown argument 'binpack.gpu'"),
        ("predicates", {"predicate.Everything": True}, "unknown argument 'predicate.Everything'"),
        ("gang", {"gang.strict": True}, "plugin gang: unknown argument 'gang.strict'"),
        ("proportion", {"weight": 1}, "plugin proportion: unknown argument 'weight'"),
        ("drf", {"enableHierarchy": True}, "plugin drf: unknown argument"),
        ("priority", {"x": 1}, "plugin priority: unknown argument 'x'"),
    ],
)
def test_unknown_arguments_are_left_out_with_a_warning(plugin: str, arguments: dict[str, Any], named: str) -> None:
    # Volcano's files carry arguments Lahar's plugins do not have: reported, not fatal (issue 17).
    parsed = parse_conf(_text(plugin, arguments))
    assert parsed.plugin_names == [plugin]
    assert parsed.tiers[0][0].arguments == {}
    assert len(parsed.warnings) == 1 and named in parsed.warnings[0] and "tiers[0]" in parsed.warnings[0]


def test_the_default_tiers_of_this_part_parse() -> None:
    parsed = conf("enqueue, allocate, backfill", *ALL_TIERS)
    assert parsed.plugin_names == [
        "priority",
        "gang",
        "drf",
        "predicates",
        "proportion",
        "nodeorder",
        "binpack",
        "overcommit",
    ]
