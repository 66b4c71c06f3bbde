"""Lahar agent (see DESIGN.md). Built by its own issue."""
