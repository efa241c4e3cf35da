"""The benchmarks of LITE against native verbs (tools/bench.py), of per-range keys
against the global rkey (tools/access_bench.py), and of the module's own code per
operation on the host (tools/host_bench.py).

    cli      bench.py's command line: the cluster, the sections, results.json, the table and chart
    steps    the benchmark's steps per section, run_steps
    runner   Bench: live commands, the tools' JSON, perftest pairs, guarded steps
    output   the parsers of perftest's tables and the tools' JSON
    report   the targets, the ratio table and the latency chart's panels
    access   access_bench.py: both remote_access modes on one cluster, alternating rounds
    hostcost host_bench.py: criterion on the module's pure paths, the share of a core at line rate
"""
