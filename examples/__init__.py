"""Example manifests (Volcano Jobs, Queues, an online service), installed as lahar.examples: the
scenarios `lahar up --demo` applies, and a start for `lahar apply -f examples/...`."""

from importlib.resources import files
from pathlib import Path

# Installed from a wheel or a checkout alike: a plain directory on disk.
DIRECTORY = Path(str(files(__name__)))
