"""Library code shared by the Python tools in tools/ (bench.py, qos_bench.py, ...).

The scripts in tools/ are the commands and import this package from their own
directory; vcluster.py and vwire.py are still top-level modules beside them.

    plots    the benchmarks' plots, drawn with matplotlib, as SVG and PNG
"""
