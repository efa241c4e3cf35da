"""A node as an operator runs one: Debian sid with systemd as init and LITE-RS from
its packages, for vmtests/packages.py.

The root is an overlay of debian.sh's sid root (which has the stock kernel's
modules, headers and prepared tree, systemd, udev and dkms), with every change in
DIR/upper, so the cached root stays as it is. `create` installs the packages there
before boot, in a chroot: dkms builds lite.ko for the stock kernel, as the
package's postinst does on any node. The build runs on the host because rustc
under the guests' emulation would take tens of minutes; the same goes for the next
version's module, which the package's postinst finds as a DKMS tarball with its
binaries when that version is installed on the running node. The guest boots the merged directory over 9p (guest init's
lite_root=9p); two test units give it its address on the private segment,
Soft-RoCE and the host's command channel (tools/guest/commands).
"""

import os
import subprocess
from pathlib import Path

from litebench.cluster.guest import CACHE, REPO

SID_ROOT = CACHE / "debian" / "root"
DEBIAN_SH = REPO / "tools" / "kernel" / "debian.sh"
# The stock modules the node loads (with their dependencies): virtio and 9p, which the
# initramfs loaded before, Soft-RoCE and the RDMA stack.
GUEST_MODULES = ["virtio_net", "9pnet_virtio", "9p", "overlay", "rdma_rxe", "ib_uverbs", "ib_umad", "rdma_ucm"]
# The test's users: one in group lite, one outside it.
MEMBER, OUTSIDER = "alice", "bob"
# What the file lists before the packages and after their purge leave out: state
# that any boot changes.
VOLATILE = ("/proc", "/sys", "/dev", "/run", "/tmp", "/var/log", "/var/lib/systemd", "/var/cache/ldconfig",
            "/var/cache/debconf", "/var/lib/dhcp", "/var/tmp", "/etc/machine-id", "/var/lib/dbus/machine-id",
            "/etc/.pwd.lock", "/etc/.updated", "/var/.updated", "/var/lib/private", "/var/cache/private")

NET_UNIT = """[Unit]
Description=LITE-RS testbed: this node's address on the private segment, and Soft-RoCE
After=systemd-modules-load.service
Before=network-online.target
Wants=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/lite-testbed-net

[Install]
WantedBy=multi-user.target network-online.target
"""

NET_SCRIPT = """#!/bin/sh
# The virtual cluster's part of a node's setup (tools/guest/init does it on the others).
set -e
n=$(sed -n 's/.*lite_node=\\([0-9]*\\).*/\\1/p' /proc/cmdline)
mkdir -p /run/lite /lite
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 run /run/lite
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,ro,cache=loose guest /lite
echo pfifo_fast > /proc/sys/net/core/default_qdisc
ip link set eth0 up
ip addr add "10.77.0.$((n + 1))/24" dev eth0
modprobe rdma_rxe
rdma link add rxe0 type rxe netdev eth0
"""

COMMANDS_UNIT = """[Unit]
Description=LITE-RS testbed: the host's commands (tools/guest/commands)
Requires=lite-testbed-net.service
After=lite-testbed-net.service

[Service]
Environment=PATH=/usr/sbin:/usr/bin:/sbin:/bin:/lite/bin
ExecStart=/bin/sh -c 'exec /bin/bash /usr/local/sbin/lite-testbed-commands \
"$(sed -n "s/.*lite_node=\\\\([0-9]*\\\\).*/\\\\1/p" /proc/cmdline)"'
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
"""


class NodeRoot:
    """DIR/upper and DIR/work: the overlay's; DIR/merged: the root qemu exports;
    DIR/state: the file lists and the module built against the packages (kmod),
    bound into the chroot."""

    def __init__(self, path):
        self.path = Path(path).resolve()
        self.merged = self.path / "merged"
        self.state = self.path / "state"
        self.kmod = self.state / "kmod"

    def chroot(self, script, binds=(), timeout=1800):
        """Runs sh `script` chrooted in the overlay (debian.sh run); raises with its output on failure."""
        env = {"DEBIAN_OVERLAY": str(self.path), "DEBIAN_BIND": " ".join(str(b) for b in (self.state, *binds))}
        res = subprocess.run([str(DEBIAN_SH), "run", "sh", "-ec", script], env={**os.environ, **env},
                             capture_output=True, text=True, timeout=timeout)
        if res.returncode:
            raise RuntimeError(f"node root: `{script.strip()[:200]}` exited {res.returncode}:\n"
                               f"{(res.stdout + res.stderr)[-4000:]}")
        return res.stdout

    def create(self, debs, next_debs, release, node, manager):
        """A fresh root with the packages in `debs` installed (dkms has built lite.ko for
        kernel `release`), the module of those in `next_debs` built too, the agent
        enabled to join `manager` as node id `node`, and apps/kmod-echo built against
        the installed kernel API in `kmod`."""
        if not (SID_ROOT / ".toolchain").exists():
            raise RuntimeError(f"no sid root in {SID_ROOT}: run tools/kernel/debian.sh prepare")
        self.unmount()
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.path)], check=True)
        self.state.mkdir(parents=True)
        for name, text in (("lite-testbed-net.service", NET_UNIT), ("lite-testbed-commands.service", COMMANDS_UNIT),
                           ("lite-testbed-net", NET_SCRIPT)):
            (self.state / name).write_text(text)
        packages = sorted(str(p) for p in Path(debs).glob("*.deb") if "-dbgsym_" not in p.name)
        next_dkms = sorted(Path(next_debs).glob("lite-rs-dkms_*.deb"))
        if not packages or not next_dkms:
            raise RuntimeError(f"no packages in {debs} or {next_debs}: run make deb")
        next_version = subprocess.run(["dpkg-deb", "-f", str(next_dkms[0]), "Version"], capture_output=True,
                                      text=True, check=True).stdout.strip()
        self.chroot(f"""
            echo node{node} > /etc/hostname
            useradd --create-home --shell /bin/sh {MEMBER}
            useradd --create-home --shell /bin/sh {OUTSIDER}
            cd {self.state}
            install -m 644 lite-testbed-net.service lite-testbed-commands.service /etc/systemd/system/
            install -m 755 lite-testbed-net /usr/local/sbin/
            install -m 755 {REPO}/tools/guest/commands /usr/local/sbin/lite-testbed-commands
            install -D -m 644 {REPO}/apps/c-hello/hello.c /usr/local/share/lite-testbed/hello.c
            systemctl enable lite-testbed-net.service lite-testbed-commands.service
            systemctl mask serial-getty@ttyS0.service e2scrub_reap.service
            # Only the stock modules this virtual machine loads, with their
            # dependencies: depmod reads every module, dkms runs it at each install and
            # removal, and with all 4 200 under emulation each run took minutes.
            for m in {" ".join(GUEST_MODULES)}; do modprobe -S {release} --show-depends $m; done \
              | awk '$1 == "insmod" {{print $2}}' | sort -u > /tmp/keep
            find /lib/modules/{release}/kernel -name '*.ko*' | sort | comm -23 - /tmp/keep | xargs -r rm -f
            test "$(find /lib/modules/{release}/kernel -name '*.ko*' | wc -l)" -gt 10
            depmod {release}
            # The next version's module, built here and left as a DKMS tarball with its
            # binaries where the package's postinst loads one (dkms ldtarball) instead
            # of building: the guest's rustc would take tens of minutes.
            dpkg-deb --fsys-tarfile {next_dkms[0]} | tar -x -C / ./usr/src
            dkms add -m lite-rs -v {next_version}
            dkms build -m lite-rs -v {next_version} -k {release}
            dkms mktarball -m lite-rs -v {next_version} -k {release} --archive lite-rs-{next_version}.dkms.tar.gz
            install -D -m 644 /var/lib/dkms/lite-rs/{next_version}/tarball/lite-rs-{next_version}.dkms.tar.gz \
              /usr/share/lite-rs-dkms/lite-rs-{next_version}.dkms.tar.gz
            dkms remove -m lite-rs -v {next_version} --all
            rm -rf /usr/src/lite-rs-{next_version} /var/lib/dkms/lite-rs
            {self._list_files()} > {self.state}/files.before
        """, binds=(next_dkms[0].parent,))
        self.chroot(f"""
            DEBIAN_FRONTEND=noninteractive dpkg -i {" ".join(packages)}
            dkms status -m lite-rs -k {release} | grep -q ': installed' || {{ dkms status; exit 1; }}
            usermod -aG lite {MEMBER}
            # A kernel developer's module, built as docs/kernel-api.md says against what
            # the package installed: apps/kmod-echo's source with a Kbuild of its own.
            lite=/var/lib/dkms/lite-rs/kernel-{release}-$(uname -m)
            mkdir {self.kmod}
            cp {REPO}/apps/kmod-echo/lite_echo.c {self.kmod}/
            printf 'obj-m := lite_echo.o\nccflags-y += -I%s/include\n' "$lite" > {self.kmod}/Kbuild
            make -s -C /lib/modules/{release}/build M={self.kmod} KBUILD_EXTRA_SYMBOLS=$lite/Module.symvers modules
            sed -i -e 's/^#LITE_MANAGER=.*/LITE_MANAGER={manager}/' -e 's/^#LITE_NODE_ID=.*/LITE_NODE_ID={node}/' \
              /etc/lite/lite.conf
            systemctl enable lite-agent.service
            # The kernel tree dkms prepared stays in the sid root for the next run:
            # purging 108 000 files over 9p under emulation took many minutes.
            rm -rf /var/cache/lite-rs-dkms
        """, binds=(Path(debs),))
        return next_version

    def files_before(self):
        """The root's files before the packages went in (`create`)."""
        return set((self.state / "files.before").read_text().splitlines())

    def files(self):
        """The root's files now, listed as `files_before` (not while it is mounted)."""
        return set(self.chroot(self._list_files()).splitlines())

    @staticmethod
    def _list_files():
        excluded = " -o ".join(f"-path {p}" for p in VOLATILE)
        return f"find / -xdev \\( {excluded} \\) -prune -o -print | sort"

    def mount(self):
        """The merged root, mounted on the host for qemu to export (until `unmount`)."""
        self.merged.mkdir(exist_ok=True)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={SID_ROOT},upperdir={self.path / 'upper'},workdir={self.path / 'work'}",
                        str(self.merged)], check=True)
        return self.merged

    def unmount(self):
        if self.merged.is_mount():
            subprocess.run(["umount", "-l", str(self.merged)], check=True)
