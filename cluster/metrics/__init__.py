"""Prometheus metrics of nodes, controllers and archives (issue 16): collectors that read each
process's state when Prometheus scrapes (nothing is counted twice on the write path), and the
HTTP endpoint that serves them in the exposition format (prometheus-client).

    exposition.py       the HTTP endpoint (metricsListenAddress)
    node_collector.py   a node: role, epoch, offsets, replication, disk, consumer lag, counters
"""
