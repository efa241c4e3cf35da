"""The virtual cluster: qemu guests running lite.ko on Soft-RoCE, on one private
segment, and what its tools run on the host.

    cluster     Cluster: boot, commands on the guests, consoles, down; Background, CommandFailed
    cli         its command line (tools/vcluster.py): up, fault, partition, status, exec, shell, down
    guest       a guest's kernel, initramfs and accelerator (KERNELS)
    process     how the host processes run: network namespaces, send buffers, real-time wires
    wire        a node's port behind a vde2 wirefilter: rate, loss, partitions
    bridge      the bridge segment: tap ports, tc links, jumbo frames
    wire_queue  the queue at a bottleneck wire, sampled (also run as a program, in the wire's namespace)
"""
