#!/usr/bin/env python3
"""LITE-RS priority-class benchmark (`make bench-qos`; part of `make bench`): litebench.qos.cli."""

from litebench.qos.cli import main

raise SystemExit(main())
