"""The integration tests' suites (tools/vmtest.py --suite) as pytest markers, the
order their modules run in, and the cluster each suite boots.

The markers (declared in pytest.ini): `setup`, the tests that join the nodes, first
in every suite; `big`, `link`, `bridge` and `fuzz`, a suite each (a test without
one is in `full`; `stock` is `full` and `big` on one cluster, as make test runs
them on Debian's stock kernel: one boot instead of two); `fails_nodes`, a test in which a node may fence another off;
`test_hooks`, a test for the debug kernel only; `sanitizer_run`, one not for
Debian's stock kernel (a failure, teardown or race test that the debug kernel's
sanitizers watch: its repeat on the stock kernel did not fit make test's time); `stock_kernel`, one for Debian's stock kernel only. Later tests build on the state earlier ones leave, so they
run in the order of MODULES, each module's tests in the order they are defined.

The big suite needs a kernel without sanitizers: Soft-RoCE moves ~0.2 MB/s on the
emulated debug kernel (KASAN), ~10 MB/s on the release or Debian's stock kernel, and
1 GiB round trips only fit the latter (make test runs big, link and bridge on Debian's,
so that it builds one kernel). The link suite's node 2 is behind a wire without a rate,
for faults: a rate-limited wire takes no management command (Cluster.wire_mgmt).
"""

from litebench.cluster import wire
from litebench.cluster.guest import REPO

# Where a run keeps the cluster's logs, unless told otherwise (--run-dir).
RUN_DIR = REPO / "build" / "vmtest"

# The tests of each suite, as a pytest marker expression.
SUITES = {
    "full": "not big and not link and not bridge and not fuzz and not scale",
    "big": "setup or big",
    "stock": "not link and not bridge and not fuzz and not scale",
    "link": "setup or link",
    "bridge": "setup or bridge",
    "fuzz": "setup or fuzz",
    "scale": "scale",
}

# The test modules in the order they run.
MODULES = ["bringup", "lmr", "reach", "rpc", "paths", "kapi", "apps", "qos", "link", "class_change", "hostile", "membership",
           "packages", "scale", "siw", "final"]

LINK_RATE = 4 << 20
# At 4 MiB/s a 2-core host of 2026-11-27 was the bottleneck as much as the link
# (none's p99 ratio 2.7); at 1 MiB/s the link is (20-30).
BRIDGE_RATE = 1 << 20

# `make fuzz CALLS=N PROCESSES=P`: the calls of the fuzz suite, from P processes on
# each of two nodes, in batches between which the membership, the pings and the
# leftover state are checked. Most calls wait for the network (a 20 000-call slice
# spent two thirds of its time in MAP, MALLOC and REGISTER), so 6 processes a node
# make 1.8 times the calls per second of 2 on the emulated cluster.
FUZZ_CALLS = 1_000_000
FUZZ_PROCESSES = 6
FUZZ_BATCH = 40_000


def marker_expression(suite, kernel):
    """The tests `--suite suite --kernel kernel` runs, as a marker expression."""
    expression = f"({SUITES[suite]})"
    if kernel != "debug":
        expression += " and not test_hooks"
    if kernel == "debian":
        expression += " and not sanitizer_run"
    else:
        expression += " and not stock_kernel"
    return expression


def cluster_setup(suite):
    """Cluster.up's arguments for a suite: two nodes (node 2 boots later, in a test).
    The big and stock suites hold a third of 1 GiB per node. Only the link suite
    injects faults, so only it runs on the vde segment, with node 2 behind a wire
    without a rate and node 1 behind a wirefilter link of LINK_RATE. The others run on
    the bridge segment (bridge.py), which forwards frames for a fraction of the host
    CPU that vde_switch and a wirefilter take, with jumbo frames (RoCE MTU 4096;
    measured in docs/architecture.md). The bridge suite's node 1 sits behind a tc
    link of BRIDGE_RATE."""
    queue = wire.DEFAULT_QUEUE
    if suite == "scale":
        # Eight guests of one vCPU on two host cores: each takes about 200 MiB of RSS.
        return {"nodes": 8, "mem": 768, "smp": 1, "wires": {}, "segment": "vde"}
    if suite == "link":
        return {"nodes": 2, "mem": 1024, "wires": {1: (LINK_RATE, queue), 2: (0, queue)}, "segment": "vde"}
    wires = {1: (BRIDGE_RATE, queue)} if suite == "bridge" else {}
    return {"nodes": 2, "mem": 1536 if suite in ("big", "stock") else 1024, "wires": wires, "segment": "bridge"}
