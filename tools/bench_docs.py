#!/usr/bin/env python3
"""Generates the latest-results block of docs/benchmarks.md from the benchmarks' JSON
(litebench/bench_docs.py; --help)."""
from litebench.bench_docs import main; main()
