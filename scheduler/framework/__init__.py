"""The scheduling framework: session, statement, plugin and action registries (Volcano's split)."""
