"""Benchmarks: each workload against a floor measured in the same run (see docs/benchmarks.md)."""
