"""The files an installation puts in place (dist/): the systemd units pass
`systemd-analyze verify`, the udev rule passes `udevadm verify` where udev has it
(254 and later; Debian 12 has 252, where that check alone is skipped), and the
files agree with one another and with the code: the group, the device unit, the
module's parameters, the exit status the units do not restart on.

The units are verified in a scratch root holding this host's own system units and
a stand-in /usr/bin/lite-admin, since verify checks that ExecStart= is executable
and the package is not installed here."""

import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIST = REPO / "dist"
UNITS = sorted((DIST / "systemd").glob("*.service"))
HOST_UNITS = Path("/usr/lib/systemd/system")


def tool(name):
    path = shutil.which(name)
    if path is None:
        raise AssertionError(f"{name} is missing: tools/deps.sh installs it (Debian package systemd)")
    return path


def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def unit_settings(path):
    """(section, key) -> [values] of a unit file, in order."""
    settings, section = {}, None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.setdefault((section, key), []).append(value)
    return settings


class UnitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tool("systemd-analyze")  # and with it the host's units, copied below
        cls.scratch = tempfile.TemporaryDirectory(prefix="lite-dist-")
        root = Path(cls.scratch.name)
        shutil.copytree(HOST_UNITS, root / "usr/lib/systemd/system", symlinks=True)
        (root / "usr/bin").mkdir(parents=True)
        stand_in = root / "usr/bin/lite-admin"
        stand_in.write_text("#!/bin/sh\nexit 0\n")
        stand_in.chmod(0o755)
        (root / "etc/systemd/system").mkdir(parents=True)
        for unit in UNITS:
            shutil.copy(unit, root / "etc/systemd/system" / unit.name)
        cls.root = root

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    def test_there_are_the_two_units(self):
        self.assertEqual([u.name for u in UNITS], ["lite-agent.service", "lite-manager.service"])

    def test_systemd_analyze_verify_passes_on_every_unit(self):
        analyze = tool("systemd-analyze")
        for unit in UNITS:
            with self.subTest(unit=unit.name):
                # verify exits 0 on unknown keys and bad values, which it only prints:
                # any output is a failure.
                done = run(analyze, "verify", "--man=no", f"--root={self.root}", unit.name)
                self.assertEqual((done.returncode, done.stdout + done.stderr), (0, ""))

    def test_hardening_keeps_their_exposure_low(self):
        """`systemd-analyze security` scores exposure from 0 (locked down) to 10: the
        agent (root with CAP_NET_ADMIN, /dev/lite) is at 2.1 and the manager at 1.7
        with systemd 252; above 2.5, hardening has been lost."""
        analyze = tool("systemd-analyze")
        for unit in UNITS:
            with self.subTest(unit=unit.name):
                done = run(analyze, "security", "--offline=yes", f"--root={self.root}", "--threshold=25", unit.name)
                self.assertEqual(done.returncode, 0, done.stdout + done.stderr)

    def test_every_unit_can_be_enabled_and_restarts_only_when_that_can_help(self):
        exit_config = re.search(r"const EXIT_CONFIG: u8 = (\d+);", (REPO / "tools/lite-admin/src/main.rs").read_text())
        self.assertIsNotNone(exit_config, "lite-admin's EXIT_CONFIG")
        for unit in UNITS:
            with self.subTest(unit=unit.name):
                settings = unit_settings(unit)
                self.assertIn(("Install", "WantedBy"), settings, "lintian: systemd-service-file-missing-install-key")
                self.assertEqual(settings[("Service", "Type")], ["notify"])
                self.assertEqual(settings[("Service", "Restart")], ["on-failure"])
                self.assertEqual(settings[("Service", "RestartPreventExitStatus")], [exit_config.group(1)])
                self.assertEqual(settings[("Service", "EnvironmentFile")], ["-/etc/lite/lite.conf"])

    def test_the_agent_is_bound_to_the_device_the_udev_rule_tags(self):
        device = run(tool("systemd-escape"), "--path", "--suffix=device", "/dev/lite").stdout.strip()
        self.assertEqual(device, "dev-lite.device")
        agent = unit_settings(DIST / "systemd/lite-agent.service")
        self.assertEqual(agent[("Unit", "BindsTo")], [device])
        self.assertIn(device, " ".join(agent[("Unit", "After")]).split())
        self.assertEqual(agent[("Install", "WantedBy")], [device])
        self.assertEqual(agent[("Service", "DeviceAllow")], ["/dev/lite rw"])
        self.assertIn('TAG+="systemd"', (DIST / "udev/90-lite.rules").read_text())


class UdevRuleTest(unittest.TestCase):
    RULES = DIST / "udev/90-lite.rules"

    def rule(self):
        lines = [ln for ln in self.RULES.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        self.assertEqual(len(lines), 1, "one rule")
        return dict(re.findall(r'([A-Z_]+(?:\{[^}]*\})?[+]?)=+"([^"]*)"', lines[0]))

    def test_it_gives_dev_lite_to_the_group_sysusers_creates(self):
        rule = self.rule()
        self.assertEqual(rule["SUBSYSTEM"], "misc")
        self.assertEqual(rule["KERNEL"], "lite")
        self.assertEqual(rule["MODE"], "0660")
        self.assertEqual(rule["TAG+"], "systemd")
        sysusers = [ln.split() for ln in (DIST / "sysusers.d/lite.conf").read_text().splitlines()
                    if ln.strip() and not ln.startswith("#")]
        self.assertEqual(sysusers, [["g", rule["GROUP"], "-"]])

    def test_udevadm_verify_passes(self):
        udevadm = shutil.which("udevadm")
        if udevadm is None:
            self.skipTest("no udevadm on this host")
        if run(udevadm, "verify", "--help").returncode != 0:
            version = run(udevadm, "--version").stdout.strip()
            self.skipTest(f"udevadm verify needs udev 254 or later; this host has {version}")
        done = run(udevadm, "verify", "--resolve-names=never", str(self.RULES))
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)


class ModuleFilesTest(unittest.TestCase):
    def test_modules_load_d_loads_lite_alone(self):
        names = [ln.strip() for ln in (DIST / "modules-load.d/lite.conf").read_text().splitlines()
                 if ln.strip() and not ln.startswith(("#", ";"))]
        self.assertEqual(names, ["lite"])

    def test_modprobe_d_explains_every_parameter_of_the_module_and_sets_none(self):
        declared = {name for c in sorted((REPO / "lite").rglob("*.c"))
                    for name in re.findall(r"^module_param\((\w+),", c.read_text(), re.M)}
        self.assertIn("cm_port", declared, "lite/verbs/cm.c declares one of the module's parameters")
        text = (DIST / "modprobe.d/lite.conf").read_text()
        active = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
        self.assertEqual(active, [], "every option ships commented out")
        explained = set(re.findall(r"^#options lite (\w+)=", text, re.M))
        self.assertEqual(explained, declared)


if __name__ == "__main__":
    unittest.main()
