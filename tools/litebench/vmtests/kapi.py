"""The kernel API (include/lite/kapi.h) through its sample module, apps/kmod-echo:
one module checking another across nodes from the kernel, a process calling a
kernel server, lite.ko kept loaded by a module, and unloading a module that
still holds an LMR, a mapping and an RPC id."""

from litebench.vmtests.harness import check, check_no_lmr_state

# apps/kmod-echo's default RPC id.
ECHO_ID = 0x6563


def test_kernel_api_sample_module_across_nodes(c):
    c.exec(1, "insmod /lite/lite_echo.ko")
    # At load, node 2's instance reads and writes node 1's LMR, takes its lock,
    # passes its barrier and makes a small and a large echo call; insmod fails
    # with the first error.
    c.exec(2, "insmod /lite/lite_echo.ko peer=1")
    # Processes call the kernel server: a reply inline, and one written from a
    # staged copy of the kernel's buffer.
    for size in (64, 12000):
        c.exec(0, f"lite-selftest rpc-call 1 {ECHO_ID} --count 5 --size {size} --reply 16K --echo")
    # lite.ko stays while a module uses it (an open file's hold has its own test).
    res = c.exec(1, "rmmod lite 2>&1; grep '^lite ' /proc/modules", check=False)
    fields = res.out.strip().splitlines()[-1].split()
    check(fields[3:5] == ["lite_echo,", "Live"], f"rmmod lite beside lite_echo: {res.out}")
    # Node 1's module goes first, with node 2's mapping of its LMR still there.
    c.exec(1, "rmmod lite_echo")
    c.exec(0, f"lite-selftest rpc-call 1 {ECHO_ID} --count 1 --expect-error ECONNREFUSED")
    c.exec(2, "rmmod lite_echo")
    check_no_lmr_state(c)
