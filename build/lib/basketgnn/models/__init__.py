"""Models composed from basketgnn.nn components."""
