"""Benchmarks: figures, not pass/fail tests. Run with `make bench` or `python -m bench.<name>`."""
