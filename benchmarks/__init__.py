"""Lockstep's benchmark suite: run it with ``python -m benchmarks.run`` (see docs/performance.md)."""
