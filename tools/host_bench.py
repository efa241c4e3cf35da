#!/usr/bin/env python3
"""What LITE's own code costs per operation on this host (`make bench-host`): litebench.bench.hostcost."""

from litebench.bench.hostcost import main

raise SystemExit(main())
