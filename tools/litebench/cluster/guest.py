"""The virtual cluster's guest image: the kernel a guest boots, its initramfs, and
the accelerator qemu boots it with.

A guest runs one of `KERNELS`: our 6.12 builds (tools/kernel/build.sh) or Debian's
stock kernel (tools/kernel/debian.sh). Its initramfs is made on the host: busybox,
the kernel's modules, rdma-core and perftest with every library they load, the
programs in build/VARIANT/guest/bin and our /init (tools/guest/init). KVM is used
only where a probe boot of that kernel succeeds (the verdict is kept in
$LITE_CACHE), TCG otherwise. cluster.py boots its nodes with these.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CACHE = Path(os.environ.get("LITE_CACHE") or
             Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lite-rs")

# Programs the guests get from the host, with every library they load.
# The soft RDMA devices a guest can make at boot (tools/guest/init: lite_rdma=), each
# with its device's name; libibverbs has a provider of the same name for each.
PROVIDERS = {"rxe": "rxe0", "siw": "siw0"}
GUEST_PROGRAMS = [
    "/usr/bin/rdma", "/usr/bin/ibv_devices", "/usr/bin/ibv_devinfo", "/usr/bin/ibv_rc_pingpong",
    "/usr/bin/ib_write_lat", "/usr/bin/ib_write_bw", "/usr/bin/ib_read_lat", "/usr/bin/ib_read_bw",
    "/usr/bin/ib_send_lat", "/usr/bin/ib_atomic_lat", "/usr/bin/rping", "/usr/bin/strace",
]


def ldd(path):
    """Shared libraries (absolute paths) a program loads, including the loader."""
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        m = re.search(r"(/\S+)", line.split("=>")[-1])
        if m and os.path.exists(m.group(1)):
            libs.append(m.group(1))
    return libs


def build_initramfs(kernel_dir, guest_dir, out):
    """busybox, kernel modules, rdma-core + perftest with their libraries, our /init."""
    root = out.parent / "initramfs-root"
    shutil.rmtree(root, ignore_errors=True)
    for d in ["bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "tmp", "run", "lib", "lib64"]:
        (root / d).mkdir(parents=True, exist_ok=True)

    def put(src, dst=None):
        dst = root / (dst or src).lstrip("/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(src), dst)

    put("/bin/busybox")
    os.symlink("busybox", root / "bin/sh")
    put(str(REPO / "tools/guest/init"), "/init")
    put(str(REPO / "tools/guest/commands"), "/commands")
    shutil.copytree(kernel_dir / "modroot/lib/modules", root / "lib/modules", symlinks=True)
    if (kernel_dir / "modules.load").exists():
        put(str(kernel_dir / "modules.load"), "/etc/modules.load")
    libs = set()
    programs = [p for p in GUEST_PROGRAMS if os.path.exists(p)]
    programs += [str(p) for p in (guest_dir / "bin").glob("*") if p.is_file()]
    for prog in programs:
        if not prog.startswith(str(guest_dir)):
            put(prog)
        libs.update(ldd(prog))
    # The user-space providers of both soft devices (Cluster.up's provider).
    for name in PROVIDERS:
        provider = sorted(Path("/usr/lib/x86_64-linux-gnu/libibverbs").glob(f"lib{name}-rdmav*.so"))
        if not provider:
            raise SystemExit(f"vcluster: lib{name} provider missing: run tools/deps.sh")
        libs.add(str(provider[0]))
        libs.update(ldd(provider[0]))
    # glibc dlopens libgcc_s for pthread_exit/cancellation.
    libs.update(str(p) for p in Path("/usr/lib/x86_64-linux-gnu").glob("libgcc_s.so.1"))
    for lib in libs:
        put(lib)
    for name in PROVIDERS:
        put(f"/etc/libibverbs.d/{name}.driver")
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    tmp = out.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        files = subprocess.Popen(["find", "."], cwd=root, stdout=subprocess.PIPE)
        cpio = subprocess.Popen(["cpio", "-o", "-H", "newc", "-R", "0:0", "--quiet"], cwd=root,
                                stdin=files.stdout, stdout=subprocess.PIPE)
        gz = subprocess.Popen(["gzip", "-1"], stdin=cpio.stdout, stdout=f)
        files.stdout.close()
        cpio.stdout.close()
        if gz.wait() or cpio.wait() or files.wait():
            raise SystemExit("vcluster: building the initramfs failed")
    tmp.rename(out)
    shutil.rmtree(root)


# Guest kernels: our 6.12 builds, and Debian's unmodified stock kernel.
KERNELS = ["release", "debug", "debian"]


def kernel_dir_for(variant):
    """The kernel's directory: bzImage, modroot/lib/modules and, for the stock kernel
    (whose drivers are modules), modules.load: modules to load at boot, in order."""
    script = ["tools/kernel/debian.sh", "guest"] if variant == "debian" else ["tools/kernel/build.sh", variant]
    out = subprocess.run([str(REPO / script[0])] + script[1:], stdout=subprocess.PIPE, text=True)
    if out.returncode:
        raise SystemExit(f"vcluster: no {variant} kernel")
    return Path(out.stdout.strip())


def choose_accel(kernel_dir, initramfs, run_dir):
    """KVM only where a guest really boots with it; TCG otherwise (silently)."""
    forced = os.environ.get("LITE_ACCEL")
    if forced:
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    verdict = CACHE / f"accel-{kernel_dir.name}"
    if verdict.exists():
        return verdict.read_text().strip()
    console = run_dir / "kvm-probe.console"
    cmd = ["timeout", "-s", "KILL", "30", "qemu-system-x86_64", "-accel", "kvm", "-m", "512", "-smp", "1",
           "-nodefaults", "-no-reboot", "-display", "none", "-serial", f"file:{console}",
           "-kernel", str(kernel_dir / "bzImage"), "-initrd", str(initramfs),
           "-append", "console=ttyS0 panic=-1 lite_probe=1"]
    subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ok = console.exists() and "LITE-PROBE-OK" in console.read_text(errors="replace")
    accel = "kvm" if ok else "tcg"
    verdict.write_text(accel + "\n")
    return accel
