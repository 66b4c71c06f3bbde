"""The `lahar` program: `python -m lahar`, and the `lahar` command (pyproject.toml points here)."""

from lahar import collector

collector.hold()  # no collections while the command line and the command's modules import
from lahar.cli.main import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
