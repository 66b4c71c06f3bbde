"""Package discovery: the top-level program folders (agent/, scheduler/, controller/, apiserver/,
federation/, node/, up/) install as lahar.agent, lahar.scheduler and so on, so the repository layout
shows the architecture; bench/ (the benchmarks of `lahar bench`, and the demo's workloads) and
examples/ (the manifests `lahar up --demo` applies) install as lahar.bench and lahar.examples, so a
wheel carries everything the demo needs."""

from setuptools import find_packages, setup

MAPPED = ("agent", "scheduler", "controller", "apiserver", "federation", "node", "up", "bench", "examples")


def packages() -> list[str]:
    found = find_packages(include=["lahar", "lahar.*"])
    for top in MAPPED:
        found += [f"lahar.{name}" for name in find_packages(include=[top, f"{top}.*"])]
    return found


setup(
    packages=packages(),
    package_dir={"lahar": "lahar", **{f"lahar.{top}": top for top in MAPPED}},
    package_data={"lahar.examples": ["*.yaml"], "lahar.apiserver": ["kube_types.json"]},
)
