"""Benchmarks of the store (not collected by pytest; run `python -m tests.perf.bench_store`)."""
