"""The soak (tools/soak.py): applications, benchmarks and checked traffic on a joined
cluster for minutes, with churn and faults, and everything checked at the end.

    cli        soak.py's command line: the cluster, the soak, the report
    rounds     the soak itself: rounds of workloads and churn, then the final checks
    workloads  the workloads, each started, then checked
    churn      churn and faults: kills, class, mode and LMR churn, leaves
    kv         the long-lived lite-kv store and its final check
    checks     the checks of the nodes' state, pings and kmemleak
    report     the report, as a dict and as text
    common     what those share: Failed, Lost, reading a command's JSON summary
"""
