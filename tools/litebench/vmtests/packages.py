"""LITE-RS installed as an operator installs it (issue 50), on Debian's stock kernel:
a fourth node boots Debian sid with systemd as init, with lite-rs-dkms,
lite-rs-tools, liblite0 and liblite-dev from `make deb` installed by dpkg and lite.ko
built by dkms (cluster/node_root.py: in a chroot before boot, since rustc under the
guests' emulation would take tens of minutes). Then: the module loads through
modules-load.d, the units start and the node joins the other three; a kernel module
built against the installed Module.symvers and kapi.h serves node 0; a user in group
lite builds apps/c-hello with pkg-config against the shared library and runs it; a
user outside it gets EACCES and is told why; the next version of the packages goes
in over the running node, which rejoins while the others keep working; and
`dpkg --purge` leaves no module, unit, group or file behind."""

import subprocess
import time

import pytest

from litebench.cluster.cluster import guest_address
from litebench.cluster.guest import CACHE, REPO
from litebench.cluster.node_root import MEMBER, OUTSIDER, NodeRoot
from litebench.vmtests.harness import check, ping, wait_peers
from litebench.vmtests.kapi import ECHO_ID

NODE = 3
PACKAGES = ["liblite-dev", "liblite0", "lite-rs-tools", "lite-rs-dkms"]


def package_version(c, n, package):
    return c.exec(n, f"dpkg-query -W -f '${{Version}}' {package}").out.strip()


def wait_joined(c, what, since, timeout=300):
    """Until the node and the other three see each other connected; seconds since `since`."""
    c.wait_connected([0, 1, 2, NODE], timeout=timeout)
    took = time.time() - since
    print(f"    {what}: {took:.0f} s", flush=True)
    return took


@pytest.mark.stock_kernel
def test_a_node_installed_from_packages_joins_upgrades_and_purges(c):
    debs = REPO / "build" / "deb"
    tools_deb = sorted(debs.glob("lite-rs-tools_*.deb"))
    check(tools_deb, f"no packages in {debs}: run make deb")
    version = subprocess.run(["dpkg-deb", "-f", str(tools_deb[0]), "Version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    next_version = f"{version}.1"
    next_debs = c.run / "deb-next"
    subprocess.run([str(REPO / "tools" / "deb.sh"), "next", next_version, str(next_debs)], check=True,
                   stdout=subprocess.DEVNULL)
    release = c.exec(0, "uname -r").out.strip()

    root = NodeRoot(c.run / f"node{NODE}-root")
    start = time.time()
    root.create(debs, next_debs, release, NODE, guest_address(0))
    print(f"    dpkg -i of the packages with dkms building lite.ko for {release}, and the next version's "
          f"module: {time.time() - start:.0f} s (chroot on the host)", flush=True)
    try:
        root.mount()
        start = time.time()
        c.boot_node(NODE, timeout=300, root=root.merged)
        print(f"    boot to the test's command unit: {time.time() - start:.0f} s", flush=True)
        wait_joined(c, "boot to joined (systemd, modules-load.d, lite-agent.service)", start)
        out = c.exec(NODE, "systemctl is-active lite-agent.service; systemctl is-enabled lite-agent.service; "
                           "systemctl is-active systemd-modules-load.service; cat /usr/lib/modules-load.d/lite.conf; "
                           "grep -c '^lite ' /proc/modules; modinfo -n lite; stat -c '%G %a' /dev/lite").out
        check(out.startswith("active\nenabled\n"), f"lite-agent.service is not active and enabled:\n{out}")
        # Nothing else loads lite: it has no device alias for udev, and no unit asks for it.
        check("active\n" in out.split("enabled\n", 1)[1] and "\nlite\n1\n" in out,
              f"lite was not loaded through modules-load.d:\n{out}")
        check(f"/{release}/updates/dkms/lite.ko" in out, f"lite.ko is not dkms's:\n{out}")
        check(out.rstrip().endswith("lite 660"), f"/dev/lite is not group lite's, mode 0660:\n{out}")
        ping(c, NODE, 0)
        ping(c, 1, NODE)

        # A module built against the packages' Module.symvers and kapi.h serves node 0.
        c.exec(NODE, f"insmod /run/lite/{root.path.name}/{root.kmod.relative_to(root.path)}/lite_echo.ko")
        c.exec(0, f"lite-selftest rpc-call {NODE} {ECHO_ID} --count 2 --size 12000 --reply 16K --echo")
        c.exec(NODE, "rmmod lite_echo")

        # A member of group lite builds the C example against the installed library.
        build = (f"runuser -u {MEMBER} -- sh -c 'cc -O2 -Wall -Werror /usr/local/share/lite-testbed/hello.c "
                 "$(pkg-config --cflags --libs liblite) -o /tmp/lite-hello && /tmp/lite-hello'; "
                 "ldd /tmp/lite-hello")
        out = c.exec(NODE, build, timeout=600).out
        check("lmr: ok" in out and "rpc: ok" in out and "3 peer(s)" in out, f"lite-hello as {MEMBER}:\n{out}")
        check("liblite.so.0 => /usr/lib/x86_64-linux-gnu/liblite.so.0" in out, f"not the shared library:\n{out}")
        for command in ("lite-admin status", "/tmp/lite-hello"):
            res = c.exec(NODE, f"runuser -u {OUTSIDER} -- {command} 2>&1", check=False)
            check(res.rc != 0 and "permission denied" in res.out and "group lite" in res.out,
                  f"{command} as {OUTSIDER}, outside group lite: {res.out}")
        res = c.exec(NODE, f"runuser -u {OUTSIDER} -- sh -c 'exec 3<>/dev/lite' 2>&1", check=False)
        check(res.rc != 0 and "Permission denied" in res.out, f"{OUTSIDER} opened /dev/lite: {res.out}")

        # The next version over the running node; the module is reloaded as
        # docs/install.md says, and the enabled agent follows /dev/lite back.
        epoch = c.status(NODE)["epoch"]
        start = time.time()
        c.exec(NODE, f"DEBIAN_FRONTEND=noninteractive dpkg -i /run/lite/{next_debs.name}/*.deb", timeout=900)
        print(f"    dpkg -i of the next version: {time.time() - start:.0f} s", flush=True)
        c.exec(NODE, "systemctl stop lite-agent && modprobe -r lite && modprobe lite", timeout=300)
        print(f"    and the module reloaded: {time.time() - start:.0f} s", flush=True)
        wait_joined(c, f"upgrade to {next_version}: dpkg -i, module reloaded, rejoined", start)
        for package in PACKAGES:
            got = package_version(c, NODE, package)
            check(got == next_version, f"{package} is at {got} after the upgrade, not {next_version}")
        # What `dkms status` reads, read directly: each of its runs took a minute
        # here, a fork of a few hundred commands at ~170 ms each over the 9p root.
        tree = f"/var/lib/dkms/lite-rs/kernel-{release}-$(uname -m)"
        out = c.exec(NODE, f"readlink {tree}; ls /var/lib/dkms/lite-rs; ls {tree} {tree}/include/lite; "
                           "modinfo -n lite").out
        check(out.startswith(f"{next_version}/{release}/") and f"\n{version}\n" not in out
              and "Module.symvers" in out and "kapi.h" in out
              and f"/{release}/updates/dkms/lite.ko" in out.rstrip().rsplit("\n", 1)[-1],
              f"dkms's tree after the upgrade (the next version installed, the first gone, Module.symvers "
              f"and kapi.h beside it, lite.ko from it):\n{out}")
        check(c.status(NODE)["epoch"] > epoch, "the upgraded node did not rejoin as a new incarnation")
        ping(c, 0, 1)
        ping(c, NODE, 2)

        # Purge: the node leaves, and nothing of LITE-RS stays.
        start = time.time()
        c.exec(NODE, "systemctl stop lite-agent && modprobe -r lite && DEBIAN_FRONTEND=noninteractive "
                     f"dpkg --purge {' '.join(PACKAGES)}", timeout=900)
        print(f"    dpkg --purge: {time.time() - start:.0f} s", flush=True)
        wait_peers(c, 0, down=[NODE])
        out = c.exec(NODE, "ls /lib/systemd/system /usr/lib/systemd/system /etc/systemd/system/*/ "
                           "| grep -E '^lite-(agent|manager)'; "
                           "getent group lite; ls /var/lib/dkms/lite-rs 2>/dev/null; grep '^lite ' /proc/modules", check=False).out
        check(not out.strip(), f"left after dpkg --purge:\n{out}")
        ping(c, 0, 1)
        c.exec(NODE, "sync")
    finally:
        c.kill_node(NODE)
        root.unmount()
    # Listed on the host, with the node off, as before the packages went in.
    ours = (str(REPO), str(CACHE), str(root.state), "/lite/")
    left = sorted(p for p in root.files() - root.files_before() if p != "/lite" and not p.startswith(ours))
    check(not left, f"files left after dpkg --purge: {left[:40]}")
