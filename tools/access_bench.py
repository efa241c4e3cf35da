#!/usr/bin/env python3
"""What per-range keys cost against LITE's global rkey (`make bench-access`): litebench.bench.access."""

from litebench.bench.access import main

raise SystemExit(main())
