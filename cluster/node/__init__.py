"""One node process: its config, its role, its gRPC server, and the local cluster launcher.

    node_config    NodeConfig: identity, admin token, client API settings, the StoreConfig
    node           Node: the embedded store, the role, the gRPC server (every service on one port)
    local_cluster  `python -m cluster local`: a master and two slaves on 127.0.0.1
"""
