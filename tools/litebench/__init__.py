"""The Python tools of LITE-RS, one package; the scripts in tools/ are its commands,
each a thin entry point into a module here (tools/ is on their path as their
directory), and tools/tests/ holds its host tests.

    cluster     the virtual cluster: Cluster, guests, wires, the bridge segment (tools/vcluster.py)
    plots       the benchmarks' plots, drawn with matplotlib, as SVG and PNG
    bench       LITE against native verbs (tools/bench.py), per-range keys (tools/access_bench.py),
                the module's own code per operation on the host (tools/host_bench.py)
    qos         the priority-class benchmark and its hostile tenant (tools/qos_bench.py)
    demo        the showcase (tools/demo.py)
    vmtests     the integration tests on the virtual cluster, run by pytest (tools/vmtest.py)
    soak        the soak: workloads, churn, checks and report (tools/soak.py)
    bench_docs  docs/benchmarks.md's latest results from the benchmarks' JSON (tools/bench_docs.py)

Nothing here imports a script of tools/, and a package imports only those listed
above it (bench and qos use cluster; vmtests uses cluster, qos and demo; soak uses
cluster and vmtests' set-up steps).
"""
