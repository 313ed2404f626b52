"""The web console: one static page and its JSON API.

    console_api.py   the API: the controller's (groups, nodes, failovers, topics and consumer
                     groups with lag, message lookup, archive history) and a node's own
"""
