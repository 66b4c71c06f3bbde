"""What a Lahar program loads and collects while it starts: the official `kubernetes` package
without its `__init__` (lahar.client), the collector held off during start-up (lahar.collector).
Each check runs in a fresh interpreter: both are about a process's first imports."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_client_loads_only_the_kubernetes_submodules_it_uses() -> None:
    out = run_python(
        """
        import sys
        import lahar.client.api, lahar.client.connect
        print(*(name in sys.modules for name in ("kubernetes.dynamic", "kubernetes.watch", "kubernetes_validate")))
        """
    )
    assert out == ["False", "False", "False"]


def test_the_rest_of_the_kubernetes_package_still_answers() -> None:
    out = run_python(
        """
        import sys
        import lahar.client.api
        import kubernetes
        from kubernetes import watch  # a submodule the bare package lacks: imported alone
        print(watch.Watch.__name__, "kubernetes.dynamic" in sys.modules)
        print(kubernetes.__version__ == kubernetes.client.__version__)  # the real __init__ runs, once
        try:
            kubernetes.no_such_thing
        except AttributeError as exc:
            print("AttributeError")
        """
    )
    assert out == ["Watch", "False", "True", "AttributeError"]


def test_a_kubernetes_package_imported_first_is_left_as_it_is() -> None:
    out = run_python(
        """
        import sys
        import kubernetes
        import lahar.client.api
        print(sys.modules["kubernetes"] is kubernetes, "kubernetes.dynamic" in sys.modules)
        """
    )
    assert out == ["True", "True"]


def test_the_collector_is_held_until_released_and_start_up_objects_are_frozen() -> None:
    out = run_python(
        """
        import gc
        from lahar import collector
        collector.hold()
        print(gc.isenabled())
        collector.release(freeze=True)
        print(gc.isenabled(), gc.get_freeze_count() > 0)
        collector.release(freeze=True)  # once only
        print(gc.isenabled())
        """
    )
    assert out == ["False", "True", "True", "True"]


def test_release_without_hold_leaves_the_collector_alone() -> None:
    out = run_python(
        """
        import gc
        from lahar import collector
        gc.disable()  # an embedding program's own choice
        collector.release(freeze=True)
        print(gc.isenabled(), gc.get_freeze_count())
        """
    )
    assert out == ["False", "0"]


def test_the_lahar_entry_point_releases_the_collector_for_commands_that_do_not_hold_it() -> None:
    out = run_python(
        """
        import gc, sys
        sys.argv = ["lahar", "version"]
        import lahar.__main__ as entry
        print(gc.isenabled())  # held while the command line imported
        entry.main(["version"])
        print(gc.isenabled())
        """
    )
    assert out[0] == "False" and out[-1] == "True"
