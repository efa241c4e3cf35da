#!/usr/bin/env python3
"""Static checks of the Python tools (run by `make test`): every global name a
function uses is defined, so a renamed or deleted helper fails here, not half an
hour into a VM run."""

import builtins
import symtable
import unittest
from pathlib import Path

TOOLS = Path(__file__).resolve().parent


def undefined_globals(path):
    source = path.read_text()
    top = symtable.symtable(source, str(path), "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    known = defined | set(dir(builtins)) | {"__file__", "__name__"}
    missing = []

    def walk(table):
        for child in table.get_children():
            for sym in child.get_symbols():
                if sym.is_referenced() and sym.is_global() and sym.get_name() not in known:
                    missing.append(f"{path.name}: {child.get_name()} uses undefined {sym.get_name()}")
            walk(child)

    walk(top)
    return missing


class ScriptsTest(unittest.TestCase):
    def test_every_global_name_is_defined(self):
        scripts = sorted(TOOLS.glob("*.py")) + sorted(TOOLS.glob("litebench/*.py"))
        self.assertGreater(len(scripts), 5)
        missing = [m for p in scripts for m in undefined_globals(p)]
        self.assertEqual(missing, [])

    def test_the_check_finds_a_missing_helper(self):
        probe = TOOLS.parent / "build" / "lint-probe.py"
        probe.parent.mkdir(exist_ok=True)
        probe.write_text("def used():\n    return helper_that_was_deleted(1)\n")
        self.assertEqual(undefined_globals(probe), ["lint-probe.py: used uses undefined helper_that_was_deleted"])


if __name__ == "__main__":
    unittest.main()
