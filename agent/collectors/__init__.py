"""Collectors: one file each, each reading from a configurable root so tests use fake trees."""
