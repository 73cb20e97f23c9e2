"""Helpers shared by the test modules (data generators, dense references, CLI runners). Imported
as ``tests.support.<module>``: the project root is on pytest's path (pyproject.toml)."""
