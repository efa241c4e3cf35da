#!/usr/bin/env python3
"""LITE-RS showcase (`make demo`): litebench.demo."""

from litebench.demo import main

raise SystemExit(main())
