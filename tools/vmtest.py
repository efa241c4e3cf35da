#!/usr/bin/env python3
"""LITE-RS integration tests on a virtual cluster (run by `make test`): litebench.vmtests.cli."""

from litebench.vmtests.cli import main

raise SystemExit(main())
