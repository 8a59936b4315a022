"""Blocking clients for tests, benchmarks and scripts (not used by the broker itself)."""
