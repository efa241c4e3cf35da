"""The priority-class benchmark (tools/qos_bench.py): SW-Pri's latency class beside
bulk traffic, and beside a hostile tenant.

    cli      qos_bench.py's command line: the passes, the frontier, the hostile passes, the report
    flows    roles, flow commands, flow JSON, bandwidth
    summary  a pass's figures: summaries, medians, ratios, targets, phases, tables
    plots    the time plots per mode and the frontier plots
    hostile  the hostile tenant: attacks, scripts, its reports and table
    runner   the passes on the cluster: Runner, prepare (RPC server, Target99)
"""
