"""Helpers shipped with the package for tests, the local demo and benchmarks."""
