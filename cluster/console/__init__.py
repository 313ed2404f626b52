"""The web console: one static page (static/console.html: HTML and a little JavaScript, no
build step) and the JSON API behind it, served by the controller for the whole cluster and by
each node for itself, on the process's metrics port (cluster/metrics/exposition.py).

    console_api.py   the API: the controller's (groups, nodes, failovers, topics and consumer
                     groups with lag, message lookup, archive history) and a node's own
"""
