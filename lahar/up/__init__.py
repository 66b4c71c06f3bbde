"""`lahar up`: the whole system on one machine (system.py), the demo it can narrate (demo.py) and
the workloads the demo's pods run (workloads.py). See docs/lahar-up.md."""
