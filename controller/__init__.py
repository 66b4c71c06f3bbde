"""Lahar controller (see DESIGN.md). Built by its own issue."""
