#!/usr/bin/env python3
"""The LITE-RS soak (`make soak`): applications, benchmarks and checked traffic with churn and faults: litebench.soak.cli."""

from litebench.soak.cli import main

raise SystemExit(main())
