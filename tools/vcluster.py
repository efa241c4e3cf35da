#!/usr/bin/env python3
"""LITE-RS virtual cluster: boot, fault, partition, exec, shell, down: litebench.cluster.cli."""

from litebench.cluster.cli import main

raise SystemExit(main())
