"""Package discovery: the top-level agent/, scheduler/ and controller/ folders install as lahar.agent,
lahar.scheduler and lahar.controller, so the repository layout shows the architecture."""

from setuptools import find_packages, setup

PROGRAMS = ("agent", "scheduler", "controller")


def packages() -> list[str]:
    found = find_packages(include=["lahar", "lahar.*"])
    for program in PROGRAMS:
        found += [f"lahar.{name}" for name in find_packages(include=[program, f"{program}.*"])]
    return found


setup(packages=packages(), package_dir={"lahar": "lahar", **{f"lahar.{p}": p for p in PROGRAMS}})
