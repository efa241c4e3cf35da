"""The README's commands still exist (run by `make test`): every `make TARGET` it
names is a target of the Makefile, every script it names is there and answers
`--help`, and the demo counts the lines of every application however its source is
laid out. The commands that boot a cluster run in the VM suites (see the note in
tools/litebench/vmtests/apps.py); this catches a renamed target, script or file
without one."""

import re
import subprocess
import sys
import unittest
from pathlib import Path

from litebench import demo

TOOLS = Path(__file__).resolve().parents[1]
REPO = TOOLS.parent
README = (REPO / "README.md").read_text()


def makefile_targets():
    text = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*)\s*:(?!=)", text, re.M))
    for phony in re.findall(r"^\.PHONY:(.*)$", text, re.M):
        targets |= set(phony.split())
    return targets


class ReadmeCommandsTest(unittest.TestCase):
    def test_every_make_target_the_readme_names_exists(self):
        named = set(re.findall(r"`make ([a-z][a-z-]*)", README)) | set(re.findall(r"^\s*make ([a-z][a-z-]*)", README, re.M))
        self.assertIn("demo", named)
        self.assertIn("test", named)
        missing = sorted(named - makefile_targets())
        self.assertEqual(missing, [], "README names make targets the Makefile lacks")

    def test_every_script_the_readme_names_answers_help(self):
        scripts = sorted(set(re.findall(r"tools/([a-z_/]+\.py)", README)))
        self.assertGreater(len(scripts), 3)
        for script in scripts:
            path = TOOLS / script
            self.assertTrue(path.is_file(), f"README names tools/{script}, which is not there")
            if path.name.startswith("test_") or "/" in script:
                continue
            res = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=60)
            self.assertEqual(res.returncode, 0, f"tools/{script} --help: {res.stderr[-500:]}")

    def test_the_demo_counts_every_applications_lines(self):
        for app in demo.APPS:
            api, lines = demo.api_lines(app)
            self.assertGreater(api, 0, app)
            self.assertGreater(lines, api, app)
        args = demo.parse_args(["--short"])
        self.assertEqual(args.app_list, demo.APPS)
        self.assertEqual(args.mr_size, demo.SHORT["mr_size"])
