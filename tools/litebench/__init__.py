"""Library code shared by the Python tools in tools/ (bench.py, qos_bench.py, ...).

The scripts in tools/ are the commands and import this package from their own
directory; vcluster.py, vguest.py, vwire.py and vbridge.py are still top-level modules beside them.

    plots           the benchmarks' plots, drawn with matplotlib, as SVG and PNG
    soak_rounds     the soak (tools/soak.py): rounds of workloads and churn, then checks
    soak_workloads  the soak's workloads, each started, then checked
    soak_churn      the soak's churn and faults: kills, class, mode and LMR churn, leaves
    soak_kv         the soak's long-lived lite-kv store and its final check
    soak_checks     the soak's checks of the nodes' state, pings and kmemleak
    soak_report     the soak's report, as a dict and as text
    soak_common     what those share: Failed, Lost, reading a command's JSON summary
    bench_steps     the benchmark (tools/bench.py): its steps per section, run_steps
    bench_runner    the benchmark's Bench: live commands, tools' JSON, perftest pairs, guarded steps
    bench_output    the benchmark's parsers of perftest's tables and the tools' JSON
    bench_report    the benchmark's targets, ratio table and latency chart panels
    qos_flows       the QoS benchmark (tools/qos_bench.py): roles, flow commands, flow JSON, bandwidth
    qos_summary     the QoS benchmark's figures: summaries, medians, ratios, targets, phases, tables
    qos_plots       the QoS benchmark's time plots per mode and frontier plots
    qos_hostile     the QoS benchmark's hostile tenant: attacks, scripts, its reports and table
    qos_runner      the QoS benchmark's passes on the cluster: Runner, prepare (RPC server, Target99)
    vm_harness      the integration tests (tools/vmtest.py): TESTS, suites, decorators, shared helpers
    vm_tests_*      the integration tests by area, imported by vmtest.py in the order they run:
                    bringup, lmr, rpc, apps, qos, link, class_change, hostile, membership, final
"""
