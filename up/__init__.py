"""`lahar up`: the whole system on one machine (system.py), the demo it can narrate (demo.py) and
the workloads the demo's pods run (workloads.py). See docs/lahar-up.md."""

from pathlib import Path

# Where `lahar up` keeps the API's SQLite file, node state and logs (`lahar apiserver` and
# `lahar logs` default to it too).
DEFAULT_DATA_DIR = Path.home() / ".lahar"
