"""Benchmarks: each prints same-run ratios against a baseline (see bench/README.md)."""
