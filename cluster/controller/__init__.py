"""The controller: each broker group's master, epoch and sync state set.

Nodes heartbeat it and do what it answers.

    election             the rules for one group, without I/O (elect, fence, planned switch)
    controller_service   every group's election under one lock, persisted before each answer
    controller_servicer  the gRPC adapter (proto/controller.proto)
    controller_config    the process's settings (a properties file)
    controller_process   the controller's gRPC server and its ticker (`python -m cluster
                         controller`, cluster/cli/serve_cmd.py)
    active_gate          whether this controller may answer (always, alone; with etcd, while
                         it holds the leader lease)
    etcd_client          etcd's v3 JSON gateway over HTTP (kv, txn, leases)
    etcd_store           the groups in etcd, each save a compare-and-swap under the lease
    leadership           the leader key under a lease: campaign, keepalive, step down
"""
