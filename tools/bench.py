#!/usr/bin/env python3
"""LITE-RS benchmark (`make bench`): LITE against native verbs on one virtual cluster: litebench.bench.cli."""

from litebench.bench.cli import main

raise SystemExit(main())
