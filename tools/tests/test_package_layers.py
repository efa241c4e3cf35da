"""The litebench package imports only downward (its __init__ lists the order), never a
script of tools/, and never edits sys.path."""

import ast
import unittest
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "litebench"
# From the bottom up, as litebench/__init__.py lists them.
ORDER = ["cluster", "plots", "bench", "qos", "demo", "vmtests", "soak", "bench_docs"]
SCRIPTS = {p.stem for p in PACKAGE.parent.glob("*.py")}


def unit_of(path):
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def imported(tree):
    """(name, level) of every import: `from litebench.qos import x` is ("litebench.qos", 0)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, 0
        elif isinstance(node, ast.ImportFrom):
            yield node.module or "", node.level


def problems(unit, source):
    found = []
    tree = ast.parse(source)
    for name, level in imported(tree):
        if level:
            continue  # within its own sub-package
        top = name.split(".")[0]
        if top in SCRIPTS:
            found.append(f"{unit} imports the script {top}")
        if top == "litebench" and "." in name:
            target = name.split(".")[1]
            if target != unit and (target not in ORDER or ORDER.index(target) >= ORDER.index(unit)):
                found.append(f"{unit} imports litebench.{target}")
    if "sys.path" in source:
        found.append(f"{unit} edits sys.path")
    return found


class PackageLayers(unittest.TestCase):
    def test_every_module_imports_only_downward(self):
        found, checked = [], 0
        for path in sorted(PACKAGE.rglob("*.py")):
            if path.parent == PACKAGE and path.name == "__init__.py":
                continue
            unit = unit_of(path)
            self.assertIn(unit, ORDER, f"{path}: add its unit to ORDER")
            found += [f"{path.relative_to(PACKAGE)}: {p}" for p in problems(unit, path.read_text())]
            checked += 1
        self.assertGreater(checked, 30)
        self.assertEqual(found, [])

    def test_the_check_sees_upward_imports_scripts_and_path_edits(self):
        self.assertEqual(problems("cluster", "from litebench.qos.flows import x"), ["cluster imports litebench.qos"])
        self.assertEqual(problems("qos", "import vcluster"), ["qos imports the script vcluster"])
        self.assertEqual(problems("bench", "import sys\nsys.path.insert(0, 'x')"), ["bench edits sys.path"])
        self.assertEqual(problems("soak", "from litebench.vmtests.join import j\nfrom . import x"), [])
