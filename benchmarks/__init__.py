"""The benchmarks users run (docs/benchmarks.md), each as ``python -m benchmarks.NAME`` from the
repository root; shared helpers in :mod:`benchmarks.common`."""
