"""Lahar scheduler (see DESIGN.md). Built by its own issue."""
