"""Prometheus metrics of nodes, controllers and archives (issue 16).

    exposition.py       the HTTP endpoint (metricsListenAddress)
    node_collector.py   a node: role, epoch, offsets, replication, disk, consumer lag, counters
"""
