"""Structured fuzzing of the Core and supervisor serve (issue 13)."""
