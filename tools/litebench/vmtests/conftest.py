"""The integration tests' fixtures (tools/vmtest.py runs them with pytest): the
options vmtest.py passes on, the cluster every test runs on (`c`, booted once per
run), the fuzz campaign's size, and the check after every test that no node fenced
another off."""

import pytest

from litebench.cluster.cluster import Cluster
from litebench.cluster.guest import KERNELS, PROVIDERS
from litebench.vmtests.harness import TestFailed
from litebench.vmtests.suites import FUZZ_BATCH, FUZZ_CALLS, FUZZ_PROCESSES, RUN_DIR, SUITES, cluster_setup

# Where `c` keeps the cluster for the whole run (vmtest.py's report reads it).
CLUSTER = pytest.StashKey[Cluster]()


def pytest_addoption(parser):
    group = parser.getgroup("lite", "the LITE-RS virtual cluster (tools/vmtest.py)")
    group.addoption("--kernel", default="debug", choices=KERNELS, help="the guests' kernel")
    group.addoption("--suite", default="full", choices=list(SUITES), help="the suite whose cluster to boot")
    group.addoption("--run-dir", default=str(RUN_DIR), help="the cluster's run directory")
    group.addoption("--provider", default="rxe", choices=list(PROVIDERS),
                    help="the guests' soft RDMA device (siw: our kernels only)")
    group.addoption("--calls", type=int, default=FUZZ_CALLS, help="fuzz suite: calls in all")
    group.addoption("--processes", type=int, default=FUZZ_PROCESSES,
                    help="fuzz suite: fuzzing processes on each of the two nodes")
    group.addoption("--only", help="run only tests whose name contains one of these (comma-separated)")


def name(item):
    """A test's name as vmtest.py shows it: its function's, without `test_`."""
    return item.name.removeprefix("test_")


def pytest_collection_modifyitems(config, items):
    """--only: the tests whose name contains one of its comma-separated parts."""
    only = config.getoption("only")
    if not only:
        return
    parts = only.split(",")
    deselected = [item for item in items if not any(part in name(item) for part in parts)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]


@pytest.fixture(scope="session")
def c(request):
    """The cluster (every test calls it `c`): two nodes booted for the suite; node 2
    boots later, in a setup test. Down at the end of the run, however it ends."""
    config = request.config
    cluster = Cluster(config.getoption("run_dir"))
    config.stash[CLUSTER] = cluster
    try:
        cluster.up(variant=config.getoption("kernel"), provider=config.getoption("provider"),
                   **cluster_setup(config.getoption("suite")))
        yield cluster
    finally:
        cluster.down(quiet=True)


@pytest.fixture
def fuzz_campaign(request):
    """The fuzz suite's calls in all, per batch, and processes on each node (--calls, --processes)."""
    return {"calls": request.config.getoption("calls"), "batch": FUZZ_BATCH,
            "processes": request.config.getoption("processes")}


@pytest.fixture(autouse=True)
def no_node_fenced_off(request, c):
    """Only a node made to fail may be fenced off (`fails_nodes`): anywhere else a
    fence is a denial of service against every tenant of both nodes."""
    fences = len(c.fences())
    yield
    fenced = c.fences()[fences:]
    if fenced and request.node.get_closest_marker("fails_nodes") is None:
        raise TestFailed("a node fenced another off: " + "; ".join(f"node{n}: {line}" for n, line in fenced))
